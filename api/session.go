package api

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api/decode"
)

const (
	sessionCookie = "dispatch_session"
	csrfHeader    = "X-CSRF-Token"
	sessionTTL    = 12 * time.Hour
	maxSessions   = 10_000

	// codeTooManyRequests is the error code of a throttled sign-in (429).
	codeTooManyRequests = "too_many_requests"
)

// sessions are the console's server-side sessions: the browser holds only
// a random id in an HttpOnly, SameSite=Strict cookie; the id's hash maps to
// the session's CSRF token and expiry here. They live in this process (a
// restart signs operators out; with several API replicas, route the console
// to one or sign in per replica).
type sessions struct {
	mu   sync.Mutex
	byID map[[32]byte]session
}

type session struct {
	csrf    string
	expires time.Time
}

func newSessions() *sessions { return &sessions{byID: map[[32]byte]session{}} }

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session and returns its id (for the cookie) and CSRF token.
func (ss *sessions) create(now time.Time) (id string, sess session) {
	id = randomToken()
	sess = session{csrf: randomToken(), expires: now.Add(sessionTTL)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, v := range ss.byID { // expired sessions go when new ones come
		if !now.Before(v.expires) {
			delete(ss.byID, k)
		}
	}
	if len(ss.byID) >= maxSessions {
		for k := range ss.byID { // a flood of logins evicts an arbitrary session, never grows memory
			delete(ss.byID, k)
			break
		}
	}
	ss.byID[sha256.Sum256([]byte(id))] = sess
	return id, sess
}

func (ss *sessions) get(id string, now time.Time) (session, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	key := sha256.Sum256([]byte(id))
	sess, ok := ss.byID[key]
	if !ok {
		return sess, false
	}
	if !now.Before(sess.expires) {
		delete(ss.byID, key)
		return sess, false
	}
	return sess, true
}

func (ss *sessions) delete(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byID, sha256.Sum256([]byte(id)))
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
	sess, found := s.sessions.get(id, s.now())
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
	if !insecure {
		want := sha256.Sum256([]byte(s.cfg.AdminToken))
		got := sha256.Sum256([]byte(token))
		if s.cfg.AdminToken == "" || subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
			s.log.Warn("console sign-in refused", "remote", addr)
			s.writeError(c, dispatch.Errorf(dispatch.EUnauthorized, "that is not the admin token"))
			return
		}
	}
	s.signIns.succeeded(addr)
	id, sess := s.sessions.create(s.now())
	http.SetCookie(c.Writer, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true,
		Secure: s.viaHTTPS(c.Request), SameSite: http.SameSiteStrictMode, Expires: sess.expires})
	c.JSON(http.StatusOK, sessionView{CSRFToken: sess.csrf, ExpiresAt: fmtTime(sess.expires), Insecure: insecure})
}

// currentSession tells the console whether it is signed in, and its CSRF
// token (the page keeps it in memory only).
func (s *Server) currentSession(c *gin.Context) {
	id, _ := c.Cookie(sessionCookie)
	sess, ok := s.sessions.get(id, s.now())
	if id == "" || !ok {
		msg := "not signed in"
		if s.cfg.AdminToken == "" && s.cfg.Insecure {
			msg += " (insecure mode: no admin token is configured, any token signs in)"
		}
		s.writeError(c, dispatch.Errorf(dispatch.EUnauthorized, "%s", msg))
		return
	}
	c.JSON(http.StatusOK, sessionView{CSRFToken: sess.csrf, ExpiresAt: fmtTime(sess.expires),
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
	s.sessions.delete(id)
	http.SetCookie(c.Writer, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true,
		Secure: s.viaHTTPS(c.Request), SameSite: http.SameSiteStrictMode, MaxAge: -1})
	c.Status(http.StatusNoContent)
}
