package screen

// End-to-end tests of the node's screen at the SSH door: a full-screen
// program's output played on the node's serial side (the simulator and
// ipmi_sim), then a late attach through the real OpenSSH client with a
// terminal, which must show the whole screen though the last bytes no
// longer draw it; the tenant's screen and wait-for --screen over OpenSSH,
// the admin API's screen; across a restart and a replica failover, and
// never after an access change.

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/e2e/obmdtest"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol/screen"
	"github.com/obmd/obmd/sol/screen/screentest"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// bannerRE is obmd's attach banner on a terminal (stderr, which ssh may
// write before or after the stdout that came just after it).
var bannerRE = regexp.MustCompile(`\r\n\[obmd: console of [^\]]*\]\r\n`)

// shownOn is what a terminal of 80x25 shows for out from from: obmd's
// console bytes (stdout), the banner taken out wherever ssh wrote it.
func shownOn(out []byte) *screen.Terminal {
	term, _ := screen.New(screen.Size{})
	term.Write(bannerRE.ReplaceAll(out, nil))
	return term
}

// waitShown waits until out, from from, shows want on a terminal of
// 80x25, and returns that terminal.
func waitShown(t testing.TB, what string, out *obmdtest.Buffer, from int, want string) *screen.Terminal {
	t.Helper()
	deadline := time.Now().Add(obmdtest.Timeout)
	for {
		term := shownOn(out.Bytes()[from:])
		if term.Text() == want {
			return term
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the terminal shows\n%s\nwant\n%s", what, term.Text(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// screenNode is a node whose serial side a test prints on.
type screenNode struct {
	label, tok string
	print      func([]byte) error
}

// printAll prints p on n's serial side in pieces of at most 1 KiB.
func (n screenNode) printAll(t testing.TB, p []byte) {
	t.Helper()
	for len(p) > 0 {
		k := min(len(p), 1<<10)
		if err := n.print(p[:k]); err != nil {
			t.Fatalf("print on %s: %v", n.label, err)
		}
		p = p[k:]
	}
}

// screenNodes registers a node on the simulator and one on ipmi_sim
// (the native IPMI driver) on o.
func screenNodes(t *testing.T, o *obmdtest.Daemon) []screenNode {
	tok := o.AddSimNode("scr-sim")
	bmc := o.Lab().BMC("scr-sim", sim.ModeNormal)
	s := ipmisim.Start(t)
	return []screenNode{
		{"scr-sim", tok, obmdtest.Inject(bmc)},
		{"scr-ipmi", o.AddIPMINode("scr-ipmi", "ipmi", s), s.WriteSerial},
	}
}

// TestScreenDoorLateAttach: a BIOS setup menu drawn once then only
// repainted, printed on a node's serial side while its link is held with
// nobody attached: a late attach through OpenSSH with a terminal (ssh
// -tt) shows the whole menu cell for cell (text, attributes, cursor),
// though the last 16 KiB (the raw replay, still what a session without a
// terminal gets) no longer draw it; Ctrl-E c r draws it again; `screen`
// prints it exactly (text, --json, --ansi), `wait-for --screen` and
// expect's `wait --screen` match what only the first drawing printed, and
// the admin API shows the same. After a restart, the screen is rebuilt
// from the stored history; after a token rotation, the next tenant's
// terminal, `screen` and `wait-for --screen` never show it.
func TestScreenDoorLateAttach(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmi_sim", "ssh", "sshpass") // before the daemon starts: -short skips the test whole
	o := obmdtest.Start(t, func(c *daemon.Config) { c.Console.Capture = "always" })
	nodes := screenNodes(t, o)
	bios := screentest.BIOSSetup(2500) // about 50 KiB: the menu is rebuilt from the last 64 KiB
	tail := bios.Output[len(bios.Output)-16<<10:]
	if bytes.Contains(tail, []byte(bios.Menu[0])) {
		t.Fatal("the fixture's last 16 KiB hold the menu's title")
	}
	ref, _ := screen.New(screen.Size{})
	ref.Write(bios.Output)
	check := func(t *testing.T, what string, term *screen.Terminal) {
		t.Helper()
		if got, want := term.Cursor(), ref.Cursor(); got != want {
			t.Errorf("%s: cursor %+v, want %+v", what, got, want)
		}
		if got, want := term.Spans(), ref.Spans(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: attributes %+v, want %+v", what, got, want)
		}
	}
	for _, n := range nodes {
		t.Run(n.label, func(t *testing.T) {
			obmdtest.PrintUntilSeen(t, n.print, "screen-up", o.LogShows(n.label, n.tok))
			n.printAll(t, bios.Output)
			obmdtest.WaitUntil(t, "the menu recorded", func() bool {
				res, err := o.ExecGo(n.label, n.tok, "console-log")
				return err == nil && strings.HasSuffix(res.Stdout, string(tail[len(tail)-200:]))
			})

			p := obmdtest.SSHPTY(t, o.SSHAddr(), n.label, n.tok, nil)
			check(t, "late attach", waitShown(t, "late attach", p.Out, 0, bios.Screen))
			mark := p.Out.Len()
			p.TypeKeys(obmdtest.EscRedraw)
			check(t, "Ctrl-E c r", waitShown(t, "Ctrl-E c r", p.Out, mark, bios.Screen))
			p.TypeKeys(obmdtest.EscDetach)
			p.End.Wait(t, "the detached ssh")

			// The tenant's commands over OpenSSH: screen cell for cell, and
			// wait-for --screen on text the last 16 KiB do not hold.
			if res := o.OpenSSH(n.label, n.tok, nil, "screen"); res.Code != 0 || res.Stdout != bios.Screen+"\n" {
				t.Errorf("screen: got %v, want the menu", res)
			}
			var js struct {
				OK     bool       `json:"ok"`
				Screen api.Screen `json:"screen"`
			}
			res := o.OpenSSH(n.label, n.tok, nil, "screen", "--json")
			if err := json.Unmarshal([]byte(res.Stdout), &js); err != nil || !js.OK || strings.Join(js.Screen.Lines, "\n") != bios.Screen ||
				js.Screen.Cursor.Row != ref.Cursor().Row || js.Screen.Cursor.Col != ref.Cursor().Col || len(js.Screen.Spans) != len(ref.Spans()) {
				t.Errorf("screen --json: got %v (%v)", res, err)
			}
			res = o.OpenSSH(n.label, n.tok, nil, "screen", "--ansi")
			check(t, "screen --ansi", shownOn([]byte(res.Stdout)))
			if bytes.Contains(tail, []byte(bios.Menu[2])) {
				t.Fatalf("the last 16 KiB hold %q", bios.Menu[2])
			}
			res = o.OpenSSH(n.label, n.tok, nil, "wait-for", "--screen", "--timeout", "20s", "'"+bios.Menu[2]+" +03/14'")
			if res.Code != 0 || !strings.Contains(res.Stdout, bios.Menu[3]) {
				t.Errorf("wait-for --screen: got %v, want the row of %q", res, bios.Menu[2])
			}
			res = o.OpenSSH(n.label, n.tok, nil, "expect", `'wait --screen "^ +Version 2" 20s'`)
			if res.Code != 0 {
				t.Errorf("expect wait --screen: got %v", res)
			}

			// The admin API: the same screen, as JSON and as a redraw.
			var s api.Screen
			if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/nodes/"+n.label+"/screen", nil), &s); err != nil ||
				strings.Join(s.Lines, "\n") != bios.Screen || s.Cursor.Row != ref.Cursor().Row || s.Cursor.Col != ref.Cursor().Col ||
				len(s.Spans) != len(ref.Spans()) {
				t.Errorf("GET .../screen: got %+v (%v), want the menu", s, err)
			}
			check(t, "GET .../screen?format=ansi", shownOn(o.MustAPI(200, "GET", "/v1/nodes/"+n.label+"/screen?format=ansi", nil)))

			// Without a terminal: the raw replay, the last 16 KiB as printed.
			raw := o.GoConsole(t, n.label, n.tok, obmdtest.SessionOpts{})
			obmdtest.WaitUntil(t, "the raw replay", func() bool { return raw.Out.Len() >= len(tail) })
			if got := raw.Out.Bytes()[:len(tail)]; !bytes.Equal(got, tail) {
				t.Errorf("the replay without a terminal: got %q, want the last 16 KiB printed %q", obmdtest.Tail(string(got), 300), obmdtest.Tail(string(tail), 300))
			}
		})
	}

	if err := o.Stop(); err != nil {
		t.Fatal(err)
	}
	o = obmdtest.StartWith(t, o.Cfg)
	nodes[0].print = obmdtest.Inject(o.Lab().BMC(nodes[0].label, sim.ModeNormal)) // the restarted daemon's simulator
	for _, n := range nodes {
		t.Run(n.label+"/restarted", func(t *testing.T) {
			p := obmdtest.SSHPTY(t, o.SSHAddr(), n.label, n.tok, nil)
			check(t, "attach after a restart", waitShown(t, "attach after a restart", p.Out, 0, bios.Screen))
			if res := o.OpenSSH(n.label, n.tok, nil, "screen"); res.Code != 0 || res.Stdout != bios.Screen+"\n" {
				t.Errorf("screen after a restart: got %v, want the menu", res)
			}
			p.TypeKeys(obmdtest.EscDetach)
			p.End.Wait(t, "the detached ssh")
		})
	}

	for _, n := range nodes {
		t.Run(n.label+"/rotated", func(t *testing.T) {
			old := obmdtest.SSHPTY(t, o.SSHAddr(), n.label, n.tok, nil)
			waitShown(t, "the old tenant's attach", old.Out, 0, bios.Screen)
			tok := o.Rotate(n.label)
			old.End.Wait(t, "the old tenant's ssh")
			next := obmdtest.SSHPTY(t, o.SSHAddr(), n.label, tok, nil)
			next.Expect("[obmd: console of " + n.label)
			live := obmdtest.PrintUntilSeen(t, n.print, "next-tenant", obmdtest.Shows(next.Out))
			for _, s := range bios.Menu {
				if text := shownOn(next.Out.Bytes()).Text(); strings.Contains(text, s) || strings.Contains(next.Out.String(), s) {
					t.Fatalf("the next tenant sees the previous screen (%q):\n%s", s, text)
				}
			}
			if text := shownOn(next.Out.Bytes()).Text(); !strings.Contains(text, live) {
				t.Errorf("the next tenant's terminal:\n%s\nwant %s on it", text, live)
			}
			res := o.OpenSSH(n.label, tok, nil, "screen")
			if res.Code != 0 || !strings.Contains(res.Stdout, live) || strings.Contains(res.Stdout, bios.Menu[0]) {
				t.Errorf("the next tenant's screen: got %v, want its own output alone", res)
			}
			if res := o.OpenSSH(n.label, tok, nil, "wait-for", "--screen", "--timeout", "1s", "'"+bios.Menu[2]+"'"); res.Code != 5 {
				t.Errorf("the next tenant's wait-for --screen on the previous screen: got %v, want exit 5", res)
			}
		})
	}
}

// TestScreenDoorFailover: two replicas on a shared database (MariaDB,
// then PostgreSQL) and a node on ipmi_sim captured always. A BIOS menu
// printed on its serial side shows whole through either replica (the
// holder's screen, and the other's relayed from it); after SIGKILL of
// the holder, the survivor takes the link over and rebuilds the screen
// from the stored history: `screen` and a late attach through OpenSSH
// show the menu there, and output that follows draws on it.
func TestScreenDoorFailover(t *testing.T) { obmdtest.OnSharedEngines(t, testScreenDoorFailover) }

func testScreenDoorFailover(t *testing.T, dsn string) {
	ipmisim.Require(t, "ipmi_sim", "ssh", "sshpass")
	bmc := ipmisim.Start(t)
	reps := obmdtest.ClusterOn(t, []string{dsn, dsn}, map[string]string{"OBMD_CLUSTER_LEASE_TTL": obmdtest.LeaseTTL.String(),
		"OBMD_CONSOLE_CAPTURE": "always", "OBMD_ACCESS_POLL": "200ms"})
	reps[0].MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := reps[0].Rotate("n1")
	on := func(r *obmdtest.Replica, cmd string) string {
		res, err := r.Exec("n1", tok, cmd)
		if err != nil || res.Code != 0 {
			return ""
		}
		return res.Stdout
	}
	obmdtest.PrintUntilSeen(t, bmc.WriteSerial, "captured", func(m string) bool { return strings.Contains(on(reps[0], "console-log"), m) })
	bios := screentest.BIOSSetup(2500) // within the 64 KiB a screen is rebuilt from
	n := screenNode{label: "n1", print: bmc.WriteSerial}
	n.printAll(t, bios.Output)
	for _, r := range reps {
		obmdtest.WaitUntil(t, "the menu on "+r.Name, func() bool { return on(r, "screen") == bios.Screen+"\n" })
	}
	end := string(bios.Output[len(bios.Output)-200:])
	for _, r := range reps { // stored: the replica that does not hold the link reads the database
		obmdtest.WaitUntil(t, "the menu stored, read on "+r.Name, func() bool { return strings.HasSuffix(on(r, "console-log"), end) })
	}

	st := obmdtest.OpenStore(t, dsn)
	lease := func() string {
		l, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
		if err != nil {
			return ""
		}
		return l.Owner
	}
	holder, survivor := reps[0], reps[1]
	if lease() == survivor.Name {
		holder, survivor = survivor, holder
	}
	holder.Kill(t)
	obmdtest.WaitUntil(t, "the survivor holding the link", func() bool { return lease() == survivor.Name })
	obmdtest.WaitUntil(t, "the menu rebuilt on "+survivor.Name, func() bool { return on(survivor, "screen") == bios.Screen+"\n" })
	p := obmdtest.SSHPTY(t, survivor.Listening["ssh"], "n1", tok, nil)
	waitShown(t, "a late attach on the survivor", p.Out, 0, bios.Screen)
	if err := bmc.WriteSerial([]byte("\x1b[24;3Hchanged")); err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(bios.Screen, "  ><: Sel", "  changed", 1)
	obmdtest.WaitUntil(t, "live output on the rebuilt screen", func() bool { return on(survivor, "screen") == want+"\n" })
	t.Logf("holder %s killed; %s rebuilt the screen", holder.Name, survivor.Name)
}

// TestScreenDoorAutomationCaps: wait-for --screen and screen count as the
// node's automation sessions: with 8 screen waits on a node, a ninth and
// a screen are refused as busy through OpenSSH, while the node's power
// commands go on; a rotation ends the waits and frees their places.
func TestScreenDoorAutomationCaps(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass")
	o := obmdtest.Start(t)
	var ended sync.WaitGroup
	t.Cleanup(ended.Wait) // after the connections close (cleanups run last first)
	tok := o.AddSimNode("sc1")
	obmdtest.RunMany(t, o, "127.0.0.1", "sc1", gossh.Password(tok), "wait-for --screen never-shown --timeout 1h", 8, &ended)
	obmdtest.WaitUntil(t, "8 sessions", func() bool { return len(o.Sessions("sc1")) == 8 })
	bgRefused(t, "a ninth screen wait", o.OpenSSH("sc1", tok, []string{"-b", "127.0.0.2"}, "wait-for", "--screen", "x"),
		"too many automation sessions on node sc1 (limit 8)")
	bgRefused(t, "screen", o.OpenSSH("sc1", tok, []string{"-b", "127.0.0.2"}, "screen"),
		"too many automation sessions on node sc1 (limit 8)")
	if res := o.OpenSSH("sc1", tok, nil, "power-status"); res.Code != 0 {
		t.Errorf("another command on the node: got %v, want exit 0", res)
	}
	tok = o.Rotate("sc1")
	obmdtest.WaitUntil(t, "the waits cut", func() bool { return len(o.Sessions("sc1")) == 0 })
	if res := o.OpenSSH("sc1", tok, nil, "screen"); res.Code != 0 {
		t.Errorf("screen after the rotation: got %v, want exit 0", res)
	}
}

// bgRefused checks that res was refused as busy by a cap, saying want.
func bgRefused(t *testing.T, what string, res obmdtest.Result, want string) {
	t.Helper()
	if res.Code != 4 || !strings.Contains(res.Stderr, "obmd: "+want+"; try again when one ends") {
		t.Errorf("%s: got %v, want exit 4 and %q", what, res, want)
	}
}
