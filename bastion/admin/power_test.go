package admin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol"
)

func TestPowerRoutes(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		e.mustNode("n2") // no token
		tok := e.mustToken("n1")
		q := "?token=" + tok
		tests := []struct {
			name, method, path, body string
			code                     int
			want                     string            // exact body
			cmd                      *commands.Command // nil: the runner is not called
		}{
			{"power on", "POST", "/node/n1/power_on" + q, "", 200, "", &commands.Command{Name: commands.CmdPowerOn}},
			{"power off", "POST", "/node/n1/power_off" + q, "", 200, "", &commands.Command{Name: commands.CmdPowerOff}},
			{"power cycle", "POST", "/node/n1/power_cycle" + q, `{"force":false}`, 200, "", &commands.Command{Name: commands.CmdPowerCycle}},
			{"power cycle force", "POST", "/node/n1/power_cycle" + q, `{"force":true}`, 200, "", &commands.Command{Name: commands.CmdPowerCycle, Force: true}},
			{"power cycle no body", "POST", "/node/n1/power_cycle" + q, "", 200, "", &commands.Command{Name: commands.CmdPowerCycle}},
			{"power cycle extra field", "POST", "/node/n1/power_cycle" + q, `{"force":true,"x":1}`, 200, "", &commands.Command{Name: commands.CmdPowerCycle, Force: true}},
			{"power cycle bad JSON", "POST", "/node/n1/power_cycle" + q, `{"force":`, 400, errJSON("body is truncated JSON"), nil},
			{"power cycle bad force", "POST", "/node/n1/power_cycle" + q, `{"force":"yes"}`, 400, errJSON(`body: field "force": got a JSON string, want a boolean`), nil},
			{"boot device", "PUT", "/node/n1/boot_device" + q, `{"bootdev":"A"}`, 200, "", &commands.Command{Name: commands.CmdBootdev, Device: "A", Persistent: true}},
			{"boot device pxe", "PUT", "/node/n1/boot_device" + q, `{"bootdev":"pxe"}`, 200, "", &commands.Command{Name: commands.CmdBootdev, Device: "pxe", Persistent: true}},
			{"boot device none given", "PUT", "/node/n1/boot_device" + q, `{}`, 400, errJSON(`field "bootdev" is required`), nil},
			{"boot device no body", "PUT", "/node/n1/boot_device" + q, "", 400, errJSON(`body is empty; want a JSON object`), nil},
			{"power status", "GET", "/node/n1/power_status" + q, "", 200, `{"power_status":"Mock Status"}` + "\n", &commands.Command{Name: commands.CmdPowerStatus}},
			{"bad token", "POST", "/node/n1/power_on?token=" + tok + "x", "", 401, errJSON(errBadToken), nil},
			{"no token", "POST", "/node/n1/power_on", "", 401, errJSON(errBadToken), nil},
			{"empty token", "GET", "/node/n1/power_status?token=", "", 401, errJSON(errBadToken), nil},
			{"other node's token", "GET", "/node/n2/power_status" + q, "", 401, errJSON(errBadToken), nil},
			{"unknown node", "POST", "/node/n3/power_off" + q, "", 401, errJSON(errBadToken), nil},
			{"bad label", "POST", "/node/a%00/power_off" + q, "", 400, errJSON(`label "a\x00" contains a control character`), nil},
			{"console bad token", "GET", "/node/n1/console?token=nope", "", 401, errJSON(errBadToken), nil},
			{"console unknown node", "GET", "/node/n3/console" + q, "", 401, errJSON(errBadToken), nil},
			{"wrong method", "GET", "/node/n1/power_on" + q, "", 404, errJSON("not found"), nil},
			{"oversized", "POST", "/node/n1/power_cycle" + q, `{"force":"` + strings.Repeat("x", DefaultMaxBody) + `"}`, 413,
				errJSON("request body is larger than 65536 bytes"), nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := e.do(tt.method, tt.path, tt.body, noAuth)
				if r.code != tt.code || r.body != tt.want {
					t.Errorf("got %d %q, want %d %q", r.code, r.body, tt.code, tt.want)
				}
				calls := e.runner.take()
				if tt.cmd == nil {
					if len(calls) != 0 {
						t.Errorf("runner calls: got %+v, want none", calls)
					}
					return
				}
				if len(calls) != 1 {
					t.Fatalf("runner calls: got %+v, want one", calls)
				}
				c := calls[0]
				if !reflect.DeepEqual(c.Cmd, *tt.cmd) {
					t.Errorf("command: got %+v, want %+v", c.Cmd, *tt.cmd)
				}
				if c.Req.Node != "n1" || c.Req.Actor != "http:token" || !strings.HasPrefix(c.Req.Source, "127.0.0.1:") || c.Req.Session == "" {
					t.Errorf("request: got %+v, want node n1, actor http:token, a source and a session", c.Req)
				}
				if len(c.Sessions) != 1 || c.Sessions[0].Kind != sessions.KindExec || c.Sessions[0].User != "token" || c.Sessions[0].ID != c.Req.Session {
					t.Errorf("live sessions during the command: got %+v, want this exec session", c.Sessions)
				}
				if live := e.reg.List(""); len(live) != 0 {
					t.Errorf("sessions after the request: got %+v, want none", live)
				}
			})
		}
		evs := e.auditEvents("n1")
		if !hasAudit(evs, "http:token", "auth", "denied") {
			t.Errorf("audit: got %+v, want a denied http:token auth", evs)
		}
		for _, ev := range evs {
			if strings.Contains(ev.Detail, tok) {
				t.Errorf("audit detail holds the token: %+v", ev)
			}
		}
		if logs := e.logs.String(); strings.Contains(logs, tok) || strings.Contains(logs, "token=") {
			t.Errorf("logs hold the token or a query string:\n%s", logs)
		}
		if logs := e.logs.String(); !strings.Contains(logs, `"route":"POST /node/{label}/power_on"`) {
			t.Errorf("logs: want a request line with the route pattern")
		}
	})
}

