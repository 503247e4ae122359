package daemon_test

// Hostile input end to end: every input below gets a clear, specific
// refusal and changes nothing in the database; no control character an
// attacker sends comes back raw; SSH features obmd does not offer are
// refused without harming the connection; session limits hold; and a
// client that stops reading cannot outlive a revocation.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol/sim"
)

// hsSnapshot is everything the admin API shows of nodes and keys, plus the
// database's access epoch (any access change moves it).
func (o *obmd) hsSnapshot(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	nodes := o.mustAPI(200, "GET", "/v1/nodes", nil)
	b.Write(nodes)
	var list struct{ Nodes []struct{ Label string } }
	if err := json.Unmarshal(nodes, &list); err != nil {
		t.Fatalf("nodes: %v", err)
	}
	for _, n := range list.Nodes {
		b.Write(o.mustAPI(200, "GET", "/v1/nodes/"+url.PathEscape(n.Label), nil))
		b.Write(o.mustAPI(200, "GET", "/v1/nodes/"+url.PathEscape(n.Label)+"/keys", nil))
	}
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	dsn := o.Cfg.DB.DSN
	if dsn == "" {
		dsn = daemon.DefaultDB(o.Cfg.Daemon.StateDir)
	}
	st, err := db.Open(context.Background(), dsn, quiet)
	if err != nil {
		t.Fatalf("open the database: %v", err)
	}
	defer st.Close()
	epoch, err := st.LatestChange(context.Background())
	if err != nil {
		t.Fatalf("latest change: %v", err)
	}
	fmt.Fprintf(&b, "\nepoch %d", epoch)
	return b.String()
}

// hsRaw reports the first raw control character (other than \n, \r, \t)
// in s, or "".
func hsRaw(s string) string {
	for _, r := range s {
		if r != '\n' && r != '\r' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
			return fmt.Sprintf("%U", r)
		}
	}
	return ""
}

