package daemon_test

// Helpers of the revocation, isolation and hostile-input tests
// (e2e_revoke_test.go, e2e_hostile_test.go): the live sessions as the admin
// API lists them, a bounded context, a median. The clients whose end they
// watch are in clients_test.go.

import (
	"context"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"
)

// rvSession is a live session as GET /v1/sessions shows it.
type rvSession struct {
	ID   string `json:"id"`
	Node string `json:"node"`
	Kind string `json:"kind"`
	User string `json:"user"`
	// Expires and Cert: of a certificate login.
	Expires time.Time `json:"expires"`
	Cert    struct {
		CA     string `json:"ca"`
		Serial uint64 `json:"serial"`
		KeyID  string `json:"key_id"`
	} `json:"cert"`
}

// rvSessions lists label's live sessions.
func (o *obmd) rvSessions(label string) []rvSession {
	o.t.Helper()
	var out struct{ Sessions []rvSession }
	if err := json.Unmarshal(o.mustAPI(200, "GET", "/v1/sessions?node="+url.QueryEscape(label), nil), &out); err != nil {
		o.t.Fatalf("sessions: %v", err)
	}
	return out.Sessions
}

// rvKinds is the sorted kinds of label's live sessions, joined by ",".
func (o *obmd) rvKinds(label string) string {
	var k []string
	for _, s := range o.rvSessions(label) {
		k = append(k, s.Kind)
	}
	sort.Strings(k)
	return strings.Join(k, ",")
}

// rvCtx is a context bounded by e2eWait.
func rvCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	t.Cleanup(cancel)
	return ctx
}

// median of ds (0 for none).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
