package api_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/dispatchhq/dispatch/api"
)

var (
	specOnce      sync.Once
	specValidator validator.Validator
	specErr       error
)

// openAPIValidator builds a validator of the embedded OpenAPI document once
// (the document itself is checked against the OpenAPI 3.1 schema first).
func openAPIValidator(t *testing.T) validator.Validator {
	t.Helper()
	specOnce.Do(func() {
		doc, err := libopenapi.NewDocument(api.OpenAPI)
		if err != nil {
			specErr = err
			return
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			specErr = errs[0]
			return
		}
		if ok, verrs := v.ValidateDocument(); !ok {
			var b strings.Builder
			for _, e := range verrs {
				b.WriteString(e.Message + ": " + e.Reason + "\n")
				for _, se := range e.SchemaValidationErrors {
					b.WriteString("  " + se.FieldPath + " (" + se.KeywordLocation + "): " + se.Reason + "\n")
				}
			}
			specErr = &specError{b.String()}
			return
		}
		specValidator = v
	})
	if specErr != nil {
		t.Fatalf("the OpenAPI document is not valid: %v", specErr)
	}
	return specValidator
}

type specError struct{ s string }

func (e *specError) Error() string { return e.s }

// checkAgainstSpec fails the test when a real response of the suite does not
// match what the OpenAPI document says of its route and status. Responses
// to paths the document does not describe (the tests of unknown routes)
// must be the documented error shape.
func checkAgainstSpec(t *testing.T, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	v := openAPIValidator(t)
	if strings.HasPrefix(req.URL.Path, "/console/static/") {
		// {file} may hold slashes, which an OpenAPI path template cannot
		// match; the console's tests check these responses themselves.
		return
	}
	resp := &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(bytes.NewReader(body)), Request: req}
	ok, errs := v.ValidateHttpResponse(req, resp)
	if ok {
		return
	}
	for _, e := range errs {
		if e.IsPathMissingError() || e.IsOperationMissingError() {
			if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
				t.Errorf("OpenAPI: %s %s is not described (answered %d)", req.Method, req.URL.Path, status)
			}
			continue
		}
		msg := e.Message + ": " + e.Reason
		for _, se := range e.SchemaValidationErrors {
			msg += "\n    " + se.FieldPath + " (" + se.KeywordLocation + "): " + se.Reason
		}
		t.Errorf("OpenAPI: the response to %s %s (%d) does not match the document: %s\nbody: %.500s", req.Method, req.URL.Path, status, msg, body)
	}
}

func TestOpenAPIDocumentIsServedAndValid(t *testing.T) {
	f := setup(t)
	r := f.do(t, "GET", "/api/openapi.json", "", bearer("")).want(t, http.StatusOK)
	if !bytes.Equal(r.body, api.OpenAPI) {
		t.Fatal("GET /api/openapi.json is not the embedded document")
	}
	doc := r.object(t)
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi = %v, want 3.1.0", doc["openapi"])
	}
	openAPIValidator(t)
}

// TestOpenAPIDescribesEveryRoute compares the document's paths with the
// routes the server registers, so a new route cannot go undescribed.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	doc, err := libopenapi.NewDocument(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			described[strings.ToUpper(method)+" "+path] = true
		}
	}
	srv := api.New(nil, nil, api.Config{Insecure: true, Metrics: http.NotFoundHandler()}, nil)
	for _, r := range srv.Routes() {
		key := r.Method + " " + r.Path
		if !described[key] {
			t.Errorf("route %s is not in the OpenAPI document", key)
		}
		delete(described, key)
	}
	for key := range described {
		_, path, _ := strings.Cut(key, " ")
		switch {
		case strings.HasPrefix(path, "/api/dispatch/process"): // registered only with a processor
		case strings.HasPrefix(path, "/monitoring/"): // the router's listener (its tests check these)
		default:
			t.Errorf("the OpenAPI document describes %s, which the server does not serve", key)
		}
	}
}
