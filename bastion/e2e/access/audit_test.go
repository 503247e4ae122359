package access

// End to end: the audit trail stays complete but bounded. A tenant
// flooding reads or refused requests writes a row per window, not a row per
// request; power actions stay a row each; rows past audit.retention are
// deleted in the background while logins go on.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db"
)

// TestAuditRowsBounded: one tenant polling power_status as fast as it can
// over 8 keep-alive connections for 3 s (and 100 calls at least), and
// sending bad boot devices (400, refused before any BMC call), writes at
// most two rows per aggregation window of each (its first request, then a
// count per window), and every request is counted; its power actions are a
// row each. Eight calls at
// once on one node are over the default cap on sessions calling its BMC
// (sessions.max_bmc_per_node, 4: each concurrent power read opens a BMC
// session of its own), which answers the surplus busy, as it should
// (TestBMCCaps); this test is about the audit, so it lifts that
// cap.
func TestAuditRowsBounded(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) {
			c.DB.DSN = dsn
			c.Sessions.MaxBMCPerNode = -1
		})
		tok := o.AddSimNode("ar")
		base := "http://" + o.AdminAddr() + "/node/ar/"
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 8, MaxIdleConnsPerHost: 8}}
		defer client.CloseIdleConnections()
		call := func(method, route, body string) int {
			req, err := http.NewRequest(method, base+route+"?token="+url.QueryEscape(tok), strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return 0
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return 0
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}

		// At least 3 s and 100 power_status calls (a loaded machine may
		// take longer to make them).
		const flood, minFlood = 3 * time.Second, 100
		var statuses, refused atomic.Int64
		start := time.Now()
		more := func() bool {
			return time.Since(start) < flood || statuses.Load() < minFlood && time.Since(start) < obmdtest.Timeout
		}
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for more() {
					if w == 0 { // one connection sends what the driver refuses
						if code := call("PUT", "boot_device", `{"bootdev":"floppy"}`); code != http.StatusBadRequest {
							t.Errorf("bad boot device: got %d, want 400", code)
							return
						}
						refused.Add(1)
						continue
					}
					if code := call("GET", "power_status", ""); code != http.StatusOK {
						t.Errorf("power_status: got %d, want 200", code)
						return
					}
					statuses.Add(1)
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		const actions = 10
		for range actions {
			if code := call("POST", "power_on", ""); code != http.StatusOK {
				t.Fatalf("power_on: got %d", code)
			}
		}
		if statuses.Load() < minFlood {
			t.Fatalf("only %d power_status requests in %v: the flood proves nothing", statuses.Load(), took)
		}

		// Every request is counted once its window has ended.
		want := map[string]int64{"power.status ok": statuses.Load(), "bootdev refused": refused.Load(), "power.on ok": actions}
		var rows, events map[string]int64
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			rows, events = o.AuditTotals("ar")
			if events["power.status ok"] == want["power.status ok"] && events["bootdev refused"] == want["bootdev refused"] &&
				events["power.on ok"] == want["power.on ok"] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("audit of ar: events %v, want %v", events, want)
			}
		}
		// Two rows per window at most: a key's first event, then a count
		// per window (again a first after a window without one).
		cfg, err := o.Cfg.WithDefaults()
		if err != nil {
			t.Fatal(err)
		}
		window := cfg.Audit.AggregateWindow
		windows := int64(took/window) + 2
		for _, k := range []string{"power.status ok", "bootdev refused"} {
			if rows[k] > 2*windows {
				t.Errorf("%s: %d requests in %v wrote %d rows, want at most %d (two per %v)",
					k, want[k], took, rows[k], 2*windows, window)
			}
		}
		if rows["power.on ok"] != actions {
			t.Errorf("power.on: got %d rows, want %d (a row each)", rows["power.on ok"], actions)
		}
		t.Logf("%d power_status and %d refused requests in %v: %d and %d rows", want["power.status ok"], want["bootdev refused"],
			took.Round(time.Millisecond), rows["power.status ok"], rows["bootdev refused"])
	})
}

// TestAuditRetention: rows older than audit.retention are deleted in the
// background, in batches, while logins go on: each login answers within a
// generous bound, and the old rows are all gone, the recent ones kept.
func TestAuditRetention(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		const old = 20 * db.PurgeBatch
		fillOldAudit(t, dsn, old)
		o := obmdtest.Start(t, func(c *daemon.Config) {
			c.DB.DSN = dsn
			c.Audit.PurgeInterval = 50 * time.Millisecond // the first pass, too
		})
		tok := o.AddSimNode("rt")
		oldLeft := func() bool {
			var out struct{ Events []obmdtest.AuditRow }
			if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/audit?node=old&limit=1", nil), &out); err != nil {
				t.Fatal(err)
			}
			return len(out.Events) > 0
		}
		const bound = 5 * time.Second
		during, logins := 0, 0
		for deadline := time.Now().Add(60 * time.Second); oldLeft(); logins++ {
			if time.Now().After(deadline) {
				t.Fatalf("old audit rows still there after a minute")
			}
			start := time.Now()
			res, err := o.ExecGo("rt", tok, "power-status")
			if err != nil || res.Code != 0 {
				t.Fatalf("login during the purge: %v, %v", res, err)
			}
			if took := time.Since(start); took > bound {
				t.Errorf("a login during the purge took %v, want at most %v", took, bound)
			}
			if oldLeft() {
				during++ // it began and ended while the purge went on
			}
		}
		if during == 0 {
			t.Errorf("no login ran while the purge did (%d logins): the test proves nothing", logins)
		}
		purged := `"msg":"audit_purged","rows":` + fmt.Sprint(old)
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(o.Logs.String(), purged); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("log: want audit_purged with %d rows (one pass)", old)
				break
			}
		}
		if rows, _ := o.AuditTotals("rt"); rows["auth ok"] == 0 {
			t.Errorf("recent rows: got %v, want the logins' kept", rows)
		}
		t.Logf("%d logins, %d of them during the purge of %d rows", logins, during, old)
	})
}

// fillOldAudit writes n audit rows of node "old" from 100 days ago into the
// database at dsn, before obmd opens it.
func fillOldAudit(t *testing.T, dsn string, n int) {
	t.Helper()
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	s, err := db.Open(ctx, dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-100 * 24 * time.Hour)
	for i := range n { // read events: queued, committed hundreds at a time
		e := db.AuditEvent{At: at.Add(time.Duration(i) * time.Millisecond), Node: "old", Actor: "http:token",
			Action: "power.status", Source: "10.0.0.7:1", Result: "ok", Detail: "on"}
		if err := s.Audit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
}
