package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch/config"
)

// The deployment guide's router configuration with several queues is one
// dispatch loads as the guide says: its queues, the first the default, and
// its pools.
func TestDeploymentGuideRouterConfigurationLoads(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	var file []byte
	for _, b := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(doc, -1) {
		if strings.Contains(string(b[1]), "processingPools") && strings.Contains(string(b[1]), "queues") {
			file = b[1]
		}
	}
	if file == nil {
		t.Fatal("the deployment guide has no router configuration with queues and processingPools")
	}
	path := filepath.Join(t.TempDir(), "router.yaml")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DISPATCH_INSECURE": "true", "DISPATCH_ROUTER_CONFIG": path}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the guide's router configuration does not load: %v", err)
	}
	if len(cfg.Queues) < 2 || len(cfg.Pools) < 2 {
		t.Fatalf("the guide's configuration: queues %+v, pools %+v; want several of each", cfg.Queues, cfg.Pools)
	}
	for _, q := range cfg.Queues {
		if q.Connections < 1 {
			t.Errorf("queue %+v", q)
		}
	}
	for _, want := range []string{"300", "3,000", "70,000", "19,000", "per message group", "quotas-messages.html"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("the guide does not say %q (SQS FIFO's quotas)", want)
		}
	}
}
