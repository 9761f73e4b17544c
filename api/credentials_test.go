package api_test

import (
	"crypto/rand"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// otherReplica returns a store over f's database sealing under a key of
// its own: credentials it creates cannot be opened by f's API.
func otherReplica(t *testing.T, f *fixture) *store.Store {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	sealer, err := store.NewSealer(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(f.pool, store.Options{NodeID: 2, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The credentials list, one credentials' page and a change of name or
// targets show no secret, and open none: credentials this replica cannot
// decrypt (sealed under a key it lacks) neither break the list, the
// console's Credentials page, nor answer a change that was made with an
// error.
func TestCredentialsListAndChangesNeedNoKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const path = "/api/admin/dispatch/credentials"
	var readable struct{ ID string }
	f.do(t, "POST", path, `{"name":"readable"}`).want(t, http.StatusCreated).decode(t, &readable)
	other := otherReplica(t, f)
	sealed := dispatch.Credentials{Name: "sealed elsewhere", BearerToken: "bt_elsewhere_0123456789", SigningSecret: "whsec_elsewhere",
		Algorithm: dispatch.AlgorithmHMACSHA256, SignatureScheme: "FLOWCATALYST", AllowedTargets: []string{"https://example.com"}}
	if err := other.CreateCredentials(t.Context(), &sealed); err != nil {
		t.Fatal(err)
	}
	if _, err := other.RotateCredentials(t.Context(), sealed.ID, "whsec_elsewhere_next", time.Hour); err != nil {
		t.Fatal(err)
	}
	id := dispatch.FormatID(sealed.ID)
	if _, err := f.store.GetCredentials(t.Context(), sealed.ID); !errors.Is(err, store.ErrWrongKey) {
		t.Fatalf("the premise: this replica cannot open them; GetCredentials: %v", err)
	}

	type item struct {
		ID                      string   `json:"id"`
		Name                    string   `json:"name"`
		HasBearerToken          bool     `json:"hasBearerToken"`
		PreviousSecretExpiresAt string   `json:"previousSecretExpiresAt"`
		AllowedTargets          []string `json:"allowedTargets"`
	}
	var page struct{ Items []item }
	f.do(t, "GET", path, "").want(t, http.StatusOK).decode(t, &page)
	if len(page.Items) != 2 || page.Items[0].ID != id || page.Items[1].ID != readable.ID {
		t.Fatalf("list = %+v, want both credentials, newest first", page.Items)
	}
	if got := page.Items[0]; got.Name != "sealed elsewhere" || !got.HasBearerToken || got.PreviousSecretExpiresAt == "" {
		t.Errorf("listed %+v, want its name, its bearer token and its rotation's grace period shown", got)
	}

	var one item
	f.do(t, "GET", path+"/"+id, "").want(t, http.StatusOK).decode(t, &one)
	if one.Name != "sealed elsewhere" || !one.HasBearerToken {
		t.Errorf("GET %s = %+v, want it shown as listed", id, one)
	}

	var changed item
	f.do(t, "PATCH", path+"/"+id, `{"name":"renamed","allowedTargets":["https://partner.example"]}`).
		want(t, http.StatusOK).decode(t, &changed)
	stored, err := other.GetCredentials(t.Context(), sealed.ID)
	if err != nil {
		t.Fatal(err)
	}
	for what, v := range map[string][2]string{"answered": {changed.Name, changed.AllowedTargets[0]}, "stored": {stored.Name, stored.AllowedTargets[0]}} {
		if v != [2]string{"renamed", "https://partner.example"} {
			t.Errorf("%s: %q, want the change", what, v)
		}
	}
}

// Every answer that carries a secret (a generated signing secret, shown
// once; a console session's CSRF token) is marked Cache-Control: no-store,
// so no browser or proxy cache keeps it.
func TestAnswersCarryingASecretAreNotStored(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const path = "/api/admin/dispatch/credentials"
	created := f.do(t, "POST", path, `{}`).want(t, http.StatusCreated)
	var c struct{ ID, SigningSecret string }
	created.decode(t, &c)
	rotated := f.do(t, "POST", path+"/"+c.ID+"/rotate", `{}`).want(t, http.StatusOK)
	login := f.do(t, "POST", "/api/console/login", `{"token":"`+adminToken+`"}`, bearer("")).want(t, http.StatusOK)
	session := f.do(t, "GET", "/api/console/session", "", bearer(""),
		cookie((&http.Response{Header: login.header}).Cookies()[0])).want(t, http.StatusOK)
	for name, r := range map[string]response{"create credentials": created, "rotate credentials": rotated,
		"console sign-in": login, "console session": session} {
		if got := r.header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s: Cache-Control %q, want no-store", name, got)
		}
	}
	if c.SigningSecret == "" {
		t.Error("the premise: the created credentials' secret was generated and shown")
	}
}
