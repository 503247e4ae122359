package automation

// The automation commands across replicas (issue 17 on issue 14's cluster):
// two obmd processes on one MariaDB in front of one ipmi_sim, every client
// the real OpenSSH. The replica holding the node's SOL link arbitrates the
// write role for a `send` through the other one as for any viewer.

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestReplicasAutomate: with the node's link held by replica A, the
// automation commands through replica B: wait-for sees the node's output
// (with --since attach, also what it printed before, from A's history);
// send is refused (exit 4) while a viewer on A writes, and reaches the
// serial side byte-exact with --force, after which the role goes back to
// that viewer (told both times: its keys reach the node again, `sessions`
// shows it writing); the same with the writer on B and the send through
// A; a rotation through A cuts a wait-for running on B (exit 3).
func TestReplicasAutomate(t *testing.T) {
	dsn := dbtest.MySQLDSN(t)
	ipmisim.Require(t, "ssh", "ipmitool")
	bmc := ipmisim.Start(t)
	reps := obmdtest.ClusterOn(t, []string{dsn, dsn}, map[string]string{"OBMD_CLUSTER_LEASE_TTL": obmdtest.LeaseTTL.String()})
	a, b := reps[0], reps[1]
	a.MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	a.Rotate("n1")
	signer, keyFile := obmdtest.NewKey(t)
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	b.MustAPI(201, "POST", "/v1/nodes/n1/keys", map[string]string{"key": line})

	// A's viewer attaches first: A holds the link, and it writes.
	va := a.SSHViewer(t, "n1", keyFile)
	va.Out.Wait(t, "the writer's banner on "+a.Name, 0, "you are writing")
	obmdtest.SeeAll(t, bmc, "up", va)
	if a.Count("sol_lease_acquired", "n1") != 1 {
		t.Fatalf("%s does not hold n1's link", a.Name)
	}

	// wait-for through B sees what the node prints (relayed from A).
	done := b.SSHBackground("n1", keyFile, "wait-for", "'auto-[0-9]+ ready'", "--timeout", "40s")
	var n atomic.Int32
	res := obmdtest.PrintUntil(t, func([]byte) error {
		return bmc.WriteSerial(fmt.Appendf(nil, "auto-%d ready\r\n", n.Add(1)))
	}, "line", done)
	if res.Code != 0 || !strings.HasPrefix(res.Stdout, "auto-") || !strings.HasSuffix(res.Stdout, " ready\n") {
		t.Fatalf("wait-for through %s: got %+v, want exit 0 and the line", b.Name, res)
	}
	if b.Count("sol_relay_opened", "n1") == 0 || b.Count("sol_lease_acquired", "n1") != 0 {
		t.Errorf("%s did not relay n1's console from %s", b.Name, a.Name)
	}
	// --since attach through B: the holder's replay holds that line.
	matched := strings.TrimSuffix(res.Stdout, "\n")
	if res := b.SSH(t, "n1", keyFile, "wait-for", "'"+matched+"'", "--since", "attach", "--timeout", "10s"); res.Code != 0 || res.Stdout != matched+"\n" {
		t.Errorf("wait-for --since attach through %s: got %+v, want %q", b.Name, res, matched)
	}

	// send through B while A's viewer writes: refused, nothing typed.
	if res := b.SSH(t, "n1", keyFile, "send", "refused-by-b"); res.Code != 4 || !strings.Contains(res.Stderr, "another session is writing") {
		t.Errorf("send through %s while %s's viewer writes: got %+v, want exit 4", b.Name, a.Name, res)
	}
	// Forced: byte-exact on the serial side; then A's viewer writes again.
	bmc.ResetSerial()
	mark := len(va.Out.String())
	if res := b.SSH(t, "n1", keyFile, "send", "--force", "--hex", "666f726365640d00ff1b"); res.Code != 0 {
		t.Fatalf("send --force through %s: got %+v", b.Name, res)
	}
	bmc.WaitSerial(t, []byte("forced\r\x00\xff\x1b"), obmdtest.Timeout)
	givenBack(t, bmc, va, a.Name, mark)
	writerListed(t, b, keyFile, "n1", 1)

	// The writer on B (relayed), the forced send through A (the holder).
	vb := b.SSHViewer(t, "n1", keyFile)
	vb.Out.Wait(t, "the banner on "+b.Name, 0, "console of n1")
	vb.TypeKeys(obmdtest.EscTakeOver)
	va.Out.Wait(t, a.Name+"'s viewer told of the takeover", mark, "took over writing; you are read-only")
	obmdtest.SeeAll(t, bmc, "taken", va, vb)
	mark = len(vb.Out.String())
	if res := a.SSH(t, "n1", keyFile, "send", "--force", `'from-a\r'`); res.Code != 0 {
		t.Fatalf("send --force through %s: got %+v", a.Name, res)
	}
	bmc.WaitSerial(t, []byte("from-a\r"), obmdtest.Timeout)
	givenBack(t, bmc, vb, b.Name, mark)

	// A rotation through A cuts a wait-for on B.
	done = b.SSHBackground("n1", keyFile, "wait-for", "never-printed", "--timeout", "60s")
	obmdtest.WaitUntil(t, "the waiting session on "+b.Name, func() bool {
		r := a.SSH(t, "n1", keyFile, "sessions")
		return strings.Count(r.Stdout, " exec ") >= 2 // it, and this one
	})
	a.Rotate("n1")
	select {
	case res := <-done:
		if res.Code != 3 || !strings.Contains(res.Stderr, "token rotated") {
			t.Errorf("wait-for through %s cut by a rotation through %s: got %+v, want exit 3 and the reason", b.Name, a.Name, res)
		}
	case <-time.After(obmdtest.Timeout):
		t.Fatalf("wait-for through %s not cut by the rotation through %s", b.Name, a.Name)
	}
}

// givenBack: viewer v (on replica where), whose write role a forced send
// borrowed, was told both times, once each, after screen offset mark, and
// its keys reach the node again.
func givenBack(t *testing.T, bmc *ipmisim.Sim, v *obmdtest.Client, where string, mark int) {
	t.Helper()
	end := v.Out.Wait(t, "the writer on "+where+" told of the send", mark, "is sending input; you are read-only meanwhile")
	v.Out.Wait(t, "the writer on "+where+" told it writes again", end, "you are writing again")
	k := "back-" + obmdtest.Random(t)[:6]
	v.TypeKeys(k + "\r")
	bmc.WaitSerial(t, []byte(k), obmdtest.Timeout)
	screen := v.Out.String()[mark:]
	if c := strings.Count(screen, "you are writing again"); c != 1 || strings.Count(screen, "took over writing") != 0 {
		t.Errorf("the writer on %s: told %d times it writes again (want 1), screen %q", where, c, obmdtest.Tail(screen, 400))
	}
}

// writerListed: `sessions` through r lists exactly want writers of label.
func writerListed(t *testing.T, r *obmdtest.Replica, keyFile, label string, want int) {
	t.Helper()
	res := r.SSH(t, label, keyFile, "sessions")
	writers := 0
	for _, l := range strings.Split(res.Stdout, "\n") {
		if strings.HasSuffix(l, " yes") {
			writers++
		}
	}
	if res.Code != 0 || writers != want {
		t.Errorf("sessions through %s: %d writers, want %d:\n%s", r.Name, writers, want, res.Stdout)
	}
}
