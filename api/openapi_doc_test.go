package api_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch/api"
)

// What generators and validators need of the document, checked in Go
// too (make openapi/check runs Redocly, swagger-parser and tsc on it):
// a unique operationId on every operation, a license with an identifier or
// a URL, and request bodies whose optional fields carry no `default`
// (openapi-typescript's default makes a defaulted property required).
func TestOpenAPIDocumentServesGenerators(t *testing.T) {
	var doc struct {
		Info struct {
			License struct{ Name, Identifier, URL string }
		}
		Paths      map[string]map[string]json.RawMessage
		Components struct {
			Schemas map[string]json.RawMessage
		}
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Info.License.Identifier == "" && doc.Info.License.URL == "" {
		t.Error("info.license has neither identifier nor url")
	}
	camel := regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
	seen := map[string]string{}
	var requestSchemas []string
	for path, item := range doc.Paths {
		for method, raw := range item {
			if !strings.Contains("get post put patch delete", method) {
				continue
			}
			var op struct {
				OperationID string          `json:"operationId"`
				RequestBody json.RawMessage `json:"requestBody"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			where := strings.ToUpper(method) + " " + path
			switch {
			case op.OperationID == "":
				t.Errorf("%s has no operationId", where)
			case seen[op.OperationID] != "":
				t.Errorf("%s and %s share the operationId %s", where, seen[op.OperationID], op.OperationID)
			case !camel.MatchString(op.OperationID):
				t.Errorf("%s: operationId %q is not lowerCamelCase", where, op.OperationID)
			}
			seen[op.OperationID] = where
			for _, m := range regexp.MustCompile(`#/components/schemas/(\w+)`).FindAllStringSubmatch(string(op.RequestBody), -1) {
				requestSchemas = append(requestSchemas, m[1])
			}
		}
	}
	for _, name := range requestSchemas {
		var s struct {
			Required   []string
			Properties map[string]map[string]any
		}
		if err := json.Unmarshal(doc.Components.Schemas[name], &s); err != nil {
			t.Fatal(err)
		}
		for prop, v := range s.Properties {
			if _, has := v["default"]; has {
				t.Errorf("request schema %s: %s has a default; generated clients would require it (say the default in its description)", name, prop)
			}
		}
	}
	if len(requestSchemas) == 0 {
		t.Error("no request body refers to a schema: the document's shape changed")
	}
}
