package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api/decode"
)

const (
	sessionCookie = "dispatch_session"
	csrfHeader    = "X-CSRF-Token"
	sessionTTL    = 12 * time.Hour

	// codeTooManyRequests is the error code of a throttled sign-in (429).
	codeTooManyRequests = "too_many_requests"
)

// sessions are the console's server-side sessions: the browser holds only
// a random id in an HttpOnly, SameSite=Strict cookie; the id's hash keys
// the session's CSRF token and expiry in the database, so every API replica
// serves it (a request or a sign-out that lands on another replica than
// the sign-in finds it) and a restart keeps it.
//
// A session belongs to the admin token it was signed in with: its id is
// stored keyed with that token (sessions.key), so a session signed in
// before the token changed (rotated after a leak, or set where insecure
// mode had none) is not found, and its holder must sign in again.
type sessions struct {
	db    SessionStore
	token []byte // the admin token ("" in insecure mode without one)
}

// SessionStore keeps console sessions (store.Store).
type SessionStore interface {
	CreateSession(ctx context.Context, key []byte, csrf string, expires, now time.Time) error
	GetSession(ctx context.Context, key []byte, now time.Time) (csrf string, expires time.Time, found bool, err error)
	DeleteSession(ctx context.Context, key []byte) error
}

type session struct {
	csrf    string
	expires time.Time
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// key is what a session is stored under: its id's HMAC under the admin
// token, never the id (nor anything that tests guesses of the token
// without the id, which only the cookie holds).
func (ss sessions) key(id string) []byte {
	m := hmac.New(sha256.New, ss.token)
	m.Write([]byte(id))
	return m.Sum(nil)
}

// create starts a session and returns its id (for the cookie) and CSRF token.
func (ss sessions) create(ctx context.Context, now time.Time) (id string, sess session, err error) {
	id = randomToken()
	sess = session{csrf: randomToken(), expires: now.Add(sessionTTL)}
	return id, sess, ss.db.CreateSession(ctx, ss.key(id), sess.csrf, sess.expires, now)
}

func (ss sessions) get(ctx context.Context, id string, now time.Time) (session, bool, error) {
	if id == "" {
		return session{}, false, nil // no cookie: nothing to look up
	}
	csrf, expires, found, err := ss.db.GetSession(ctx, ss.key(id), now)
	return session{csrf: csrf, expires: expires}, found, err
}

func (ss sessions) delete(ctx context.Context, id string) error {
	return ss.db.DeleteSession(ctx, ss.key(id))
}

// fromSession authenticates a request by its console session cookie. A
// request that changes state must also carry the session's CSRF token in
// X-CSRF-Token. It reports whether the request may go on; when it may not,
// the response has been written.
func (s *Server) fromSession(c *gin.Context) (handled bool, ok bool) {
	id, err := c.Cookie(sessionCookie)
	if err != nil || id == "" {
		return false, false
	}
	sess, found, err := s.sessions.get(c.Request.Context(), id, s.now())
	if err != nil {
		s.writeError(c, err)
		return true, false
	}
	if !found {
		s.writeError(c, dispatch.Errorf(dispatch.EUnauthorized, "the console session has expired; sign in again"))
		return true, false
	}
	switch c.Request.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		got := c.GetHeader(csrfHeader)
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
			s.writeError(c, dispatch.Errorf(dispatch.EForbidden, "a state change from the console needs the session's CSRF token in %s", csrfHeader))
			return true, false
		}
	}
	return true, true
}

type sessionView struct {
	CSRFToken string `json:"csrfToken"`
	ExpiresAt string `json:"expiresAt"`
	// Insecure is true when no admin token is configured (DISPATCH_INSECURE).
	Insecure bool `json:"insecure"`
}

// login exchanges the admin token for a console session.
func (s *Server) login(c *gin.Context) {
	f, err := decode.Object(body(c), "token")
	if err != nil {
		s.writeError(c, err)
		return
	}
	token := f.String("token", maxBearerLen, false)
	if err := f.Err(); err != nil {
		s.writeError(c, err)
		return
	}
	// The throttle comes before the token is looked at: a refused
	// address learns nothing, even from the right token.
	addr := signInKey(c.ClientIP())
	if wait, ok := s.signIns.begin(addr, s.now()); !ok {
		secs := max(1, int(math.Ceil(wait.Seconds())))
		c.Header("Retry-After", strconv.Itoa(secs))
		s.writeErrorStatus(c, http.StatusTooManyRequests, dispatch.Errorf(codeTooManyRequests,
			"too many failed sign-ins from this address; try again in %d s", secs))
		return
	}
	insecure := s.cfg.AdminToken == "" && s.cfg.Insecure
	if insecure && len(s.cfg.APITokens) > 0 {
		// Anyone may sign in without an admin token, so such a session
		// does not open routes with tokens of their own (see auth): the
		// console could not show a job. Say so instead of a session that
		// fails on every page.
		s.writeError(c, dispatch.Errorf(dispatch.EForbidden,
			"the console needs DISPATCH_ADMIN_TOKEN when DISPATCH_API_TOKENS is set, also in insecure mode"))
		return
	}
	if !insecure {
		if !s.adminTokens.Match(token) {
			s.log.Warn("console sign-in refused", "remote", addr)
			s.writeError(c, dispatch.Errorf(dispatch.EUnauthorized, "that is not the admin token"))
			return
		}
	}
	s.signIns.succeeded(addr)
	id, sess, err := s.sessions.create(c.Request.Context(), s.now())
	if err != nil {
		s.writeError(c, err)
		return
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true,
		Secure: s.viaHTTPS(c.Request), SameSite: http.SameSiteStrictMode, Expires: sess.expires})
	noStore(c)
	writeJSON(c, http.StatusOK, sessionView{CSRFToken: sess.csrf, ExpiresAt: fmtTime(sess.expires), Insecure: insecure})
}

// currentSession tells the console whether it is signed in, and its CSRF
// token (the page keeps it in memory only).
func (s *Server) currentSession(c *gin.Context) {
	id, _ := c.Cookie(sessionCookie)
	sess, ok, err := s.sessions.get(c.Request.Context(), id, s.now())
	if err != nil {
		s.writeError(c, err)
		return
	}
	if !ok {
		msg := "not signed in"
		if s.cfg.AdminToken == "" && s.cfg.Insecure {
			msg += " (insecure mode: no admin token is configured, any token signs in)"
		}
		s.writeError(c, dispatch.Errorf(dispatch.EUnauthorized, "%s", msg))
		return
	}
	noStore(c)
	writeJSON(c, http.StatusOK, sessionView{CSRFToken: sess.csrf, ExpiresAt: fmtTime(sess.expires),
		Insecure: s.cfg.AdminToken == "" && s.cfg.Insecure})
}

// logout ends the session (CSRF-checked like every state change).
func (s *Server) logout(c *gin.Context) {
	handled, ok := s.fromSession(c)
	if !handled {
		s.writeError(c, dispatch.Errorf(dispatch.EUnauthorized, "not signed in"))
		return
	}
	if !ok {
		return
	}
	id, _ := c.Cookie(sessionCookie)
	if err := s.sessions.delete(c.Request.Context(), id); err != nil {
		s.writeError(c, err)
		return
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true,
		Secure: s.viaHTTPS(c.Request), SameSite: http.SameSiteStrictMode, MaxAge: -1})
	c.Status(http.StatusNoContent)
}