// TestHostileHTTP sends each hostile request to the admin API and checks
// the status, the error text, that no control character comes back raw,
// and that the database is unchanged.
func TestHostileHTTP(t *testing.T) {
	o := startObmd(t)
	token := o.addSimNode("n1")
	signer, _ := newKey(t)
	o.addKey("n1", signer.PublicKey())
	keyLine := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	long := strings.Repeat("x", 81)
	huge := `{"type":"sim","info":{"addr":"` + strings.Repeat("a", 70<<10) + `"}}`
	sim := map[string]any{"type": "sim", "info": map[string]string{"addr": "sim"}}
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		want               string // in the error text
	}{
		{"oversized obmd body", "PUT", "/node/n2", huge, 413, "larger than"},
		{"oversized v1 body", "PUT", "/v1/nodes/n2", huge, 413, "larger than"},
		{"oversized key body", "POST", "/v1/nodes/n1/keys", `{"key":"` + strings.Repeat("A", 70<<10) + `"}`, 413, "larger than"},
		{"truncated JSON", "PUT", "/node/n2", `{"type":"sim","info":{"addr":`, 400, "truncated"},
		{"not JSON", "PUT", "/v1/nodes/n2", "type=sim", 400, "not valid JSON"},
		{"JSON list", "PUT", "/node/n2", `[{"type":"sim"}]`, 400, "want an object"},
		{"trailing data", "PUT", "/node/n2", `{"type":"sim","info":{"addr":"a"}} {}`, 400, "after the JSON value"},
		{"wrong field type", "PUT", "/v1/nodes/n2", `{"type":"ipmi","info":{"addr":"a","user":"u","pass":"p","port":"623"}}`, 400, "port"},
		{"empty body", "PUT", "/node/n2", "", 400, "empty"},
		{"invalid UTF-8", "PUT", "/node/n2", "{\"type\":\"sim\",\"info\":{\"addr\":\"\xff\"}}", 400, "not valid UTF-8"},
		{"NUL in info", "PUT", "/node/n2", `{"type":"sim","info":{"addr":"a\u0000b"}}`, 400, "control characters"},
		{"control sequence in info", "PUT", "/node/n2", `{"type":"sim","info":{"addr":"\u001b[2J"}}`, 400, "control characters"},
		{"unknown type", "PUT", "/node/n2", `{"type":"\u001b]0;x\u0007","info":{"addr":"a"}}`, 400, "unknown type"},
		{"unknown field v1", "PUT", "/v1/nodes/n2", `{"type":"sim","info":{"addr":"a"},"owner":"x"}`, 400, `unknown field "owner"`},
		{"unknown info field v1", "PUT", "/v1/nodes/n2", `{"type":"sim","info":{"addr":"a","color":"red"}}`, 400, `unknown field "color"`},
		{"unknown field on key body", "POST", "/v1/nodes/n1/keys", `{"key":"` + keyLine + `","from":"*"}`, 400, `unknown field "from"`},
		{"label with slash", "PUT", "/node/a%2Fb", sim, 400, `contains "/"`},
		{"label with slash v1", "PUT", "/v1/nodes/a%2Fb", sim, 400, `contains "/"`},
		{"label dot-dot", "PUT", "/node/..", sim, 400, "not canonical"},
		{"label escaped dot-dot", "PUT", "/node/%2E%2E", sim, 400, "reserved"},
		{"label NUL", "PUT", "/node/a%00b", sim, 400, "control character"},
		{"label escape sequence", "PUT", "/node/%1B%5B31mred", sim, 400, "control character"},
		{"label bidi override", "PUT", "/v1/nodes/a%E2%80%AEb", sim, 400, "non-printable"},
		{"label over 80 bytes", "PUT", "/node/" + long, sim, 400, "81 bytes"},
		{"label invalid UTF-8", "PUT", "/node/%FF", sim, 400, "UTF-8"},
		{"rotate bad label", "POST", "/node/%1B%5B2J/token", nil, 400, "control character"},
		{"delete bad label", "DELETE", "/v1/nodes/" + long, nil, 400, "81 bytes"},
		{"key on bad label", "POST", "/v1/nodes/a%00/keys", map[string]string{"key": keyLine}, 400, "control character"},
		{"huge key line", "POST", "/v1/nodes/n1/keys", map[string]string{"key": "ssh-ed25519 " + strings.Repeat("A", 20<<10)}, 400, "longer than"},
		{"key with options", "POST", "/v1/nodes/n1/keys", map[string]string{"key": `command="/bin/sh" ` + keyLine}, 400, "options"},
		{"two keys", "POST", "/v1/nodes/n1/keys", map[string]string{"key": keyLine + "\n" + keyLine}, 400, "exactly one"},
		{"garbage key", "POST", "/v1/nodes/n1/keys", map[string]string{"key": "\x1b[31mnot a key"}, 400, "not an authorized key"},
		{"duplicate key", "POST", "/v1/nodes/n1/keys", map[string]string{"key": keyLine}, 409, "already registered"},
		{"bad fingerprint", "DELETE", "/v1/nodes/n1/keys/SHA256:%1B%5B2J", nil, 400, "not valid"},
		{"key of an unknown node", "DELETE", "/v1/nodes/ghost/keys/SHA256:nope", nil, 404, "not found"},
		{"rotate unknown node", "POST", "/node/ghost/token", nil, 404, "not found"},
		{"different re-PUT", "PUT", "/node/n1", map[string]any{"type": "mock", "info": map[string]string{"addr": "x"}}, 409, "already exists"},
		{"audit bad limit", "GET", "/v1/audit?limit=%1B", nil, 400, "limit"},
		{"sessions bad node", "GET", "/v1/sessions?node=%00", nil, 400, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := o.hsSnapshot(t)
			status, body := o.api(tc.method, tc.path, tc.body)
			if status != tc.status {
				t.Errorf("got %d %s, want %d", status, tailString(string(body), 300), tc.status)
			}
			var eb struct{ Error string }
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error == "" {
				t.Errorf("body %q: want a JSON {\"error\": ...}", tailString(string(body), 300))
			}
			if !strings.Contains(eb.Error, tc.want) {
				t.Errorf("error %q: want it to say %q", eb.Error, tc.want)
			}
			if len(eb.Error) > 600 {
				t.Errorf("error is %d bytes long: it echoes too much", len(eb.Error))
			}
			if c := hsRaw(eb.Error); c != "" {
				t.Errorf("error %q holds a raw control character %s", eb.Error, c)
			}
			if after := o.hsSnapshot(t); after != before {
				t.Errorf("the database changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	// Nothing moved the access epoch: the token still works.
	if res, err := o.execGo("n1", token, "power-status"); err != nil || res.Code != 0 {
		t.Errorf("the token stopped working: %v (%v)", res, err)
	}
	// Nothing logged a raw control character either.
	hsNoRawInLogs(t, o)
}

// hsNoRawInLogs checks every logged string value for raw control characters.
func hsNoRawInLogs(t *testing.T, o *obmd) {
	t.Helper()
	for _, line := range strings.Split(o.Logs.String(), "\n") {
		var fields map[string]any
		if json.Unmarshal([]byte(line), &fields) != nil {
			continue
		}
		for k, v := range fields {
			if s, ok := v.(string); ok && hsRaw(s) != "" {
				t.Errorf("log field %s=%q holds a raw control character", k, s)
			}
		}
	}
}

// TestHostileExec runs unknown commands and absurd arguments: each is a
// usage error (exit 2) on stderr, with the input never echoed raw, and
// nothing reaches the BMC.
func TestHostileExec(t *testing.T) {
	o := startObmd(t)
	token := o.addSimNode("n1")
	bmc := o.Lab().BMC("n1", sim.ModeNormal)
	for _, tc := range []struct {
		name, line string
		want       string // on stderr
	}{
		{"unknown command", "reboot-now", `unknown command "reboot-now"`},
		{"shell command", "rm -rf /", "unknown command"},
		{"escape sequence", "\x1b[2J\x1b]0;pwned\x07power-on", `non-printable character '\x1b'`},
		{"escape after a command", "power-on \x1b[31m", `non-printable character '\x1b'`},
		{"C1 control", "power-on\u009b31m", "non-printable character"},
		{"bidi override", "power-on \u202e", "non-printable character"},
		{"NUL", "power-on\x00", "non-printable character"},
		{"newline", "power-status\npower-off", "non-printable character"},
		{"invalid UTF-8", "power-on \xff\xfe", "not valid UTF-8"},
		{"unknown flag", "power-off --now", `--now`},
		{"stray argument", "power-status now", "now"},
		{"absurd lines", "console-log --lines 99999999999999999999", "--lines wants a number"},
		{"negative lines", "console-log --lines -1", "--lines wants a number"},
		{"bad boot device", "bootdev floppy", "floppy"},
		{"boot device with escape", "bootdev 'pxe\x1b'", "non-printable"},
		{"too many words", strings.Repeat("power-on ", 40), "too many words"},
		{"too long", "power-on " + strings.Repeat("x", 5000), "too long"},
		{"unterminated quote", `bootdev "pxe`, "quote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := o.execGo("n1", token, tc.line)
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			if res.Code != 2 {
				t.Errorf("got exit %d, want 2 (usage)", res.Code)
			}
			if !strings.Contains(res.Stderr, tc.want) {
				t.Errorf("stderr %q: want it to say %q", res.Stderr, tc.want)
			}
			for name, s := range map[string]string{"stdout": res.Stdout, "stderr": res.Stderr} {
				if c := hsRaw(s); c != "" {
					t.Errorf("%s %q echoes a raw control character %s", name, s, c)
				}
			}
			if len(res.Stderr) > 4000 {
				t.Errorf("stderr is %d bytes: it echoes too much", len(res.Stderr))
			}
		})
	}
	if got := bmc.Actions(); len(got) != 0 {
		t.Errorf("BMC actions %v: a refused command reached the BMC", got)
	}
	hsNoRawInLogs(t, o)
}

// TestHostileUserName logs in with terminal control sequences in the user
// name: refused like any unknown node, and the name is never echoed raw
// (client-visible errors and banner, audit rows, logs).
func TestHostileUserName(t *testing.T) {
	o := startObmd(t)
	token := o.addSimNode("n1")
	for _, user := range []string{"\x1b]0;pwned\x07n1", "n1\x1b[2J", "n1\r\nforged log line", "\u202en1", "\x9b31mn1"} {
		c, err := o.dial(user, gossh.Password(token))
		if err == nil {
			c.Close()
			t.Errorf("user %q: got a session, want an authentication failure", user)
			continue
		}
		if c := hsRaw(err.Error()); c != "" {
			t.Errorf("user %q: client error %q holds a raw control character %s", user, err, c)
		}
	}
	// The real OpenSSH client shows what the server sends before and after
	// authentication.
	res := o.openssh("\x1b[2Jn1", token, []string{"-o", "NumberOfPasswordPrompts=1"}, "power-status")
	if res.Code == 0 {
		t.Errorf("OpenSSH with an escape sequence in the user name: got %v, want a failure", res)
	}
	if strings.Contains(res.Stdout+res.Stderr, "\x1b[2J") {
		t.Errorf("OpenSSH output %q echoes the escape sequence raw", res.Stdout+res.Stderr)
	}
	var audit struct {
		Events []struct{ Node, Detail, Action, Result string }
	}
	if err := json.Unmarshal(o.mustAPI(200, "GET", "/v1/audit", nil), &audit); err != nil {
		t.Fatal(err)
	}
	denied := 0
	for _, e := range audit.Events {
		if e.Action == "auth" && e.Result == "denied" {
			denied++
		}
		for _, s := range []string{e.Node, e.Detail} {
			if c := hsRaw(s); c != "" {
				t.Errorf("audit row %+v holds a raw control character %s", e, c)
			}
		}
	}
	if denied < 5 {
		t.Errorf("got %d denied auth rows, want one per attempt", denied)
	}
	hsNoRawInLogs(t, o)
}

// hsClient is an authenticated x/crypto connection to n1.
func hsClient(t *testing.T, o *obmd, token string) *gossh.Client {
	t.Helper()
	c, err := o.dial("n1", gossh.Password(token))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hsStillUsable runs power-status on c: the connection survived.
func hsStillUsable(t *testing.T, c *gossh.Client) {
	t.Helper()
	res, err := runSession(c, "power-status")
	if err != nil || res.Code != 0 || !strings.Contains(res.Stdout, "power on") {
		t.Errorf("exec after the refusal: got %v (%v), want power on", res, err)
	}
}

// TestHostileSSHFeatures asks for every SSH feature obmd does not offer:
// each is refused specifically, and the connection still runs a command.
func TestHostileSSHFeatures(t *testing.T) {
	o := startObmd(t)
	token := o.addSimNode("n1")

	t.Run("channels beyond MaxChannels", func(t *testing.T) {
		c := hsClient(t, o, token)
		var open []*gossh.Session
		for i := 0; i < 4; i++ {
			s, err := c.NewSession()
			if err != nil {
				t.Fatalf("session %d: %v", i+1, err)
			}
			open = append(open, s)
		}
		_, err := c.NewSession()
		var oce *gossh.OpenChannelError
		if !errors.As(err, &oce) || oce.Reason != gossh.ResourceShortage || !strings.Contains(oce.Message, "at most 4") {
			t.Fatalf("fifth session: got %v, want a resource-shortage refusal naming the limit", err)
		}
		// Closing one frees its place (once the server has seen the close).
		open[0].Close()
		waitUntil(t, "a channel slot to free up", func() bool {
			res, err := runSession(c, "power-status")
			return err == nil && res.Code == 0
		})
	})
	t.Run("direct-tcpip", func(t *testing.T) {
		c := hsClient(t, o, token)
		_, err := c.Dial("tcp", "127.0.0.1:22")
		var oce *gossh.OpenChannelError
		if !errors.As(err, &oce) || oce.Reason != gossh.UnknownChannelType {
			t.Errorf("direct-tcpip: got %v, want an unknown-channel-type refusal", err)
		}
		hsStillUsable(t, c)
	})
	for _, global := range []string{"tcpip-forward", "streamlocal-forward@openssh.com", "keepalive@openssh.com", "no-more-sessions@openssh.com"} {
		t.Run("global "+global, func(t *testing.T) {
			c := hsClient(t, o, token)
			payload := gossh.Marshal(struct {
				Addr string
				Port uint32
			}{"127.0.0.1", 0})
			ok, _, err := c.SendRequest(global, true, payload)
			if err != nil || ok {
				t.Errorf("%s: got ok=%v err=%v, want a refusal", global, ok, err)
			}
			hsStillUsable(t, c)
		})
	}
	t.Run("listener", func(t *testing.T) {
		c := hsClient(t, o, token)
		if l, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
			l.Close()
			t.Errorf("remote port forwarding: got a listener, want a refusal")
		}
		hsStillUsable(t, c)
	})
	for _, req := range []struct {
		typ     string
		payload []byte
	}{
		{"auth-agent-req@openssh.com", nil},
		{"x11-req", gossh.Marshal(struct {
			Single        bool
			Proto, Cookie string
			Screen        uint32
		}{false, "MIT-MAGIC-COOKIE-1", "00", 0})},
		{"subsystem", gossh.Marshal(struct{ Name string }{"sftp"})},
		{"env", gossh.Marshal(struct{ Name, Value string }{"LD_PRELOAD", "/tmp/x.so"})},
		{"signal", gossh.Marshal(struct{ Signal string }{"KILL"})},
		{"xon-xoff", []byte{1}},
		{"unknown@example.com", nil},
	} {
		t.Run("session "+req.typ, func(t *testing.T) {
			c := hsClient(t, o, token)
			s, err := c.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ok, err := s.SendRequest(req.typ, true, req.payload)
			if err != nil || ok {
				t.Errorf("%s: got ok=%v err=%v, want a refusal", req.typ, ok, err)
			}
			// The same channel still runs a command, and so does the
			// connection.
			var out bytes.Buffer
			s.Stdout = &out
			if err := s.Run("power-status"); err != nil || !strings.Contains(out.String(), "power on") {
				t.Errorf("exec on the same channel: got %q (%v)", out.String(), err)
			}
			hsStillUsable(t, c)
		})
	}
	t.Run("sftp through the subsystem API", func(t *testing.T) {
		c := hsClient(t, o, token)
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.RequestSubsystem("sftp"); err == nil {
			t.Errorf("sftp subsystem: got accepted, want a refusal")
		}
		hsStillUsable(t, c)
	})
	t.Run("OpenSSH with forwardings", func(t *testing.T) {
		// OpenSSH asks for the agent, X11 and a remote forward, warns
		// about the refusals, and still runs the command.
		res := o.openssh("n1", token, []string{"-A", "-X", "-o", "ForwardX11Trusted=no", "-R", "0:127.0.0.1:9", "-o", "SetEnv=FOO=bar"}, "power-status")
		if res.Code != 0 || !strings.Contains(res.Stdout, "power on") {
			t.Errorf("OpenSSH -A -X -R: got %v, want power on", res)
		}
		res = o.openssh("n1", token, []string{"-o", "ExitOnForwardFailure=yes", "-R", "0:127.0.0.1:9"}, "power-status")
		if res.Code == 0 || !strings.Contains(res.Stderr, "forwarding failed") {
			t.Errorf("OpenSSH -R with ExitOnForwardFailure: got %v, want the forward refused", res)
		}
		res = o.openssh("n1", token, []string{"-s"}, "sftp")
		if res.Code == 0 {
			t.Errorf("OpenSSH -s sftp: got %v, want the subsystem refused", res)
		}
	})
}

// TestHostileSessionLimits: the N+1th session of a node, or from one source
// address, is refused with a message that says which limit; HTTP console
// streams count against the node's limit, and against the address's HTTP
// budget apart from its SSH one.
func TestHostileSessionLimits(t *testing.T) {
	o := startObmd(t, func(c *daemon.Config) {
		c.Sessions.MaxPerNode, c.Sessions.MaxPerSource, c.Sessions.MaxPerSourceHTTP = 2, 2, 1
	})
	t1, t2 := o.addSimNode("n1"), o.addSimNode("n2")
	a := o.goConsole(t, "n1", t1, conOpts{pty: true}) // escapes need a PTY
	a.errb.wait(t, "first console", 0, "console of n1")
	web := o.consoleHTTP(t, "n1", t1)
	res, err := o.execGo("n1", t1, "power-status")
	if err != nil || res.Code != 3 || !strings.Contains(res.Stderr, "too many sessions on node n1 (limit 2)") {
		t.Errorf("third session of n1: got %v (%v), want exit 3 and the per-node limit", res, err)
	}
	status, body := o.request("GET", "/node/n1/console?token="+t1, nil, "", "")
	if status != 429 || !strings.Contains(string(body), "too many sessions on node n1") {
		t.Errorf("third HTTP console of n1: got %d %s, want 429 and the per-node limit", status, body)
	}
	status, body = o.request("GET", "/node/n2/power_status?token="+t2, nil, "", "")
	if status != 429 || !strings.Contains(string(body), "too many sessions from your address (limit 1)") {
		t.Errorf("second HTTP session from 127.0.0.1: got %d %s, want 429 and the HTTP per-source limit", status, body)
	}
	b := o.goConsole(t, "n2", t2, conOpts{})
	b.errb.wait(t, "console of n2", 0, "console of n2")
	res, err = o.execGo("n2", t2, "power-status")
	if err != nil || res.Code != 3 || !strings.Contains(res.Stderr, "too many sessions from your address (limit 2)") {
		t.Errorf("third SSH session from 127.0.0.1: got %v (%v), want exit 3 and the per-source limit", res, err)
	}
	// Ending one frees its place.
	a.in.Write([]byte("\x05c."))
	a.end.wait(t, "detach")
	web.stop()
	waitUntil(t, "the sessions to end", func() bool { return len(o.rvSessions("n1")) == 0 })
	if res, err := o.execGo("n1", t1, "power-status"); err != nil || res.Code != 0 {
		t.Errorf("after the others ended: got %v (%v), want exit 0", res, err)
	}
}

// TestHostileStuckClientsCut: a client that stops reading (its SSH window,
// or its TCP receive buffer, full) cannot keep a session alive, or in the
// registry, past a revocation.
func TestHostileStuckClientsCut(t *testing.T) {
	o := startObmd(t)
	token := o.addSimNode("n1")
	bmc := o.Lab().BMC("n1", sim.ModeNormal)

	// SSH: a console whose stdout is never read.
	c := hsClient(t, o, token)
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	// HTTP: a console stream read by nobody, over a socket with a tiny
	// receive buffer.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	hc, err := d.Dial("tcp", o.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	fmt.Fprintf(hc, "GET /node/n1/console?token=%s HTTP/1.1\r\nHost: obmd\r\n\r\n", token)
	waitUntil(t, "both sessions", func() bool { return o.rvKinds("n1") == "console,http-console" })
	if err := bmc.WaitConsole(rvCtx(t), true); err != nil {
		t.Fatal(err)
	}
	// Far more output than the SSH window (2 MiB) and the socket buffers
	// hold; then let it pile up.
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	for i := 0; i < 24<<20/len(chunk); i++ {
		bmc.Inject(chunk)
	}
	time.Sleep(300 * time.Millisecond)

	start := time.Now()
	o.rotate("n1")
	took := time.Since(start)
	if left := o.rvSessions("n1"); len(left) != 0 {
		t.Errorf("after the rotation returned (%v): sessions %+v still live", took, left)
	}
	if took > 1500*time.Millisecond { // the registry's bound is 2 s
		t.Errorf("the rotation took %v: stuck sessions held it", took)
	}
	if !strings.Contains(o.Logs.String(), "cut_session_stuck_closing_connection") {
		t.Errorf("the SSH session was not stuck: the test did not test anything")
	}
}

// TestHostileConnectionFlood: one address cannot hold more than
// max_conns_per_source connections, even unauthenticated ones: a new one
// displaces its oldest unauthenticated connection (TestPreauthCaps has the
// other caps); others are not affected.
func TestHostileConnectionFlood(t *testing.T) {
	t.Parallel()
	const limit = 3
	o := startObmd(t, func(c *daemon.Config) { c.SSH.MaxConnsPerSource = limit })
	tok := o.addSimNode("flood")
	var held []*paConn
	for range limit {
		c := paDial(t, o, "127.0.0.9")
		c.admitted(t) // idle: never authenticates
		held = append(held, c)
	}
	extra := paDial(t, o, "127.0.0.9")
	extra.admitted(t)
	held[0].closedAt(t, "the oldest connection over the limit")
	for i, c := range append(held[1:], extra) {
		if !c.open() {
			t.Errorf("connection %d: closed, want the newest %d held", i+1, limit)
		}
	}
	if err := o.fdTryFrom(t, "127.0.0.10", "flood", tok); err != nil {
		t.Errorf("login from another address: %v, want success", err)
	}
	if err := o.fdTryFrom(t, "127.0.0.9", "flood", tok); err != nil {
		t.Errorf("login from the flooding address: %v, want success", err)
	}
}
