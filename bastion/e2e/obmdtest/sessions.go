package obmdtest

// Helpers of the revocation, isolation and hostile-input tests
// (bastion/e2e/access, replicas, sshdoor): the live sessions as the admin
// API lists them, many sessions started at once (RunMany), a bounded
// context, a median. The clients whose end they
// watch are in clients.go.

import (
	"context"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// Session is a live session as GET /v1/sessions shows it.
type Session struct {
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

// Sessions lists label's live sessions.
func (o *Daemon) Sessions(label string) []Session {
	o.T.Helper()
	var out struct{ Sessions []Session }
	if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/sessions?node="+url.QueryEscape(label), nil), &out); err != nil {
		o.T.Fatalf("sessions: %v", err)
	}
	return out.Sessions
}

// SessionKinds is the sorted kinds of label's live sessions, joined by ",".
func (o *Daemon) SessionKinds(label string) string {
	var k []string
	for _, s := range o.Sessions(label) {
		k = append(k, s.Kind)
	}
	sort.Strings(k)
	return strings.Join(k, ",")
}

// Context is a context bounded by e2eWait.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// AccessChange is one kind of access change.
type AccessChange struct {
	Name string
	Why  string // the reason users are shown
	Key  bool   // the SSH sessions authenticate with a key (removed by the change)
	// Change makes the change through the admin API.
	Change func(a *Admin, label, fp string)
}

// AccessChanges returns every kind of access change a tenant must not
// outlive.
func AccessChanges() []AccessChange {
	return []AccessChange{
		{Name: "rotate", Why: "token rotated", Change: func(a *Admin, label, _ string) {
			a.MustAPI(200, "POST", "/node/"+label+"/token", nil)
		}},
		{Name: "revoke", Why: "token revoked", Change: func(a *Admin, label, _ string) {
			a.MustAPI(200, "DELETE", "/node/"+label+"/token", nil)
		}},
		{Name: "key-removal", Why: "key removed", Key: true, Change: func(a *Admin, label, fp string) {
			a.MustAPI(200, "DELETE", "/v1/nodes/"+label+"/keys/"+url.PathEscape(fp), nil)
		}},
		{Name: "node-deletion", Why: "node deleted", Change: func(a *Admin, label, _ string) {
			a.MustAPI(200, "DELETE", "/node/"+label, nil)
		}},
		{Name: "info-change", Why: "node changed", Change: func(a *Admin, label, _ string) {
			a.MustAPI(200, "PUT", "/v1/nodes/"+label, map[string]any{"type": "sim", "info": map[string]string{"addr": "elsewhere"}})
		}},
	}
}

// RunMany starts n sessions of label from src with auth, each running
// cmd (a console if ""), on connections of 4 sessions each (the most one connection holds),
// and returns once they are started; ended is done once all have ended
// (they end with their connections, when t ends, at the latest).
func RunMany(t *testing.T, o *Daemon, src, label string, auth gossh.AuthMethod, cmd string, n int, ended *sync.WaitGroup) {
	t.Helper()
	for i := 0; i < n; i += 4 {
		c, err := o.DialFrom(src, label, auth)
		if err != nil {
			t.Fatalf("log in to %s from %s: %v", label, src, err)
		}
		t.Cleanup(func() { c.Close() })
		for range min(4, n-i) {
			s, err := c.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			if cmd == "" { // a console
				if err := s.Shell(); err != nil {
					t.Fatal(err)
				}
				ended.Go(func() { s.Wait() }) // ends with its session or c
				continue
			}
			ended.Go(func() { s.Run(cmd) }) // ends with its session or c
		}
	}
}
