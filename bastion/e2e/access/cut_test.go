package access

// A cut frees everything: once an access change has answered, nothing of
// the old tenancy holds a session slot or shows in the next tenant's
// `sessions`, even while its work is still unwinding (a BMC call stuck
// where nothing interrupts it).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
)

// stuck is RunMany from 127.0.0.1 with token.
func stuck(t *testing.T, o *obmdtest.Daemon, label, token, cmd string, n int, ended *sync.WaitGroup) {
	t.Helper()
	obmdtest.RunMany(t, o, "127.0.0.1", label, gossh.Password(token), cmd, n, ended)
}

// TestCutFreesSlotsOfStuckSessions, on SQLite and MariaDB: a former
// tenant's 64 sessions, each stuck in a BMC call that ignores its
// cancellation, hold every slot of the node; the rotation that cuts them
// frees those slots at once, so the next tenant gets in (the old code
// answered "too many sessions on node ... (limit 64)" until the calls
// returned) and its `sessions` shows only its own session.
func TestCutFreesSlotsOfStuckSessions(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) {
			c.DB.DSN = dsn
			c.Sessions.MaxPerSource = 64 // one address may fill the node
			c.Sessions.MaxBMCPerNode, c.Sessions.MaxBMCPerSource = -1, -1
			c.Sessions.CutWait = 500 * time.Millisecond
		})
		const label = "cf1"
		old := o.AddSimNode(label)
		bmc := o.Lab().BMC(label, sim.ModeNormal)
		release := bmc.Hang()
		var ended sync.WaitGroup
		defer ended.Wait()
		defer release() // first: the stuck calls return, then the sessions end
		stuck(t, o, label, old, "power-status", 64, &ended)
		obmdtest.WaitUntil(t, "64 stuck BMC calls", func() bool { return bmc.Hung() == 64 })
		if res, err := o.ExecGo(label, old, "sessions"); err != nil || res.Code != 3 ||
			!strings.Contains(res.Stderr, "too many sessions on node cf1 (limit 64)") {
			t.Fatalf("a 65th session: got %v, %v; want exit 3, too many sessions", res, err)
		}

		tok := o.Rotate(label)
		for _, run := range []func() obmdtest.Result{
			func() obmdtest.Result { return o.OpenSSH(label, tok, nil, "sessions", "--json") },
			func() obmdtest.Result {
				res, err := o.ExecGo(label, tok, "sessions --json")
				if err != nil {
					t.Fatal(err)
				}
				return res
			},
		} {
			res := run()
			if res.Code != 0 {
				t.Fatalf("the next tenant's sessions: got %v, want exit 0", res)
			}
			var out struct {
				Sessions []struct {
					Own bool
				}
			}
			if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
				t.Fatalf("decode %q: %v", res.Stdout, err)
			}
			if len(out.Sessions) != 1 || !out.Sessions[0].Own {
				t.Errorf("the next tenant's sessions: got %s, want its own session alone", res.Stdout)
			}
		}
		if n := bmc.Hung(); n != 64 {
			t.Errorf("stuck calls: got %d, want the 64 still stuck (the test proves nothing otherwise)", n)
		}
		// The operator sees them unwinding, until their calls return.
		unwinding := func() float64 {
			_, body := o.Request("GET", "/metrics", nil, "", "")
			n, _ := obmdtest.MetricSample(string(body), "obmd_sessions_unwinding")
			return n
		}
		if n := unwinding(); n != 64 {
			t.Errorf("obmd_sessions_unwinding: got %v, want 64", n)
		}
		release()
		obmdtest.WaitUntil(t, "the cut sessions to end", func() bool { return unwinding() == 0 })
	})
}

