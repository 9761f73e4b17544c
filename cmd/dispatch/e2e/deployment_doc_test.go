package e2e

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch/router/queue"
)

// docs/deployment.md stays true to the code: its JSON parses, the queue
// attributes it creates are the ones DISPATCH_QUEUE_CREATE uses, and its
// IAM policies grant exactly the SQS actions the code calls.
func TestDeploymentGuideMatchesTheCode(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	var attrs map[string]string
	grants := map[string][]string{} // statement Sid → actions
	for _, b := range blocks {
		var v struct {
			Statement []struct {
				Sid    string
				Action []string
			}
		}
		if err := json.Unmarshal(b[1], &v); err != nil {
			t.Errorf("a JSON block does not parse: %v\n%s", err, b[1])
			continue
		}
		for _, st := range v.Statement {
			grants[st.Sid] = st.Action
		}
	}
	// The CLI's attribute file is in a heredoc, not a json block.
	m := regexp.MustCompile(`(?s)cat > queue-attributes.json <<'EOF'\n(.*?)\nEOF`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("no queue-attributes.json in the guide")
	}
	if err := json.Unmarshal(m[1], &attrs); err != nil {
		t.Fatalf("queue-attributes.json: %v", err)
	}
	if want := queue.CreateAttributes(0); !maps.Equal(attrs, want) {
		t.Errorf("the guide's queue attributes\n%v\ndiffer from DISPATCH_QUEUE_CREATE's\n%v", attrs, want)
	}

	// The SQS actions the code calls, batch calls authorised by their
	// single-message action.
	src, err := os.ReadFile("../../../router/queue/queue.go")
	if err != nil {
		t.Fatal(err)
	}
	called := map[string]bool{}
	for _, c := range regexp.MustCompile(`\.api\.([A-Z][A-Za-z]+)\(`).FindAllSubmatch(src, -1) {
		called["sqs:"+strings.TrimSuffix(string(c[1]), "Batch")] = true
	}
	granted := map[string]bool{}
	for _, sid := range []string{"DispatchApiQueue", "DispatchRouterQueue", "OnlyWithDispatchQueueCreate"} {
		if grants[sid] == nil {
			t.Errorf("no statement %s in the guide", sid)
		}
		for _, a := range grants[sid] {
			granted[a] = true
		}
	}
	if got, want := slices.Sorted(maps.Keys(granted)), slices.Sorted(maps.Keys(called)); !slices.Equal(got, want) {
		t.Errorf("the guide grants %v; the code calls %v", got, want)
	}
	if !slices.Equal(grants["OnlyWithDispatchQueueCreate"], []string{"sqs:CreateQueue"}) {
		t.Errorf("CreateQueue is not in a statement of its own: %v", grants["OnlyWithDispatchQueueCreate"])
	}
	for _, sid := range []string{"DispatchApiQueue", "DispatchRouterQueue"} {
		if slices.Contains(grants[sid], "sqs:CreateQueue") {
			t.Errorf("%s grants CreateQueue", sid)
		}
	}
	if !slices.Equal(grants["OnlyForAQueueEncryptedWithYourKmsKey"], []string{"kms:GenerateDataKey", "kms:Decrypt"}) {
		t.Errorf("the KMS statement: %v", grants["OnlyForAQueueEncryptedWithYourKmsKey"])
	}
	for _, want := range []string{`deduplication_scope         = "messageGroup"`, `fifo_throughput_limit       = "perMessageGroupId"`} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("the Terraform example lacks %s", want)
		}
	}
}