func TestPowerErrors(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		q := "?token=" + e.mustToken("n1")
		tests := []struct {
			name string
			err  error
			code int
			want string
		}{
			{"busy", fmt.Errorf("power-on n1: %w", commands.ErrBusy), 409, errJSON(commands.ErrBusy.Error())},
			{"usage", &commands.UsageError{Msg: "bootdev: unknown device \"C\""}, 400, errJSON(`bootdev: unknown device "C"`)},
			{"bad boot device", fmt.Errorf("bootdev C on n1: %w", sol.ErrBadBootDevice), 400, errJSON("unsupported boot device")},
			{"timeout", fmt.Errorf("power-on n1: %w: %w", commands.ErrTimeout, context.DeadlineExceeded), 504,
				errJSON("the BMC did not answer")},
			// The driver's detail (here the BMC's address) stays in the log.
			{"BMC refuses credentials", sol.NewError(sol.FaultCredentials, errors.New("connect to BMC 192.0.2.9:623: RAKP2 mismatch")), 500,
				errJSON("the BMC refused obmd's credentials")},
			{"unclassified BMC failure", errors.New("power-on n1: BMC 192.0.2.9:623 said \x1b[31mno\x1b[0m"), 500, errJSON("the BMC operation failed")},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				e.runner.set(commands.CmdPowerOn, tt.err)
				r := e.do("POST", "/node/n1/power_on"+q, "", noAuth)
				if r.code != tt.code || r.body != tt.want {
					t.Errorf("got %d %q, want %d %q", r.code, r.body, tt.code, tt.want)
				}
			})
		}
		if logs := e.logs.String(); !strings.Contains(logs, "192.0.2.9:623") {
			t.Errorf("logs: want the driver's detail (the BMC's address) in\n%s", logs)
		}
	})
}

// TestRevokedMidCommand: a rotation while a command runs cancels it, and the
// request answers 401 with the reason.
func TestRevokedMidCommand(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		q := "?token=" + e.mustToken("n1")
		e.runner.block = true
		done := make(chan resp, 1)
		go func() { done <- e.do("POST", "/node/n1/power_cycle"+q, `{"force":true}`, noAuth) }()
		<-e.runner.started
		e.mustToken("n1")
		r := <-done
		if want := errJSON(`access to n1 was revoked (token rotated)`); r.code != 401 || r.body != want {
			t.Errorf("got %d %q, want 401 %q", r.code, r.body, want)
		}
	})
}

