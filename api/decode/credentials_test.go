package decode

import (
	"slices"
	"testing"

	"github.com/dispatchhq/dispatch"
)

// CredentialsID reads what the decoders read as credentialsId, from a body
// they refuse for its other fields too, and 0 where they name
// credentialsId itself.
func TestCredentialsIDIsWhatTheDecodersRead(t *testing.T) {
	for body, want := range map[string]int64{
		`{"credentialsId":"12","targetUrl":"ftp://x"}`: 12,
		`{"credentialsId":12,"url":1}`:                 12,
		`{"credentialsId":"\u0031\u0032"}`:             12,
		`{"credentialsId":"abc"}`:                      0,
		`{"credentialsId":0}`:                          0,
		`{"credentialsId":-3}`:                         0,
		`{"credentialsId":1.5}`:                        0,
		`{"credentialsId":null}`:                       0,
		`{"credentialsId":{}}`:                         0,
		`{}`:                                           0,
		`[12]`:                                         0,
		`{"credentialsId":"12"`:                        0,
	} {
		if got := CredentialsID([]byte(body)); got != want {
			t.Errorf("CredentialsID(%s) = %d, want %d", body, got, want)
		}
	}

	rules := dispatch.JobRules{}
	for _, id := range []string{`"7311097302432047104"`, `7311097302432047104`} {
		j, err := CreateJob([]byte(`{"source":"s","type":"t","targetUrl":"https://e.com","payload":"","credentialsId":`+id+`}`), rules, testNow)
		if err != nil || CredentialsID([]byte(`{"credentialsId":`+id+`}`)) != j.CredentialsID {
			t.Errorf("job: %v, %v; CredentialsID does not read %s as CreateJob does", j, err, id)
		}
		body := []byte(`{"name":"n","url":"https://e.com","eventTypes":["*"],"credentialsId":` + id + `}`)
		sub, _, err := Subscription(body, rules)
		if err != nil || CredentialsID(body) != sub.CredentialsID {
			t.Errorf("subscription: %v, %v; CredentialsID does not read %s as Subscription does", sub, err, id)
		}
		body = []byte(`{"name":"n","kind":"webhook","url":"https://e.com","credentialsId":` + id + `}`)
		dest, err := AlertDestination(body, rules)
		if err != nil || CredentialsID(body) != dest.CredentialsID {
			t.Errorf("alert destination: %v, %v; CredentialsID does not read %s as AlertDestination does", dest, err, id)
		}
	}
}

func TestItemCredentialsIDs(t *testing.T) {
	got := ItemCredentialsIDs([]byte(`{"jobs":[{"credentialsId":"5","targetUrl":"ftp://x"},{"source":"s"},[],{"credentialsId":6}]}`))
	if want := []int64{5, 0, 0, 6}; !slices.Equal(got, want) {
		t.Errorf("ItemCredentialsIDs = %v, want %v", got, want)
	}
	for _, body := range []string{`{}`, `{"jobs":{}}`, `[]`, `x`} {
		if got := ItemCredentialsIDs([]byte(body)); got != nil {
			t.Errorf("ItemCredentialsIDs(%s) = %v, want nil", body, got)
		}
	}
}
