package replicas

// A database that stops answering must not hang revocation (issue 11, item
// 3): with the SQLite file's filesystem frozen (fsfreeze), or a MariaDB
// server or PostgreSQL cluster stopped (SIGSTOP), every access change answers an error within
// the change bound, /readyz fails, logins fail cleanly with a message, and
// all of it recovers when the database does. A change whose outcome was
// unknown when its bound passed fails closed until the database decides
// it: a late revocation stands, a late grant is undone.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
)

// outageBound is the change_timeout of these tests (the default is 5 s).
const outageBound = 3 * time.Second

// outageSlack is what an answer may take beyond the bound: cutting the
// node's sessions, and a loaded CI machine.
const outageSlack = 3 * time.Second

// TestFrozenDisk: SQLite on an ext4 loop mount frozen with fsfreeze. Reads
// still work from the page cache; writes block in the kernel, and the
// first change's commit completes only after the thaw.
func TestFrozenDisk(t *testing.T) {
	fs := dbtest.MountLoopFS(t)
	// No poll (and so no write probe) during the test: the first change
	// is the write that the frozen disk holds, mid-commit.
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.DB.DSN, c.Access.ChangeTimeout, c.Access.Poll = filepath.Join(fs.Dir, "obmd.db"), outageBound, time.Hour
	})
	t.Cleanup(fs.Thaw) // runs before the daemon's stop (last in, first out)
	storeOutage(t, o, fs.Freeze, fs.Thaw, true)
}

// TestFrozenDiskIdle: a disk that freezes while nothing writes is noticed
// too: reads still answer, so /readyz's write probe (and the change
// watcher's) is what sees it; logins are then refused with the banner.
func TestFrozenDiskIdle(t *testing.T) {
	fs := dbtest.MountLoopFS(t)
	o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = filepath.Join(fs.Dir, "obmd.db") })
	t.Cleanup(fs.Thaw)
	tok := o.AddSimNode("n1")
	time.Sleep(1100 * time.Millisecond) // the last write probe is over
	fs.Freeze()
	start := time.Now()
	obmdtest.WaitUntil(t, "/readyz to fail", func() bool {
		code, body, err := outageRequest(o, "GET", "/readyz", nil)
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(string(body), "not completing writes")
	})
	t.Logf("/readyz failed %v after the freeze", time.Since(start).Round(time.Millisecond))
	outageLoginFails(t, o, "n1", tok)
	fs.Thaw()
	obmdtest.WaitUntil(t, "/readyz to pass again", func() bool {
		code, _, err := outageRequest(o, "GET", "/readyz", nil)
		return err == nil && code == http.StatusOK
	})
	obmdtest.WaitUntil(t, "logins again", func() bool {
		res, err := o.ExecGo("n1", tok, "power-status")
		return err == nil && res.Code == 0
	})
}

// TestStoppedDatabase: a MariaDB server, then a PostgreSQL cluster, of the
// test's own, stopped with SIGSTOP: connections stay open and nothing
// answers, reads included.
func TestStoppedDatabase(t *testing.T) {
	servers := []struct {
		name  string
		start func(t testing.TB) (dsn string, stop, cont func())
	}{
		{"mysql", func(t testing.TB) (string, func(), func()) { m := dbtest.StartMariaDB(t); return m.DSN, m.Stop, m.Cont }},
		{"postgres", func(t testing.TB) (string, func(), func()) {
			p := dbtest.StartPostgres(t)
			return p.DSN, p.Stop, p.Cont
		}},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			dsn, stop, cont := srv.start(t)
			o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn; c.Access.ChangeTimeout = outageBound })
			t.Cleanup(cont)
			storeOutage(t, o, stop, cont, false)
		})
	}
}

// outageChange is one access change the outage tests make.
type outageChange struct {
	node, action, method, path string
	body                       any
}

