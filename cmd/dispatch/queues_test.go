package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// routerJSON GETs path on the router's listener and decodes the answer.
func (in *instance) routerJSON(path string, v any) int {
	in.t.Helper()
	resp, err := http.Get(in.routerURL + path)
	if err != nil {
		in.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, v); err != nil {
		in.t.Fatalf("GET %s: %q: %v", path, body, err)
	}
	return resp.StatusCode
}

func writeRouterConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "router.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The router configuration file in seed 002's shape names the queue; a
// second queue that does not exist stops neither delivery nor the process,
// and the router's /health/ready and /monitoring/queues say which it is.
func TestQueuesFromTheRouterConfigurationFile(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv()
	dbURL, q := storetest.NewDatabase(t), sqstest.New(t, 30*time.Second)
	missing := strings.TrimSuffix(q.URL, q.Name) + "t-absent-" + q.Name
	file := writeRouterConfig(t, `{
  "queues": [
    {"queueUri": "`+q.URL+`", "connections": 2},
    {"queueUri": "`+missing+`", "visibilityTimeout": 60}
  ],
  "processingPools": [{"code": "DISPATCH-POOL", "concurrency": 5}]
}`)
	in := startWith(t, "all", dbURL, q, map[string]string{"DISPATCH_QUEUE_URL": "", "DISPATCH_ROUTER_CONFIG": file})
	rc := newReceiver(t, nil)
	j := in.createJob(jobBody(rc.URL, nil))
	in.waitStatus(j.ID, 20*time.Second, "COMPLETED")

	var ready struct {
		Status string `json:"status"`
		Queues []struct{ Name, Status, Error string }
	}
	eventually(t, 10*time.Second, func() bool {
		return in.routerJSON("/health/ready", &ready) == http.StatusServiceUnavailable && len(ready.Queues) == 2 && ready.Queues[1].Status == "DOWN"
	}, func() string { return "the router's /health/ready does not name the missing queue" })
	if ready.Queues[0].Name != q.Name || ready.Queues[0].Status != "UP" || ready.Queues[1].Name != "t-absent-"+q.Name || ready.Queues[1].Error == "" {
		t.Errorf("/health/ready = %+v", ready)
	}
	var queues []struct {
		Name, Status             string
		Connections              int
		VisibilityTimeoutSeconds int
		MessagesReceived         int
	}
	in.routerJSON("/monitoring/queues", &queues)
	if len(queues) != 2 || queues[0].Connections != 2 || queues[0].MessagesReceived < 1 || queues[0].Status != "UP" || queues[1].Status != "DOWN" {
		t.Errorf("/monitoring/queues = %+v", queues)
	}
	// The API stays ready: its default queue answers.
	if code := in.do("GET", "/health/ready", "", nil, nil); code != http.StatusOK {
		t.Errorf("the API's /health/ready = %d with one of two queues missing, want 200", code)
	}
}
