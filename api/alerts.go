package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api/decode"
)

// alertDestinationView is an alert destination as the API shows it. The
// url is shown whole: only admins read it, and a Slack URL is needed to
// tell destinations apart.
type alertDestinationView struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Kind          string `json:"kind"`
	URL           string `json:"url"`
	CredentialsID string `json:"credentialsId,omitempty"`
	CreatedAt     string `json:"createdAt"`
}

func viewAlertDestination(d dispatch.AlertDestination) alertDestinationView {
	return alertDestinationView{ID: dispatch.FormatID(d.ID), Name: d.Name, Kind: d.Kind, URL: d.URL,
		CredentialsID: idOrEmpty(d.CredentialsID), CreatedAt: fmtTime(d.CreatedAt)}
}

func (s *Server) createAlertDestination(c *gin.Context) {
	b := body(c)
	d, err := decode.AlertDestination(b, s.cfg.JobRules)
	if err != nil {
		s.writeError(c, s.withMissingCredentials(c.Request.Context(), err, decode.CredentialsID(b)))
		return
	}
	if err := s.store.CreateAlertDestination(c.Request.Context(), d); err != nil {
		s.writeError(c, err)
		return
	}
	writeJSON(c, http.StatusCreated, viewAlertDestination(*d))
}

func (s *Server) listAlertDestinations(c *gin.Context) {
	ds, err := s.store.ListAlertDestinations(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	items := make([]alertDestinationView, len(ds))
	for i, d := range ds {
		items[i] = viewAlertDestination(d)
	}
	writeJSON(c, http.StatusOK, gin.H{"items": items})
}

func (s *Server) deleteAlertDestination(c *gin.Context) {
	id, ok := s.pathID(c)
	if !ok {
		return
	}
	if err := s.store.DeleteAlertDestination(c.Request.Context(), id); err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
