package api

import (
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api/decode"
	"github.com/dispatchhq/dispatch/webhook"
)

const maxBearerLen = 1024

func (s *Server) createCredentials(c *gin.Context) {
	f, err := decode.Object(body(c), "name", "bearerToken", "signingSecret", "algorithm", "signatureScheme", "allowedTargets")
	if err != nil {
		s.writeError(c, err)
		return
	}
	cr := dispatch.Credentials{Algorithm: dispatch.AlgorithmHMACSHA256, SignatureScheme: string(webhook.SchemeFlowCatalyst)}
	cr.Name = credentialsName(f)
	cr.AllowedTargets = f.AllowedTargets("allowedTargets")
	cr.BearerToken = f.String("bearerToken", maxBearerLen, false)
	if strings.ContainsFunc(cr.BearerToken, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		f.Add("bearerToken", "must not contain control characters")
	}
	if a := f.String("algorithm", 32, false); a != "" && a != dispatch.AlgorithmHMACSHA256 {
		f.Add("algorithm", "must be %s", dispatch.AlgorithmHMACSHA256)
	}
	if sc := f.String("signatureScheme", 32, false); sc != "" {
		if !webhook.Scheme(sc).Valid() {
			f.Add("signatureScheme", "must be FLOWCATALYST or STANDARD_WEBHOOKS")
		} else {
			cr.SignatureScheme = sc
		}
	}
	secret, generated := s.secretField(f, webhook.Scheme(cr.SignatureScheme))
	if err := f.Err(); err != nil {
		s.writeError(c, err)
		return
	}
	cr.SigningSecret = secret
	if err := s.store.CreateCredentials(c.Request.Context(), &cr); err != nil {
		s.writeError(c, err)
		return
	}
	v := viewCredentials(cr.Info(), s.now())
	if generated {
		v.SigningSecret = secret // shown this once
	}
	noStore(c)
	writeJSON(c, http.StatusCreated, v)
}

// credentialsName reads name: trimmed, at most MaxCredentialsName
// characters, no control characters ("" when absent).
func credentialsName(f *decode.Fields) string {
	name := strings.TrimSpace(f.String("name", dispatch.MaxCredentialsName, false))
	if strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		f.Add("name", "must not contain control characters")
	}
	return name
}

// secretField reads signingSecret, or generates one when absent.
func (s *Server) secretField(f *decode.Fields, scheme webhook.Scheme) (string, bool) {
	secret := f.String("signingSecret", 256, false)
	if f.Has("signingSecret") {
		if err := webhook.ValidateSecret(scheme, secret); err != nil {
			f.Add("signingSecret", "%s", err.Error())
		}
		return secret, false
	}
	gen, err := webhook.NewSecret(scheme)
	if err != nil {
		f.Add("signingSecret", "could not be generated")
	}
	return gen, true
}

func (s *Server) getCredentials(c *gin.Context) {
	id, ok := s.pathID(c)
	if !ok {
		return
	}
	cr, err := s.store.GetCredentialsInfo(c.Request.Context(), id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	usage, err := s.store.CredentialsUsage(c.Request.Context(), []int64{id})
	if err != nil {
		s.writeError(c, err)
		return
	}
	v := viewCredentials(cr, s.now())
	v.Usage = viewCredentialsUsage(usage[id])
	writeJSON(c, http.StatusOK, v)
}

// patchCredentials renames credentials ({"name": ...}) and replaces the
// targets they may be sent to ({"allowedTargets": [...]}), either or both.
// Jobs already created for a target no longer allowed end ERROR when they
// come up, unsent.
func (s *Server) patchCredentials(c *gin.Context) {
	id, ok := s.pathID(c)
	if !ok {
		return
	}
	f, err := decode.Object(body(c), "name", "allowedTargets")
	if err != nil {
		s.writeError(c, err)
		return
	}
	var (
		name    *string
		targets *[]string
	)
	if f.Has("name") {
		n := credentialsName(f)
		name = &n
	}
	if f.Has("allowedTargets") {
		t := f.AllowedTargets("allowedTargets")
		targets = &t
	}
	if name == nil && targets == nil {
		f.Add("allowedTargets", "name or allowedTargets is required (an empty allowedTargets array sends the credentials nowhere)")
	}
	if err := f.Err(); err != nil {
		s.writeError(c, err)
		return
	}
	cr, err := s.store.UpdateCredentials(c.Request.Context(), id, name, targets)
	if err != nil {
		s.writeError(c, err)
		return
	}
	writeJSON(c, http.StatusOK, viewCredentials(cr, s.now()))
}

func (s *Server) deleteCredentials(c *gin.Context) {
	id, ok := s.pathID(c)
	if !ok {
		return
	}
	if err := s.store.DeleteCredentials(c.Request.Context(), id); err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// rotateCredentials issues a new signing secret (generated unless given);
// the old one stays valid for gracePeriod (default DISPATCH_ROTATION_GRACE),
// during which deliveries carry both signatures.
func (s *Server) rotateCredentials(c *gin.Context) {
	id, ok := s.pathID(c)
	if !ok {
		return
	}
	f, err := decode.Object(body(c), "signingSecret", "gracePeriod")
	if err != nil {
		s.writeError(c, err)
		return
	}
	cur, err := s.store.GetCredentials(c.Request.Context(), id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	grace := s.cfg.RotationGrace
	if g := f.String("gracePeriod", 32, false); g != "" {
		d, err := time.ParseDuration(g)
		if err != nil || d < 0 || d > 30*24*time.Hour {
			f.Add("gracePeriod", "must be a duration from 0s to 720h, such as 24h")
		} else {
			grace = d
		}
	}
	secret, generated := s.secretField(f, webhook.Scheme(cur.SignatureScheme))
	if err := f.Err(); err != nil {
		s.writeError(c, err)
		return
	}
	cr, err := s.store.RotateCredentials(c.Request.Context(), id, secret, grace)
	if err != nil {
		s.writeError(c, err)
		return
	}
	v := viewCredentials(cr.Info(), s.now())
	if generated {
		v.SigningSecret = secret // shown this once
	}
	noStore(c)
	writeJSON(c, http.StatusOK, v)
}

// listCredentials pages through credentials, newest first; no secrets.
func (s *Server) listCredentials(c *gin.Context) {
	_, page, size, err := parsePaging(c.Request.URL.Query())
	if err != nil {
		s.writeError(c, err)
		return
	}
	creds, total, err := s.store.ListCredentials(c.Request.Context(), page, size)
	if err != nil {
		s.writeError(c, err)
		return
	}
	ids := make([]int64, len(creds))
	for i, cr := range creds {
		ids[i] = cr.ID
	}
	usage, err := s.store.CredentialsUsage(c.Request.Context(), ids)
	if err != nil {
		s.writeError(c, err)
		return
	}
	items := make([]credentialsView, len(creds))
	for i, cr := range creds {
		items[i] = viewCredentials(cr, s.now())
		items[i].Usage = viewCredentialsUsage(usage[cr.ID])
	}
	writePage(c, items, page, size, total, 0, false)
}