// TestSessionsHidePreviousTenancy, on SQLite and MariaDB: after a
// rotation, `sessions` shows the next tenant nothing of the tenancy before
// it, even of sessions still unwinding: a former tenant's token session
// from the same address (the old code listed it as the new tenant's own,
// "own" comparing the kind of credential) and a key holder's.
func TestSessionsHidePreviousTenancy(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn; c.Sessions.CutWait = 200 * time.Millisecond })
		const label = "cf2"
		old := o.AddSimNode(label)
		signer, _ := obmdtest.NewKey(t)
		o.AddKey(label, signer.PublicKey())
		bmc := o.Lab().BMC(label, sim.ModeNormal)
		release := bmc.Hang()
		var ended sync.WaitGroup
		defer ended.Wait()
		defer release()
		stuck(t, o, label, old, "power-status", 1, &ended)
		kc, err := o.Dial(label, gossh.PublicKeys(signer))
		if err != nil {
			t.Fatal(err)
		}
		defer kc.Close()
		ks, err := kc.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		ended.Go(func() { ks.Run("power-status") })
		obmdtest.WaitUntil(t, "2 stuck BMC calls", func() bool { return bmc.Hung() == 2 })

		tok := o.Rotate(label)
		res := o.OpenSSH(label, tok, nil, "sessions", "--json")
		var out struct {
			Sessions []struct {
				ID   string
				Own  bool
				User string
			}
		}
		if err := json.Unmarshal([]byte(res.Stdout), &out); res.Code != 0 || err != nil {
			t.Fatalf("sessions: got %v (%v), want exit 0 and JSON", res, err)
		}
		if len(out.Sessions) != 1 || !out.Sessions[0].Own || out.Sessions[0].User != "token" {
			t.Errorf("the next tenant's sessions: got %s, want its own session alone", res.Stdout)
		}
		// The key holder, logged in again in the new tenancy, sees its
		// own session, nothing of the old ones.
		kres, err := obmdtest.ExecSSH(o.SSHAddr(), label, "sessions --json", gossh.PublicKeys(signer))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(kres.Stdout), &out); kres.Code != 0 || err != nil {
			t.Fatalf("sessions: got %v (%v), want exit 0 and JSON", kres, err)
		}
		if len(out.Sessions) != 1 || !out.Sessions[0].Own || !strings.HasPrefix(out.Sessions[0].User, "key ") {
			t.Errorf("the key holder's sessions: got %s, want its own session alone", kres.Stdout)
		}
		if n := bmc.Hung(); n != 2 {
			t.Errorf("stuck calls: got %d, want the 2 still stuck (the test proves nothing otherwise)", n)
		}
	})
}

// TestCutEndsSendWaitingForLink: a `send` whose bytes wait for a console
// link that does not come up (its BMC does not answer) ends with its
// session at a cut: the cut does not wait for it (the old code waited
// cut_wait, then logged sessions_slow_to_end, until the console's wipe
// ended the viewer the send waited on).
func TestCutEndsSendWaitingForLink(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t, func(c *daemon.Config) { c.Commands.Timeout = 100 * time.Millisecond })
	const label = "cf3"
	old := o.AddSimNode(label)
	o.Lab().BMC(label, sim.ModeNormal).SetDelay(time.Hour) // the console never opens
	send := o.GoConsole(t, label, old, obmdtest.SessionOpts{Cmd: "send hello"})
	obmdtest.WaitUntil(t, "the send's session", func() bool { return len(o.Sessions(label)) == 1 })
	// The send gives up waiting for the link after power_timeout, then
	// writes and waits for its bytes to reach it (console.open_timeout).
	time.Sleep(time.Second)
	o.Rotate(label)
	if code := send.Exit(); code != 3 || !strings.Contains(send.Stderr.String(), "access to cf3 was revoked (token rotated)") {
		t.Errorf("the send: got exit %d, stderr %q; want 3 and the reason", code, send.Stderr.String())
	}
	if strings.Contains(o.Logs.String(), "sessions_slow_to_end") {
		t.Error("the cut waited for the send (logged sessions_slow_to_end)")
	}
}

// TestHostileStuckClientsCut: a client that stops reading (its SSH window,
// or its TCP receive buffer, full) cannot keep a session alive, or in the
// registry, past a revocation.
func TestHostileStuckClientsCut(t *testing.T) {
	o := obmdtest.Start(t)
	token := o.AddSimNode("n1")
	bmc := o.Lab().BMC("n1", sim.ModeNormal)

	// SSH: a console whose stdout is never read.
	c := o.Connect(t, "n1", token)
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
	obmdtest.WaitUntil(t, "both sessions", func() bool { return o.SessionKinds("n1") == "console,http-console" })
	if err := bmc.WaitConsole(obmdtest.Context(t), true); err != nil {
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
	o.Rotate("n1")
	took := time.Since(start)
	if left := o.Sessions("n1"); len(left) != 0 {
		t.Errorf("after the rotation returned (%v): sessions %+v still live", took, left)
	}
	if took > 1500*time.Millisecond { // the registry's bound is 2 s
		t.Errorf("the rotation took %v: stuck sessions held it", took)
	}
	if !strings.Contains(o.Logs.String(), "cut_session_stuck_closing_connection") {
		t.Errorf("the SSH session was not stuck: the test did not test anything")
	}
}