// storeOutage runs the outage: stop stops the database, resume brings it
// back; readsWork says reads keep working meanwhile (a frozen disk), so
// that changes get as far as their commit and their outcome is unknown.
func storeOutage(t *testing.T, o *obmdtest.Daemon, stop, resume func(), readsWork bool) {
	toks := map[string]string{}
	for _, n := range []string{"rot", "rev", "key", "chg", "del", "add", "other"} {
		toks[n] = o.AddSimNode(n)
	}
	removed, _ := obmdtest.NewKey(t)
	fp := o.AddKey("key", removed.PublicKey())
	granted, _ := obmdtest.NewKey(t)
	grantedFP := keys.Fingerprint(granted.PublicKey())
	changes := []outageChange{
		{"rot", "token.rotate", "POST", "/node/rot/token", nil},
		{"rev", "token.revoke", "DELETE", "/v1/nodes/rev/token", nil},
		{"key", "key.remove", "DELETE", "/v1/nodes/key/keys/" + url.PathEscape(fp), nil},
		{"chg", "node.update", "PUT", "/v1/nodes/chg", map[string]any{"type": "sim", "info": map[string]any{"addr": "sim-2"}}},
		{"del", "node.delete", "DELETE", "/node/del", nil},
		{"add", "key.add", "POST", "/v1/nodes/add/keys",
			map[string]string{"key": strings.TrimSpace(string(gossh.MarshalAuthorizedKey(granted.PublicKey())))}},
	}
	consoles := map[string]*obmdtest.GoSession{}
	for _, c := range changes {
		v := o.GoConsole(t, c.node, toks[c.node], obmdtest.SessionOpts{PTY: true, Merge: true})
		v.Out.Wait(t, "console of "+c.node, 0, "console of "+c.node)
		consoles[c.node] = v
	}
	// The consoles' login and session rows are audited in the background
	// (db.DeferredAudit); committed now (GET /v1/audit commits them), so
	// that the commit a frozen disk holds is a change's.
	if code, body, err := outageRequest(o, "GET", "/v1/audit", nil); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/audit before the outage: %d %s, %v", code, body, err)
	}

	stop()
	var wg sync.WaitGroup
	for _, c := range changes {
		wg.Add(1)
		go func() { // ends with its request, bounded by the client's timeout
			defer wg.Done()
			start := time.Now()
			code, body, err := outageRequest(o, c.method, c.path, c.body)
			took := time.Since(start)
			t.Logf("%s %s during the outage: %d after %v: %s", c.method, c.path, code, took.Round(time.Millisecond), bytes.TrimSpace(body))
			switch {
			case err != nil:
				t.Errorf("%s %s: %v after %v", c.method, c.path, err, took)
			case code != http.StatusServiceUnavailable || !strings.Contains(string(body), "access change not completed"):
				t.Errorf("%s %s: got %d %s, want 503 saying the change was not completed", c.method, c.path, code, body)
			case took > outageBound+outageSlack:
				t.Errorf("%s %s: answered after %v, want within the bound %v", c.method, c.path, took, outageBound)
			}
		}()
	}
	wg.Wait()
	obmdtest.WaitUntil(t, "/readyz to fail", func() bool {
		code, _, err := outageRequest(o, "GET", "/readyz", nil)
		return err == nil && code == http.StatusServiceUnavailable
	})
	outageLoginFails(t, o, "other", toks["other"])
	// A change made once this replica knows the database is unusable
	// changes nothing, and says so at once.
	start := time.Now()
	code, body, err := outageRequest(o, "POST", "/node/other/token", nil)
	if took := time.Since(start); err != nil || code != http.StatusServiceUnavailable ||
		!strings.Contains(string(body), "nothing was changed") || took > outageBound+outageSlack {
		t.Errorf("rotation of other later in the outage: got %d %s, %v after %v, want 503, nothing changed", code, body, err, took)
	}
	for _, c := range changes {
		v := consoles[c.node]
		if readsWork { // the changes reached the database: their nodes fail closed
			v.End.Wait(t, "console of "+c.node)
			if !strings.Contains(v.Out.String(), "not confirmed") {
				t.Errorf("console of %s: cut without the reason; screen %q", c.node, obmdtest.Tail(v.Out.String(), 300))
			}
		} else if v.End.Ended() { // nothing was stored: nothing to cut
			t.Errorf("console of %s ended, though the change never reached the database: %q", c.node, obmdtest.Tail(v.Out.String(), 300))
		}
	}

	resume()
	obmdtest.WaitUntil(t, "/readyz to pass again", func() bool {
		code, _, err := outageRequest(o, "GET", "/readyz", nil)
		return err == nil && code == http.StatusOK
	})
	obmdtest.WaitUntil(t, "logins again, with other's token from before the outage", func() bool {
		res, err := o.ExecGo("other", toks["other"], "power-status")
		return err == nil && res.Code == 0
	})
	if readsWork {
		outageSettled(t, o, changes, toks, grantedFP)
	} else {
		outageUnchanged(t, o, toks, fp)
	}
	// And changes work again, within the bound.
	start = time.Now()
	tok := o.Rotate("rot")
	if took := time.Since(start); took > outageBound {
		t.Errorf("a rotation after the outage took %v", took)
	}
	if res, err := o.ExecGo("rot", tok, "power-status"); err != nil || res.Code != 0 {
		t.Errorf("login with the token rotated after the outage: got %v, %v", res, err)
	}
}

