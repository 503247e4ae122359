package sshdoor

// Hostile input end to end: every input below gets a clear, specific
// refusal and changes nothing in the database; no control character an
// attacker sends comes back raw; SSH features obmd does not offer are
// refused without harming the connection; session limits hold; and a
// client that stops reading cannot outlive a revocation.

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestHostileExec runs unknown commands and absurd arguments: each is a
// usage error (exit 2) on stderr, with the input never echoed raw, and
// nothing reaches the BMC.
func TestHostileExec(t *testing.T) {
	o := obmdtest.Start(t)
	token := o.AddSimNode("n1")
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
			res, err := o.ExecGo("n1", token, tc.line)
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
				if c := obmdtest.RawControl(s); c != "" {
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
	obmdtest.NoRawInLogs(t, o)
}

// TestHostileUserName logs in with terminal control sequences in the user
// name: refused like any unknown node, and the name is never echoed raw
// (client-visible errors and banner, audit rows, logs).
func TestHostileUserName(t *testing.T) {
	o := obmdtest.Start(t)
	token := o.AddSimNode("n1")
	for _, user := range []string{"\x1b]0;pwned\x07n1", "n1\x1b[2J", "n1\r\nforged log line", "\u202en1", "\x9b31mn1"} {
		c, err := o.Dial(user, gossh.Password(token))
		if err == nil {
			c.Close()
			t.Errorf("user %q: got a session, want an authentication failure", user)
			continue
		}
		if c := obmdtest.RawControl(err.Error()); c != "" {
			t.Errorf("user %q: client error %q holds a raw control character %s", user, err, c)
		}
	}
	// The real OpenSSH client shows what the server sends before and after
	// authentication.
	res := o.OpenSSH("\x1b[2Jn1", token, []string{"-o", "NumberOfPasswordPrompts=1"}, "power-status")
	if res.Code == 0 {
		t.Errorf("OpenSSH with an escape sequence in the user name: got %v, want a failure", res)
	}
	if strings.Contains(res.Stdout+res.Stderr, "\x1b[2J") {
		t.Errorf("OpenSSH output %q echoes the escape sequence raw", res.Stdout+res.Stderr)
	}
	var audit struct {
		Events []struct{ Node, Detail, Action, Result string }
	}
	if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/audit", nil), &audit); err != nil {
		t.Fatal(err)
	}
	denied := 0
	for _, e := range audit.Events {
		if e.Action == "auth" && e.Result == "denied" {
			denied++
		}
		for _, s := range []string{e.Node, e.Detail} {
			if c := obmdtest.RawControl(s); c != "" {
				t.Errorf("audit row %+v holds a raw control character %s", e, c)
			}
		}
	}
	if denied < 5 {
		t.Errorf("got %d denied auth rows, want one per attempt", denied)
	}
	obmdtest.NoRawInLogs(t, o)
}

// stillUsable runs power-status on c: the connection survived.
func stillUsable(t *testing.T, c *gossh.Client) {
	t.Helper()
	res, err := obmdtest.RunSession(c, "power-status")
	if err != nil || res.Code != 0 || !strings.Contains(res.Stdout, "power on") {
		t.Errorf("exec after the refusal: got %v (%v), want power on", res, err)
	}
}

