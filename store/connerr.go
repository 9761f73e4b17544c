package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Reasons a ConnectError gives, short enough for a log field or a health
// answer.
const (
	ReasonRefused      = "connection refused"
	ReasonAuth         = "authentication failed"
	ReasonNoDatabase   = "database does not exist"
	ReasonHostNotFound = "host not found"
	ReasonTimeout      = "timed out"
	ReasonServer       = "refused by the server"
	ReasonOther        = "cannot connect"
)

// ConnectError is a failure to reach or sign in to PostgreSQL, said so an
// operator can act on it: why (Reason, one of the Reason* constants), what
// the server or the network answered (Detail), and what to do (Hint). It
// never holds the password.
type ConnectError struct {
	Reason string
	Detail string
	Hint   string
	err    error
}

func (e *ConnectError) Error() string {
	s := e.Reason + ": " + e.Detail
	if e.Hint != "" {
		s += "; " + e.Hint
	}
	return s
}

func (e *ConnectError) Unwrap() error { return e.err }

// Explain turns a failure to connect to PostgreSQL into a *ConnectError
// that says why; nil and other errors are returned as they are.
func Explain(err error) error {
	var ce *pgconn.ConnectError
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	cfg := ce.Config
	where := cfg.Host
	if !strings.HasPrefix(cfg.Host, "/") { // not a Unix socket directory
		where = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	out := &ConnectError{err: ce}
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "3D000": // invalid_catalog_name
		out.Reason = ReasonNoDatabase
		out.Detail = fmt.Sprintf("database %q does not exist on %s", cfg.Database, where)
		out.Hint = "create it with: " + createdb(cfg)
	case errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000"): // invalid_password, invalid_authorization_specification
		out.Reason = ReasonAuth
		out.Detail = fmt.Sprintf("%s at %s: %s", pgErr.Severity, where, pgErr.Message)
		out.Hint = "check the user and password in DATABASE_URL (and the server's pg_hba.conf)"
	case errors.As(err, &pgErr):
		out.Reason = ReasonServer
		out.Detail = fmt.Sprintf("%s at %s: %s (SQLSTATE %s)", pgErr.Severity, where, pgErr.Message, pgErr.Code)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT) && strings.HasPrefix(cfg.Host, "/"):
		out.Reason = ReasonRefused
		out.Detail = "nothing accepts connections at " + where
		out.Hint = "is PostgreSQL running there? check the host and port in DATABASE_URL"
	case errors.As(err, &dnsErr):
		out.Reason = ReasonHostNotFound
		out.Detail = fmt.Sprintf("cannot resolve %q: %s", cfg.Host, dnsErr.Err)
		out.Hint = "check the host in DATABASE_URL"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		out.Reason = ReasonTimeout
		out.Detail = "no answer from " + where
		out.Hint = "check the host and port in DATABASE_URL and that no firewall drops the connection"
	default:
		out.Reason = ReasonOther
		out.Detail = fmt.Sprintf("%s: %v", where, errors.Unwrap(ce))
	}
	return out
}

// createdb is the command that creates cfg's database on its server.
func createdb(cfg *pgconn.Config) string {
	args := []string{"createdb", "-h", cfg.Host}
	if !strings.HasPrefix(cfg.Host, "/") || cfg.Port != 5432 {
		args = append(args, "-p", strconv.Itoa(int(cfg.Port)))
	}
	if cfg.User != "" {
		args = append(args, "-U", cfg.User)
	}
	args = append(args, cfg.Database)
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
