package api

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

// OpenAPI is the OpenAPI 3.1 description of every route, body and error
// shape, served at GET /api/openapi.json. Tests validate the suite's real
// responses against it.
//
//go:embed openapi.json
var OpenAPI []byte

func (s *Server) openAPI(c *gin.Context) {
	c.Header("Cache-Control", "no-cache")
	c.Data(http.StatusOK, "application/json", OpenAPI)
}