// TestHostileSSHFeatures asks for every SSH feature obmd does not offer:
// each is refused specifically, and the connection still runs a command.
func TestHostileSSHFeatures(t *testing.T) {
	ipmisim.Require(t, "ssh", "sshpass") // its OpenSSH cases run on the test's daemon: checked before any starts
	o := obmdtest.Start(t)
	token := o.AddSimNode("n1")

	t.Run("channels beyond MaxChannels", func(t *testing.T) {
		c := o.Connect(t, "n1", token)
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
		obmdtest.WaitUntil(t, "a channel slot to free up", func() bool {
			res, err := obmdtest.RunSession(c, "power-status")
			return err == nil && res.Code == 0
		})
	})
	t.Run("direct-tcpip", func(t *testing.T) {
		c := o.Connect(t, "n1", token)
		_, err := c.Dial("tcp", "127.0.0.1:22")
		var oce *gossh.OpenChannelError
		if !errors.As(err, &oce) || oce.Reason != gossh.UnknownChannelType {
			t.Errorf("direct-tcpip: got %v, want an unknown-channel-type refusal", err)
		}
		stillUsable(t, c)
	})
	for _, global := range []string{"tcpip-forward", "streamlocal-forward@openssh.com", "keepalive@openssh.com", "no-more-sessions@openssh.com"} {
		t.Run("global "+global, func(t *testing.T) {
			c := o.Connect(t, "n1", token)
			payload := gossh.Marshal(struct {
				Addr string
				Port uint32
			}{"127.0.0.1", 0})
			ok, _, err := c.SendRequest(global, true, payload)
			if err != nil || ok {
				t.Errorf("%s: got ok=%v err=%v, want a refusal", global, ok, err)
			}
			stillUsable(t, c)
		})
	}
	t.Run("listener", func(t *testing.T) {
		c := o.Connect(t, "n1", token)
		if l, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
			l.Close()
			t.Errorf("remote port forwarding: got a listener, want a refusal")
		}
		stillUsable(t, c)
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
			c := o.Connect(t, "n1", token)
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
			stillUsable(t, c)
		})
	}
	t.Run("sftp through the subsystem API", func(t *testing.T) {
		c := o.Connect(t, "n1", token)
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.RequestSubsystem("sftp"); err == nil {
			t.Errorf("sftp subsystem: got accepted, want a refusal")
		}
		stillUsable(t, c)
	})
	t.Run("OpenSSH with forwardings", func(t *testing.T) {
		// OpenSSH asks for the agent, X11 and a remote forward, warns
		// about the refusals, and still runs the command.
		res := o.OpenSSH("n1", token, []string{"-A", "-X", "-o", "ForwardX11Trusted=no", "-R", "0:127.0.0.1:9", "-o", "SetEnv=FOO=bar"}, "power-status")
		if res.Code != 0 || !strings.Contains(res.Stdout, "power on") {
			t.Errorf("OpenSSH -A -X -R: got %v, want power on", res)
		}
		res = o.OpenSSH("n1", token, []string{"-o", "ExitOnForwardFailure=yes", "-R", "0:127.0.0.1:9"}, "power-status")
		if res.Code == 0 || !strings.Contains(res.Stderr, "forwarding failed") {
			t.Errorf("OpenSSH -R with ExitOnForwardFailure: got %v, want the forward refused", res)
		}
		res = o.OpenSSH("n1", token, []string{"-s"}, "sftp")
		if res.Code == 0 {
			t.Errorf("OpenSSH -s sftp: got %v, want the subsystem refused", res)
		}
	})
}

// TestHostileConnectionFlood: one address cannot hold more than
// max_conns_per_source connections, even unauthenticated ones: a new one
// displaces its oldest unauthenticated connection (TestPreauthCaps has the
// other caps); others are not affected.
func TestHostileConnectionFlood(t *testing.T) {
	t.Parallel()
	const limit = 3
	o := obmdtest.Start(t, func(c *daemon.Config) { c.SSH.MaxConnsPerSource = limit })
	tok := o.AddSimNode("flood")
	var held []*obmdtest.PreauthConn
	for range limit {
		c := obmdtest.DialPreauth(t, o, "127.0.0.9")
		c.Admitted(t) // idle: never authenticates
		held = append(held, c)
	}
	extra := obmdtest.DialPreauth(t, o, "127.0.0.9")
	extra.Admitted(t)
	held[0].ClosedAt(t, "the oldest connection over the limit")
	for i, c := range append(held[1:], extra) {
		if !c.Open() {
			t.Errorf("connection %d: closed, want the newest %d held", i+1, limit)
		}
	}
	if err := o.TryFrom(t, "127.0.0.10", "flood", tok); err != nil {
		t.Errorf("login from another address: %v, want success", err)
	}
	if err := o.TryFrom(t, "127.0.0.9", "flood", tok); err != nil {
		t.Errorf("login from the flooding address: %v, want success", err)
	}
}