// outageLoginFails: a login while the database is down fails, with the
// banner saying why, well within the pre-auth bound.
func outageLoginFails(t *testing.T, o *obmdtest.Daemon, node, tok string) {
	t.Helper()
	var banner string
	start := time.Now()
	conn, err := net.Dial("tcp", o.SSHAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(start.Add(40 * time.Second)) // a login that hangs fails here, not at the test's timeout
	c, _, _, err := gossh.NewClientConn(conn, o.SSHAddr(), &gossh.ClientConfig{User: node,
		Auth: []gossh.AuthMethod{gossh.Password(tok)}, HostKeyCallback: gossh.InsecureIgnoreHostKey(),
		BannerCallback: func(msg string) error { banner = msg; return nil }})
	took := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatalf("login during the outage: admitted after %v", took)
	}
	t.Logf("login during the outage: %v after %v", err, took.Round(time.Millisecond))
	if !strings.Contains(banner, "cannot reach its database") {
		t.Errorf("login during the outage: banner %q, want it to say why", banner)
	}
	if took > 10*time.Second {
		t.Errorf("login during the outage took %v to fail, want well within the 30 s pre-auth bound", took)
	}
}

// outageSettled: after a frozen disk, each change whose outcome was
// unknown is settled: audited with its outcome, its node admitted again
// at the epoch the database holds, a grant stored late removed.
func outageSettled(t *testing.T, o *obmdtest.Daemon, changes []outageChange, toks map[string]string, grantedFP string) {
	t.Helper()
	late := 0
	stored := map[string]bool{}
	for _, c := range changes {
		obmdtest.WaitUntil(t, c.action+" of "+c.node+" settled and audited", func() bool {
			var out struct {
				Events []struct{ Action, Result, Detail string }
			}
			if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/audit?node="+c.node, nil), &out); err != nil {
				t.Fatal(err)
			}
			for _, e := range out.Events {
				if e.Action == c.action && strings.Contains(e.Detail, "timed out") {
					t.Logf("%s of %s: %s %q", c.action, c.node, e.Result, e.Detail)
					if strings.Contains(e.Detail, "late") {
						late++
						stored[c.node] = true
					}
					return true
				}
			}
			return false
		})
	}
	// SQLite has one writer: one change's commit is held, the others wait
	// for its lock. PostgreSQL commits concurrently: each change may be
	// held in the WAL's flush, and each is settled as it was stored.
	switch oneWriter := !strings.HasPrefix(o.Cfg.DB.DSN, "postgres"); {
	case oneWriter && late != 1:
		t.Errorf("changes stored after the thaw: got %d, want 1 (the one whose commit the frozen disk held)", late)
	case late < 1:
		t.Errorf("changes stored after the thaw: none, want those whose commits the frozen disk held")
	}
	// A token taken away late is refused from then on (the settlement
	// moved the mark of the logins' kept reads: access.Gate.AccessAt);
	// one whose change was not stored still opens.
	for _, n := range []string{"rot", "rev", "del"} {
		res, err := o.ExecGo(n, toks[n], "power-status")
		if admitted := err == nil && res.Code == 0; admitted == stored[n] {
			t.Errorf("login on %s with its token from before the outage (change stored late: %v): admitted %v (%v, %v)",
				n, stored[n], admitted, res, err)
		}
	}
	if got := string(o.MustAPI(200, "GET", "/v1/nodes/add/keys", nil)); strings.Contains(got, grantedFP) {
		t.Errorf("the key added during the outage (told it failed) is registered: %s", got)
	}
	for _, n := range []string{"rev", "key", "chg", "add"} { // nodes that still exist
		tok := o.Rotate(n)
		if res, err := o.ExecGo(n, tok, "power-status"); err != nil || res.Code != 0 {
			t.Errorf("login on %s after settling: got %v, %v", n, res, err)
		}
	}
}

// outageUnchanged: after a stopped server, where no change reached it,
// nothing changed: old tokens and keys still work.
func outageUnchanged(t *testing.T, o *obmdtest.Daemon, toks map[string]string, fp string) {
	t.Helper()
	for _, n := range []string{"rot", "rev", "del"} {
		if res, err := o.ExecGo(n, toks[n], "power-status"); err != nil || res.Code != 0 {
			t.Errorf("login on %s with its token from before the outage: got %v, %v (nothing was stored)", n, res, err)
		}
	}
	if got := string(o.MustAPI(200, "GET", "/v1/nodes/key/keys", nil)); !strings.Contains(got, fp) {
		t.Errorf("the key whose removal failed is gone: %s", got)
	}
}

// outageRequest is an admin request that reports, rather than fails on, a
// transport error (it runs in goroutines), bounded well past the change
// bound so that a hang shows as such.
func outageRequest(o *obmdtest.Daemon, method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, "http://"+o.AdminAddr()+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.SetBasicAuth("admin", o.AdminToken())
	client := &http.Client{Timeout: outageBound + 30*time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}
