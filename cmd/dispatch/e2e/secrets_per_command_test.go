package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// Each command asks for the secrets it reads and no more: a router starts
// without the API's tokens and the encryption key (the key that opens
// every stored secret had to be copied onto every router only to start
// it), migrate with the database URL alone. A command still refuses to
// start without a secret it reads, naming only that one.
func TestEachCommandRequiresOnlyTheSecretsItReads(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	api := startWith(t, "api", dbURL, q, map[string]string{"DISPATCH_LOCAL_DELIVERY": "false"})
	startWith(t, "router", dbURL, q, map[string]string{"DISPATCH_API_TOKENS": "", "DISPATCH_ENCRYPTION_KEY": "",
		"DISPATCH_PROCESS_URL": api.apiURL + "/api/dispatch/process"})
	rc := newReceiver(t, nil)
	api.createJob(jobBody(rc.URL, nil))
	eventually(t, 20*time.Second, func() bool { return rc.count() == 1 }, func() string {
		return "the job not delivered through a router started without the API's secrets"
	})

	if out, code := runBinary(t, []string{"DATABASE_URL=" + dbURL}, "migrate"); code != 0 {
		t.Errorf("migrate with the database URL alone: exit %d\n%s", code, out)
	} else if strings.Contains(out, "DISPATCH_NODE_ID") {
		// Only the API makes ids: a command that does not read the
		// setting is not told to set it.
		t.Errorf("migrate warns about DISPATCH_NODE_ID, which it does not read:\n%s", out)
	}
	out, code := runBinary(t, []string{"DATABASE_URL=" + dbURL, "DISPATCH_ADMIN_TOKEN=" + adminToken}, "router")
	if code == 0 || !strings.Contains(out, "DISPATCH_INTERNAL_TOKEN is required") ||
		strings.Contains(out, "DISPATCH_API_TOKENS") || strings.Contains(out, "DISPATCH_ENCRYPTION_KEY") {
		t.Errorf("a router without its internal token: exit %d, want a refusal naming that token only:\n%s", code, out)
	}
}