// TestPowerCallsAtBMCCap: the node-token power routes count against the
// node's cap on sessions calling its BMC (sessions.max_bmc_per_node, 4 by
// default): over it a call is busy, 409 with the reason, and its runner is
// never called; a console stream calls no BMC and still opens.
func TestPowerCallsAtBMCCap(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		q := "?token=" + e.mustToken("n1")
		e.runner.block = true
		done := make(chan resp, 4)
		for range 4 {
			go func() { done <- e.do("GET", "/node/n1/power_status"+q, "", noAuth) }()
			<-e.runner.started
		}
		r := e.do("POST", "/node/n1/power_on"+q, "", noAuth)
		if want := errJSON("too many sessions calling the BMC on node n1 (limit 4); try again when one ends"); r.code != 409 || r.body != want {
			t.Errorf("a fifth call: got %d %q, want 409 %q", r.code, r.body, want)
		}
		if calls := e.runner.take(); len(calls) != 4 {
			t.Errorf("runner calls: got %d, want the 4 blocked ones", len(calls))
		}
		res, err := e.srv.Client().Get(e.srv.URL + "/node/n1/console" + q)
		if err != nil || res.StatusCode != 200 {
			t.Errorf("a console stream beside them: got %v, %v; want 200", res, err)
		}
		if err == nil {
			res.Body.Close()
		}
		e.mustToken("n1") // the rotation ends the blocked calls
		for range 4 {
			if r := <-done; r.code != 401 {
				t.Errorf("a blocked call: got %d %q, want 401 (cut)", r.code, r.body)
			}
		}
	})
}

// TestEpochMovedAfterAuth: a rotation between the token check and the
// session registration is caught by the re-read of the epoch.
func TestEpochMovedAfterAuth(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		var racy *racyStore
		e := newEnv(t, eng, func(s Store) Store { racy = &racyStore{Store: s.(*db.Store)}; return racy })
		e.mustNode("n1")
		q := "?token=" + e.mustToken("n1")
		for _, path := range []string{"/node/n1/power_status", "/node/n1/console"} {
			racy.once = sync.Once{}
			r := e.do("GET", path+q, "", noAuth)
			if racy.err != nil {
				t.Fatalf("injected rotation: %v", racy.err)
			}
			if want := errJSON(`access to node "n1" changed during authentication; try again`); r.code != 401 || r.body != want {
				t.Errorf("%s: got %d %q, want 401 %q", path, r.code, r.body, want)
			}
			// The injected rotation also replaced the token.
			q = "?token=" + e.mustToken("n1")
		}
		if calls := e.runner.take(); len(calls) != 0 {
			t.Errorf("runner calls: got %+v, want none", calls)
		}
		if live := e.reg.List(""); len(live) != 0 {
			t.Errorf("sessions: got %+v, want none", live)
		}
	})
}

func TestConsole(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		tok := e.mustToken("n1")
		res, err := e.srv.Client().Get(e.srv.URL + "/node/n1/console?token=" + tok)
		if err != nil {
			t.Fatalf("get console: %v", err)
		}
		defer res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/octet-stream" ||
			!reflect.DeepEqual(res.TransferEncoding, []string{"chunked"}) {
			t.Fatalf("console: got %d %q %v, want 200 application/octet-stream chunked",
				res.StatusCode, res.Header.Get("Content-Type"), res.TransferEncoding)
		}
		br := bufio.NewReader(res.Body)
		for i := 0; i < 3; i++ {
			line, err := br.ReadString('\n')
			if want := fmt.Sprintf("line %d\n", i); err != nil || line != want {
				t.Fatalf("line %d: got %q, %v, want %q", i, line, err, want)
			}
		}
		live := e.reg.List("n1")
		if len(live) != 1 || live[0].Kind != sessions.KindHTTPConsole {
			t.Errorf("sessions: got %+v, want one http-console", live)
		}
		// Revoking the token ends the stream before the admin call returns.
		if r := e.admin("DELETE", "/node/n1/token", ""); r.code != 200 {
			t.Fatalf("revoke: got %d %q", r.code, r.body)
		}
		if live, unwinding := e.reg.List("n1"), e.reg.Unwinding(); len(live) != 0 || unwinding != 0 {
			t.Errorf("sessions after revoke: got %+v listed, %d unwinding; want none ended", live, unwinding)
		}
		ended := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, br)
			ended <- err
		}()
		select {
		case err := <-ended:
			if err != nil {
				t.Errorf("stream end: got %v, want a clean end", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("console stream did not end after revocation")
		}
		if !hasAudit(e.auditEvents("n1"), "http:token", "session.start", "ok") {
			t.Errorf("audit: want a session.start")
		}
	})
}

