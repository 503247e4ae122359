package daemon_test

// End to end: unauthenticated clients cannot flood the audit log. Every
// failed login is audited once, a locked-out source's further tries are
// only counted, and the limits hold across SSH and the admin API.

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion"
	"github.com/obmd/obmd/bastion/daemon"
)

// afDenied returns the denied audit events whose source is the address src
// (any port), oldest first, over every node.
func (o *obmd) afDenied(src string) []fdAuditRow {
	o.t.Helper()
	var out struct{ Events []fdAuditRow }
	if err := json.Unmarshal(o.mustAPI(200, "GET", "/v1/audit", nil), &out); err != nil {
		o.t.Fatalf("audit: %v", err)
	}
	var rows []fdAuditRow
	for _, e := range out.Events {
		if e.Result == "denied" && strings.HasPrefix(e.Source, src+":") {
			rows = append(rows, e)
		}
	}
	return rows
}

// afMetric is one sample of /metrics.
func (o *obmd) afMetric(series string) float64 {
	o.t.Helper()
	status, body := o.request("GET", "/metrics", nil, "", "")
	if status != 200 {
		o.t.Fatalf("GET /metrics: got %d", status)
	}
	v, _ := metricSample(string(body), series)
	return v
}

// afParallel runs n calls of try over workers goroutines.
func afParallel(n, workers int, try func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				try(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// TestAuditFloodLockedOut: a source locked out by wrong tokens keeps
// trying, on any node name: the lockout's first refusal is audited, the
// others are counted (metrics) and written nowhere.
func TestAuditFloodLockedOut(t *testing.T) {
	t.Parallel()
	const perSource, flood = 3, 40
	o := startObmd(t, func(c *daemon.Config) {
		c.AuthLimits = bastion.LimitConfig{PerSource: perSource, PerNode: 1000, Window: time.Minute, Lockout: time.Minute}
	})
	tok := o.addSimNode("lo1")
	const src = "127.0.0.21"
	for i := range perSource {
		if err := o.fdTryFrom(t, src, "lo1", "guess"); err == nil {
			t.Fatalf("guess %d authenticated", i)
		}
	}
	before := o.afMetric(`obmd_auth_attempts_total{method="password",result="denied"}`)
	users := []string{"lo1", "ghost", "lo1-", "another"}
	afParallel(flood, 8, func(i int) {
		if c, err := o.fdDialFrom(src, users[i%len(users)], gossh.Password("guess")); err == nil {
			c.Close()
			t.Error("a locked-out source authenticated")
		}
	})
	if err := o.fdTryFrom(t, src, "lo1", tok); err == nil {
		t.Errorf("right token from the locked-out source: authenticated, want refused")
	}
	rows := o.afDenied(src)
	var details []string
	for _, e := range rows {
		details = append(details, e.Detail)
	}
	want := []string{"wrong token", "wrong token", "wrong token", "rate limited (source)"}
	if strings.Join(details, "|") != strings.Join(want, "|") {
		t.Errorf("denied audit rows from %s: got %d %q, want %q (one per failure, one per lockout)", src, len(details), details, want)
	}
	if got := o.afMetric(`obmd_auth_attempts_total{method="password",result="denied"}`) - before; got < flood+1 {
		t.Errorf("denied attempts counted during the lockout: got %v, want at least %d", got, flood+1)
	}
}
