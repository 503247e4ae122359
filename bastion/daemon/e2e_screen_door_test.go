package daemon_test

// End-to-end tests of the node's screen at the SSH door: a full-screen
// program's output played on the node's serial side (the simulator and
// ipmi_sim), then a late attach through the real OpenSSH client with a
// terminal, which must show the whole screen though the last bytes no
// longer draw it; across a restart, and never after an access change.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/bastion/daemon"
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
func waitShown(t testing.TB, what string, out *conBuf, from int, want string) *screen.Terminal {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
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
func screenNodes(t *testing.T, o *obmd) []screenNode {
	tok := o.addSimNode("scr-sim")
	bmc := o.Lab().BMC("scr-sim", sim.ModeNormal)
	s := ipmisim.Start(t)
	return []screenNode{
		{"scr-sim", tok, inject(bmc)},
		{"scr-ipmi", o.addIPMINode("scr-ipmi", "ipmi", s), s.WriteSerial},
	}
}

// TestScreenDoorLateAttach: a BIOS setup menu drawn once then only
// repainted, printed on a node's serial side while its link is held with
// nobody attached: a late attach through OpenSSH with a terminal (ssh
// -tt) shows the whole menu cell for cell (text, attributes, cursor),
// though the last 16 KiB (the raw replay, still what a session without a
// terminal gets) no longer draw it; Ctrl-E c r draws it again. After a
// restart, the screen is rebuilt from the stored history; after a token
// rotation, the next tenant's terminal never shows it.
func TestScreenDoorLateAttach(t *testing.T) {
	t.Parallel()
	o := startObmd(t, func(c *daemon.Config) { c.ConsoleCapture = "always" })
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
			printUntilSeen(t, n.print, "screen-up", o.logShows(n.label, n.tok))
			n.printAll(t, bios.Output)
			waitUntil(t, "the menu recorded", func() bool {
				res, err := o.execGo(n.label, n.tok, "console-log")
				return err == nil && strings.HasSuffix(res.Stdout, string(tail[len(tail)-200:]))
			})

			p := sshPTY(t, o.SSHAddr(), n.label, n.tok, nil)
			check(t, "late attach", waitShown(t, "late attach", p.out, 0, bios.Screen))
			mark := p.out.Len()
			p.typeKeys(escRedraw)
			check(t, "Ctrl-E c r", waitShown(t, "Ctrl-E c r", p.out, mark, bios.Screen))
			p.typeKeys(escDetach)
			p.end.wait(t, "the detached ssh")

			// The admin API: the same screen, as JSON and as a redraw.
			var s api.Screen
			if err := json.Unmarshal(o.mustAPI(200, "GET", "/v1/nodes/"+n.label+"/screen", nil), &s); err != nil ||
				strings.Join(s.Lines, "\n") != bios.Screen || s.Cursor.Row != ref.Cursor().Row || s.Cursor.Col != ref.Cursor().Col ||
				len(s.Spans) != len(ref.Spans()) {
				t.Errorf("GET .../screen: got %+v (%v), want the menu", s, err)
			}
			check(t, "GET .../screen?format=ansi", shownOn(o.mustAPI(200, "GET", "/v1/nodes/"+n.label+"/screen?format=ansi", nil)))

			// Without a terminal: the raw replay, the last 16 KiB as printed.
			raw := o.goConsole(t, n.label, n.tok, conOpts{})
			waitUntil(t, "the raw replay", func() bool { return raw.out.Len() >= len(tail) })
			if got := raw.out.Bytes()[:len(tail)]; !bytes.Equal(got, tail) {
				t.Errorf("the replay without a terminal: got %q, want the last 16 KiB printed %q", tailString(string(got), 300), tailString(string(tail), 300))
			}
		})
	}

	if err := o.stop(); err != nil {
		t.Fatal(err)
	}
	o = startWith(t, o.Cfg)
	nodes[0].print = inject(o.Lab().BMC(nodes[0].label, sim.ModeNormal)) // the restarted daemon's simulator
	for _, n := range nodes {
		t.Run(n.label+"/restarted", func(t *testing.T) {
			p := sshPTY(t, o.SSHAddr(), n.label, n.tok, nil)
			check(t, "attach after a restart", waitShown(t, "attach after a restart", p.out, 0, bios.Screen))
			p.typeKeys(escDetach)
			p.end.wait(t, "the detached ssh")
		})
	}

	for _, n := range nodes {
		t.Run(n.label+"/rotated", func(t *testing.T) {
			old := sshPTY(t, o.SSHAddr(), n.label, n.tok, nil)
			waitShown(t, "the old tenant's attach", old.out, 0, bios.Screen)
			tok := o.rotate(n.label)
			old.end.wait(t, "the old tenant's ssh")
			next := sshPTY(t, o.SSHAddr(), n.label, tok, nil)
			next.expect("[obmd: console of " + n.label)
			live := printUntilSeen(t, n.print, "next-tenant", shows(next.out))
			for _, s := range bios.Menu {
				if text := shownOn(next.out.Bytes()).Text(); strings.Contains(text, s) || strings.Contains(next.out.String(), s) {
					t.Fatalf("the next tenant sees the previous screen (%q):\n%s", s, text)
				}
			}
			if text := shownOn(next.out.Bytes()).Text(); !strings.Contains(text, live) {
				t.Errorf("the next tenant's terminal:\n%s\nwant %s on it", text, live)
			}
		})
	}
}
