package api

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
)

// auth requires a bearer token from the given set. With no tokens set the
// route is open only in insecure mode. Tokens are compared in constant time
// (over their SHA-256, so lengths do not leak either) and never echoed.
func (s *Server) auth(realm string, tokens dispatch.Tokens) gin.HandlerFunc {
	// A console session stands in for the admin token. Without one (insecure
	// mode lets anyone sign in) it opens only the routes that are open
	// anyway: a realm with tokens of its own still wants one of them.
	withSession := realm != "internal" && (s.cfg.AdminToken != "" || len(tokens) == 0)
	return func(c *gin.Context) {
		// The console signs in once and then sends its session cookie
		// (and, for state changes, its CSRF token) instead of a bearer token.
		if withSession && c.GetHeader("Authorization") == "" {
			if handled, ok := s.fromSession(c); handled {
				if ok {
					c.Next()
				}
				return
			}
		}
		if len(tokens) == 0 {
			if s.cfg.Insecure {
				c.Next()
				return
			}
			s.writeError(c, dispatch.Errorf(dispatch.EForbidden, "no %s token is configured", realm))
			return
		}
		token, ok := dispatch.BearerToken(c.GetHeader("Authorization"))
		if !ok {
			c.Header("WWW-Authenticate", `Bearer realm="`+realm+`"`)
			s.writeError(c, dispatch.Errorf(dispatch.EUnauthorized, "a bearer token is required"))
			return
		}
		if !tokens.Match(token) {
			c.Header("WWW-Authenticate", `Bearer realm="`+realm+`", error="invalid_token"`)
			s.writeError(c, dispatch.Errorf(dispatch.EUnauthorized, "the bearer token is not valid for this route"))
			return
		}
		c.Next()
	}
}

// checkQuery refuses a query string that does not parse whole, naming
// each parameter that does not: Go's parser drops such a pair and keeps
// the rest, so a filter with a stray ';' or a broken escape would vanish
// and a search, or a redrive (its dryRun too), would select more than
// asked. It also refuses a name or value that is not valid UTF-8 or holds
// a NUL character: no PostgreSQL text can hold them, so a search filter
// with one would fail in the database as a 500. Request bodies are checked
// as they are read.
func (s *Server) checkQuery(c *gin.Context) {
	raw := c.Request.URL.RawQuery
	if raw == "" {
		return
	}
	var p dispatch.Problems
	query, err := url.ParseQuery(raw)
	if err != nil {
		malformedQuery(&p, raw)
		if len(p) == 0 {
			// Every pair parses alone: the whole is too long (Go's
			// urlmaxqueryparams).
			p.Add("query", "has too many parameters: %v", err)
		}
	}
	for name, vals := range query {
		bad := !utf8.ValidString(name) || strings.ContainsRune(name, 0)
		for _, v := range vals {
			bad = bad || !utf8.ValidString(v) || strings.ContainsRune(v, 0)
		}
		if bad {
			p.Add(printable(name), "must be valid UTF-8 without NUL characters")
		}
	}
	if err := p.Err(); err != nil {
		s.writeError(c, err)
	}
}

// malformedQuery notes each pair of a raw query string that url.ParseQuery
// drops: one holding a ';' (not a separator since Go 1.17), or a name or
// value that is not valid %-escaping.
// It stops past dispatch.MaxDetails: an answer lists no more, and a query
// of a megabyte of bad pairs must not cost a problem each.
func malformedQuery(p *dispatch.Problems, raw string) {
	for pair := range strings.SplitSeq(raw, "&") {
		if len(*p) > dispatch.MaxDetails {
			return
		}
		name, value, _ := strings.Cut(pair, "=")
		key, nameErr := url.QueryUnescape(name)
		if nameErr != nil {
			key = name
		}
		key = printable(key)
		switch _, valueErr := url.QueryUnescape(value); {
		case strings.Contains(pair, ";"):
			p.Add(key, "holds a ';', which does not separate parameters: escape it as %%3B")
		case nameErr != nil || valueErr != nil:
			p.Add(key, "is not valid %%-escaping")
		}
	}
}

// printable is a parameter's name as an answer may show it.
func printable(name string) string {
	if len(name) > 64 {
		name = name[:64] + "…"
	}
	return strings.ToValidUTF8(strings.ReplaceAll(name, "\x00", ""), "\uFFFD")
}

// limitBody reads the body up to MaxPayload (413 beyond) and requires JSON
// when there is a body (415 otherwise). The body is stashed for handlers.
func (s *Server) limitBody(c *gin.Context) {
	r := c.Request
	if r.ContentLength > s.cfg.MaxPayload {
		s.writeError(c, dispatch.Errorf(dispatch.ETooLarge, "the body exceeds %d bytes", s.cfg.MaxPayload))
		return
	}
	body, err := readBody(http.MaxBytesReader(c.Writer, r.Body, s.cfg.MaxPayload), r.ContentLength)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.writeError(c, dispatch.Errorf(dispatch.ETooLarge, "the body exceeds %d bytes", s.cfg.MaxPayload))
			return
		}
		s.writeError(c, dispatch.Errorf(dispatch.EInvalid, "the body could not be read"))
		return
	}
	if len(body) > 0 {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			s.writeError(c, dispatch.Errorf(dispatch.EMediaType, "the body must be application/json"))
			return
		}
	}
	c.Set(bodyKey, body)
	c.Next()
}

const bodyKey = "dispatch.body"

// readBody reads r whole. The buffer is the announced length (Content-
// Length, at most MaxPayload, checked before), so that a batch's body is
// read without io.ReadAll's doublings, but no more than readAhead is
// reserved before the body's bytes arrive: a client that announces a large
// body and sends nothing holds only that much (the sign-in takes no token).
// Once the first readAhead bytes have come, the rest is reserved at once.
func readBody(r io.Reader, announced int64) ([]byte, error) {
	if announced <= 0 {
		return io.ReadAll(r)
	}
	first := min(announced, readAhead)
	buf := bytes.NewBuffer(make([]byte, 0, first+bytes.MinRead))
	if _, err := io.CopyN(buf, r, first); err != nil {
		if errors.Is(err, io.EOF) {
			err = nil // shorter than announced: the server's reader says so if it matters
		}
		return buf.Bytes(), err
	}
	if announced > first {
		all := bytes.NewBuffer(make([]byte, 0, announced+bytes.MinRead))
		all.Write(buf.Bytes())
		buf = all
	}
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// readAhead is the most of an announced body reserved before it arrives.
const readAhead = 64 << 10

func body(c *gin.Context) []byte {
	b, _ := c.Get(bodyKey)
	out, _ := b.([]byte)
	return out
}

// logRequests logs each request's method, route, status and duration; never
// its headers, query or body.
func (s *Server) logRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	took := time.Since(start)
	method := metricMethod(c.Request.Method)
	s.metrics.requests.WithLabelValues(method, route, strconv.Itoa(c.Writer.Status())).Inc()
	s.metrics.duration.WithLabelValues(method, route).Observe(took.Seconds())
	level := slog.LevelDebug
	if c.Writer.Status() >= 500 {
		level = slog.LevelError
	}
	if ctx := c.Request.Context(); s.log.Enabled(ctx, level) {
		s.log.Log(ctx, level, "request", "method", c.Request.Method, "route", route,
			"status", c.Writer.Status(), "duration_ms", took.Milliseconds())
	}
}

// metricMethod is the method as a metric label: a client's made-up
// method is "OTHER", so it cannot add series.
func metricMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}
