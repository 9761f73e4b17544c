package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
)

var statusByCode = map[string]int{
	dispatch.EInvalid:       http.StatusBadRequest,
	dispatch.EUnauthorized:  http.StatusUnauthorized,
	dispatch.EForbidden:     http.StatusForbidden,
	dispatch.ENotFound:      http.StatusNotFound,
	dispatch.EConflict:      http.StatusConflict,
	dispatch.EUnprocessable: http.StatusUnprocessableEntity,
	dispatch.ETooLarge:      http.StatusRequestEntityTooLarge,
	dispatch.EMediaType:     http.StatusUnsupportedMediaType,
	dispatch.EUnavailable:   http.StatusServiceUnavailable,
	dispatch.EInternal:      http.StatusInternalServerError,
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string                `json:"code"`
	Message string                `json:"message"`
	Details []dispatch.FieldError `json:"details,omitempty"`
}

// writeError is the one place errors become responses. A *dispatch.Error
// is shown as it is; anything else is logged and shown as "internal error".
func (s *Server) writeError(c *gin.Context, err error) {
	var de *dispatch.Error
	if !errors.As(err, &de) {
		s.log.Error("internal error", "method", c.Request.Method, "path", c.FullPath(), "err", err)
		de = dispatch.Errorf(dispatch.EInternal, "internal error")
		// An outage is not a bug: tell the client to retry (nothing was stored).
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if s.store.Ping(ctx) != nil {
			de = dispatch.Errorf(dispatch.EUnavailable, "the database is unavailable; retry later")
			c.Header("Retry-After", "1")
		}
		cancel()
	}
	status, ok := statusByCode[de.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	s.writeErrorStatus(c, status, de)
}

func (s *Server) writeErrorStatus(c *gin.Context, status int, de *dispatch.Error) {
	c.Abort()
	writeJSON(c, status, errorBody{Error: errorDetail{Code: de.Code, Message: de.Message, Details: de.Details}})
}

func (s *Server) recoverer(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			s.log.Error("panic in handler", "path", c.FullPath(), "panic", r)
			s.writeError(c, dispatch.Errorf(dispatch.EInternal, "internal error"))
		}
	}()
	c.Next()
}