// TestTokenRefusalsAlike: on every node-token route, an unknown node, a
// node with no token issued, no token, an empty one and a wrong one get
// the same status and body, and none is answered sooner than FailDelay, so
// the HTTP door tells no more about which nodes exist than the SSH door.
func TestTokenRefusalsAlike(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		const delay = 60 * time.Millisecond
		e.failDelay = delay
		e.restart()
		e.mustNode("n1")
		tok := e.mustToken("n1")
		e.mustNode("bare") // never given a token
		routes := []struct{ method, route, body string }{
			{"POST", "power_on", ""}, {"POST", "power_off", ""}, {"POST", "power_cycle", `{"force":true}`},
			{"PUT", "boot_device", `{"bootdev":"A"}`}, {"GET", "power_status", ""}, {"GET", "console", ""},
		}
		kinds := []struct{ name, label, query string }{
			{"unknown node", "ghost", "?token=" + tok},
			{"no token issued", "bare", "?token=" + tok},
			{"no token", "n1", ""},
			{"empty token", "n1", "?token="},
			{"wrong token", "n1", "?token=" + tok + "x"},
		}
		for _, rt := range routes {
			for _, k := range kinds {
				start := time.Now()
				r := e.do(rt.method, "/node/"+k.label+"/"+rt.route+k.query, rt.body, noAuth)
				took := time.Since(start)
				if r.code != 401 || r.body != errJSON(errBadToken) {
					t.Errorf("%s, %s: got %d %q, want 401 %q", rt.route, k.name, r.code, r.body, errJSON(errBadToken))
				}
				if took < delay {
					t.Errorf("%s, %s: answered after %v, want at least %v", rt.route, k.name, took, delay)
				}
			}
		}
		if calls := e.runner.take(); len(calls) != 0 {
			t.Errorf("runner calls: got %+v, want none", calls)
		}
	})
}

// unanswering is the database as a node-token request meets it when it
// does not answer: the token check's read fails (access), or, once the
// token matched, the session's admit cannot read the node's epoch.
type unanswering struct {
	*db.Store
	access bool
}

var errNotAnswering = errors.New("the database is not answering")

func (s *unanswering) Access(ctx context.Context, label string) (db.Access, error) {
	if s.access {
		return db.Access{}, errNotAnswering
	}
	return s.Store.Access(ctx, label)
}

func (s *unanswering) Epoch(context.Context, string) (int64, error) { return 0, errNotAnswering }

// TestDatabaseNotAnswering: a node-token request that cannot be verified
// because the database does not answer is told so with 503 (try again),
// never 500, whether the token check's read or the session's admit failed,
// and whether the node exists; nothing runs.
func TestDatabaseNotAnswering(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		var down *unanswering
		e := newEnv(t, eng, func(s Store) Store { down = &unanswering{Store: s.(*db.Store)}; return down })
		e.mustNode("n1")
		q := "?token=" + e.mustToken("n1")
		want := errJSON(errUnverified)
		for _, read := range []bool{true, false} {
			down.access = read
			for _, path := range []string{"/node/n1/power_status" + q, "/node/n1/console" + q, "/node/n9/power_status" + q} {
				if !read && strings.HasPrefix(path, "/node/n9") {
					continue // an unknown node never gets as far as admit
				}
				if r := e.do("GET", path, "", noAuth); r.code != 503 || r.body != want {
					t.Errorf("%s with the database not answering (token check's read failing: %v): got %d %q, want 503 %q",
						path, read, r.code, r.body, want)
				}
			}
		}
		if calls := e.runner.take(); len(calls) != 0 {
			t.Errorf("runner calls: got %+v, want none", calls)
		}
		if live := e.reg.List(""); len(live) != 0 {
			t.Errorf("sessions: got %+v, want none", live)
		}
	})
}
