package console

// End-to-end tests of many viewers on one console: identical output, one
// writer, takeover, read-only attach, and a stalled viewer that must not
// hold up the others. They run on the simulator and on a real BMC through
// the native driver (skipped without ipmi_sim, as every ipmi_sim test is).

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// node is a node whose serial side a test drives.
type node struct {
	label, token string
	write        func(p []byte) error // the host prints p on its serial port
	typed        func() []byte        // everything that reached the serial port
}

// print prints p on the node's serial port.
func (n *node) print(t testing.TB, p []byte) {
	t.Helper()
	if err := n.write(p); err != nil {
		t.Errorf("write serial: %v", err)
	}
}

// sync prints markers until seen says one arrived.
func (n *node) sync(t testing.TB, seen func(marker string) bool) {
	t.Helper()
	obmdtest.PrintUntilSeen(t, n.write, "sync", seen)
}

// backend registers a node whose serial side a test drives.
type backend struct {
	name string
	node func(t *testing.T, o *obmdtest.Daemon, label string) *node
}

// backends are the simulator ("sim") and a real BMC through the native
// driver ("ipmi": ipmi_sim, which ipmisim.Start requires).
func backends() []backend {
	return []backend{
		{"sim", func(t *testing.T, o *obmdtest.Daemon, label string) *node {
			tok := o.AddSimNode(label)
			bmc := o.Lab().BMC(label, sim.ModeNormal)
			if err := bmc.PowerOff(t.Context(), false); err != nil { // a powered-off host does not echo keys
				t.Fatal(err)
			}
			return &node{label: label, token: tok, write: obmdtest.Inject(bmc), typed: bmc.Typed}
		}},
		{"ipmi", func(t *testing.T, o *obmdtest.Daemon, label string) *node {
			s := ipmisim.Start(t)
			return &node{label: label, token: o.AddIPMINode(label, "ipmi", s), write: s.WriteSerial, typed: s.Serial}
		}},
	}
}

// allSaw is a printUntilSeen condition: every viewer's output shows the
// marker.
func allSaw(vs []*obmdtest.GoSession) func(string) bool {
	var bufs []*obmdtest.Buffer
	for _, v := range vs {
		bufs = append(bufs, v.Out)
	}
	return obmdtest.Shows(bufs...)
}

// TestConsoleViewers: two and ten viewers on one node see identical output;
// the banner says who else is attached and who writes; only the writer's
// keys reach the serial side, and the others are told why.
func TestConsoleViewers(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	for _, backend := range backends() {
		t.Run(backend.name, func(t *testing.T) {
			node := backend.node(t, o, "many-"+backend.name)
			for _, n := range []int{2, 10} {
				t.Run(fmt.Sprint(n), func(t *testing.T) {
					var vs []*obmdtest.GoSession
					for i := range n {
						v := o.GoConsole(t, node.label, node.token, obmdtest.SessionOpts{PTY: i%2 == 1})
						v.Notice("]\r\n") // the banner, whole
						vs = append(vs, v)
					}
					defer func() { // detach all (without a PTY: leave), so the next round starts alone
						for i, v := range vs {
							if i%2 == 0 {
								v.Conn.Close()
								v.Exit()
								continue
							}
							v.TypeKeys(obmdtest.EscDetach)
							if code := v.Exit(); code != 0 {
								t.Errorf("exit after detach: got %d, want 0", code)
							}
						}
					}()
					if b := vs[0].Stderr.String(); !strings.Contains(b, "you are writing; no one else attached") {
						t.Errorf("first banner: got %q, want writer and alone", b)
					}
					if b := vs[1].Stderr.String(); !strings.Contains(b, "you are read-only (Ctrl-E c f to write); 1 other(s): #") ||
						!strings.Contains(b, " (writing)") || strings.Contains(b, "127.0.0.1") || strings.Contains(b, "token") {
						t.Errorf("second banner: got %q, want read-only and the writer named", b)
					}
					if b := vs[n-1].Stderr.String(); !strings.Contains(b, fmt.Sprintf("%d other(s)", n-1)) {
						t.Errorf("last banner: got %q, want %d others", b, n-1)
					}

					node.sync(t, allSaw(vs))
					var want bytes.Buffer
					begin, end := fmt.Sprintf("<begin-%d>", n), fmt.Sprintf("<end-%d>", n) // a terminal's redraw shows the last round's
					want.WriteString(begin)
					for i := range 200 {
						fmt.Fprintf(&want, "line %03d of the boot log, the same for every viewer\r\n", i)
					}
					want.WriteString(end)
					for p := want.Bytes(); len(p) > 0; p = p[min(len(p), 1000):] {
						node.print(t, p[:min(len(p), 1000)])
					}
					for i, v := range vs {
						v.Expect(end)
						got := v.Out.Bytes()
						if s := bytes.Index(got, []byte(begin)); s < 0 || !bytes.Equal(got[s:v.Pos], want.Bytes()) {
							t.Errorf("viewer %d: output differs from what the host printed (%d bytes)", i, want.Len())
						}
					}

					// Readers type first and are told their keys are not sent;
					// then the writer's keys arrive, and only them.
					for i, v := range vs[1:] {
						v.TypeKeys(fmt.Sprintf("reader-%d\r", i+1))
						// Without a PTY there are no escapes to name; vs[i+1] has one for even i.
						want := "[obmd: read-only: your keys are not sent]"
						if i%2 == 0 {
							want = "[obmd: read-only: your keys are not sent; Ctrl-E c f takes over writing]"
						}
						v.Notice(want)
					}
					vs[0].TypeKeys(fmt.Sprintf("writer-of-%d\r", n))
					obmdtest.WaitUntil(t, "the writer's keys", func() bool {
						return bytes.Contains(node.typed(), []byte(fmt.Sprintf("writer-of-%d\r", n)))
					})
					if typed := node.typed(); bytes.Contains(typed, []byte("reader-")) {
						t.Errorf("serial side: got %q, want no reader's keys", obmdtest.Tail(string(typed), 300))
					}
				})
			}
		})
	}
}

// TestConsoleTakeover: a reader takes over writing (Ctrl-E c f), the
// previous writer is told and becomes read-only; `console --read-only`
// never writes by itself, nor by any escape.
func TestConsoleTakeover(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	for _, backend := range backends() {
		t.Run(backend.name, func(t *testing.T) {
			node := backend.node(t, o, "take-"+backend.name)
			// ro attaches first, read-only: it does not take the free pen.
			ro := o.GoConsole(t, node.label, node.token, obmdtest.SessionOpts{Cmd: "console --read-only", PTY: true})
			ro.Notice("this session is read-only; no one else attached")
			a := o.GoConsole(t, node.label, node.token, obmdtest.SessionOpts{PTY: true})
			a.Notice("you are writing; 1 other(s): #")
			b := o.GoConsole(t, node.label, node.token, obmdtest.SessionOpts{PTY: true})
			b.Notice("you are read-only (Ctrl-E c f to write); 2 other(s): #")
			node.sync(t, allSaw([]*obmdtest.GoSession{ro, a, b}))

			keys := func(g *obmdtest.GoSession, s string) { g.TypeKeys(s + "\r") }
			arrived := func(s string) {
				t.Helper()
				obmdtest.WaitUntil(t, s+" on the serial side", func() bool { return bytes.Contains(node.typed(), []byte(s+"\r")) })
			}
			keys(ro, "ro-before")
			ro.Notice("this session is read-only: your keys are not sent")
			keys(a, "a-writes")
			arrived("a-writes")

			b.TypeKeys(obmdtest.EscTakeOver)
			b.Notice("[obmd: you are writing]")
			a.Notice("took over writing; you are read-only]")
			keys(a, "a-after")
			a.Notice("read-only: your keys are not sent")
			keys(b, "b-writes")
			arrived("b-writes")

			// The read-only session cannot take over: b keeps writing.
			ro.TypeKeys(obmdtest.EscTakeOver)
			ro.Notice("[obmd: this session is read-only]")
			keys(ro, "ro-after-f")
			keys(b, "b-still-writes")
			arrived("b-still-writes")
			// a takes over, then gives the pen back; nobody writes until
			// someone takes it.
			a.TypeKeys(obmdtest.EscTakeOver)
			a.Notice("[obmd: you are writing]")
			b.Notice("took over writing; you are read-only]")
			a.TypeKeys(obmdtest.EscReadOnly)
			a.Notice("[obmd: you are read-only]")
			keys(b, "nobody")
			// (The hint is given once per 5 s: b had it. The help answer
			// shows that b's keys before it were handled.)
			b.TypeKeys(obmdtest.EscHelp)
			b.Notice("[obmd escapes: Ctrl-E c, then]")

			for _, bad := range []string{"ro-before", "a-after", "ro-after-f", "nobody"} {
				if bytes.Contains(node.typed(), []byte(bad)) {
					t.Errorf("serial side: got %q, a read-only viewer's keys", bad)
				}
			}
			if strings.Contains(b.Stderr.String(), "took over writing; you are read-only]\r\n\r\n[obmd: you are writing") {
				t.Errorf("b's notices: the read-only session took the pen: %q", b.Stderr.String())
			}
			// Everyone still sees the same output.
			node.sync(t, allSaw([]*obmdtest.GoSession{ro, a, b}))
		})
	}
}

// TestConsoleReadOnlySession: `console --read-only` through the real
// OpenSSH client with a PTY never writes: its banner offers no takeover,
// and neither its keys, nor Ctrl-E c f then keys, nor Ctrl-E c s, Ctrl-E c
// b, OpenSSH's ~B or the escaped prefix reach the node, whoever else is
// attached; each refused escape says why, and its help lists only what it
// may do. Without a PTY (x/crypto) its bytes never reach the node either.
func TestConsoleReadOnlySession(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("watch")
	bmc := o.Lab().BMC("watch", sim.ModeNormal)
	if err := bmc.PowerOff(t.Context(), false); err != nil { // a powered-off host does not echo keys
		t.Fatal(err)
	}
	p := obmdtest.SSHPTY(t, o.SSHAddr(), "watch", tok, nil, "console", "--read-only")
	p.Expect("[obmd: console of watch; this session is read-only; no one else attached; Ctrl-E c ? for help]")
	obmdtest.WaitUntil(t, "console open", bmc.ConsoleActive)

	// Alone on the node, with nobody writing: still nothing goes through.
	p.TypeKeys("ro-alone\r")
	p.Expect("[obmd: this session is read-only: your keys are not sent]")
	for _, esc := range []string{obmdtest.EscTakeOver, obmdtest.EscReadOnly, obmdtest.EscBreak} {
		p.TypeKeys(esc)
		p.Expect("[obmd: this session is read-only]")
	}
	p.TypeKeys("ro-after-f\r\x05c\x05\r~B")
	p.Expect("[obmd: this session is read-only]") // the ~B break request
	p.TypeKeys(obmdtest.EscHelp)
	p.Expect("[obmd escapes: Ctrl-E c, then]\r\n  .       detach\r\n  r       redraw the screen\r\n  p       play back the scrollback\r\n  ?       this help\r\n" +
		"  (this session is read-only: it never writes or sends a break)\r\n")

	// A writer comes and goes; the read-only session never takes over.
	w := o.GoConsole(t, "watch", tok, obmdtest.SessionOpts{PTY: true})
	w.Notice("you are writing; 1 other(s): #")
	p.TypeKeys(obmdtest.EscTakeOver)
	p.Expect("[obmd: this session is read-only]")
	w.TypeKeys("w-writes\r")
	obmdtest.WaitUntil(t, "the writer's keys on the serial side", func() bool { return bytes.Contains(bmc.Typed(), []byte("w-writes\r")) })
	w.TypeKeys(obmdtest.EscDetach)
	w.Notice("[obmd: detached]")
	p.TypeKeys(obmdtest.EscTakeOver + "ro-last\r")
	p.Expect("[obmd: this session is read-only]")

	// Without a PTY: no escapes, and the bytes stay here too.
	g := o.GoConsole(t, "watch", tok, obmdtest.SessionOpts{Cmd: "console --read-only"})
	g.Notice("[obmd: console of watch; this session is read-only; ")
	g.TypeKeys("nopty-keys\r" + obmdtest.EscTakeOver + "nopty-after-f\r")
	g.Notice("[obmd: this session is read-only: your keys are not sent]")

	// A writer that attaches now gets the free pen, and its keys come
	// after anything queued before them: none of the read-only sessions'.
	w2 := o.GoConsole(t, "watch", tok, obmdtest.SessionOpts{PTY: true})
	w2.Notice("you are writing; 2 other(s): #")
	w2.TypeKeys("<end>\r")
	obmdtest.WaitUntil(t, "the last writer's keys on the serial side", func() bool { return bytes.Contains(bmc.Typed(), []byte("<end>")) })
	if typed := bmc.Typed(); !bytes.Equal(typed, []byte("w-writes\r<end>\r")) {
		t.Errorf("serial side: got %q, want only the writers' keys", typed)
	}
	if bmc.Breaks() != 0 {
		t.Errorf("breaks: got %d, want none from a read-only session", bmc.Breaks())
	}
	p.Detach()
}

// TestConsoleStalledViewer: a viewer that never reads (its SSH window and
// then its queue full) does not delay the others, which get every byte in
// time; when it reads again it is told how much it skipped and continues
// with the newest output.
func TestConsoleStalledViewer(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("slow")
	bmc := o.Lab().BMC("slow", sim.ModeNormal)
	stalled := o.GoConsole(t, "slow", tok, obmdtest.SessionOpts{Stall: true})
	fast := []*obmdtest.GoSession{o.GoConsole(t, "slow", tok, obmdtest.SessionOpts{}), o.GoConsole(t, "slow", tok, obmdtest.SessionOpts{PTY: true})}
	obmdtest.WaitUntil(t, "console open", bmc.ConsoleActive)
	obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "sync", allSaw(fast))
	marks := make([]int, len(fast))
	for i, f := range fast {
		marks[i] = f.Out.Len()
	}

	// 8 MiB in steps of 128 KiB: far more than the stalled viewer's SSH
	// window (2 MiB with x/crypto) and queue (256 KiB) together.
	const step, total = 128 << 10, 8 << 20
	var sent bytes.Buffer
	var slowest time.Duration
	for k := 0; sent.Len() < total; k++ {
		chunk := bytes.Repeat(fmt.Appendf(nil, "chunk %05d ", k), step/12)
		sent.Write(chunk)
		start := time.Now()
		bmc.Inject(chunk)
		for i, f := range fast {
			if _, ok := f.Out.Find(marks[i]+sent.Len()-len(chunk[len(chunk)-12:]), chunk[len(chunk)-12:], obmdtest.Timeout); !ok {
				t.Fatalf("step %d: viewer %d did not receive within %v while another viewer stalled", k, i, obmdtest.Timeout)
			}
		}
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("%d MiB to two viewers beside a stalled one: slowest %d KiB step took %v", total>>20, step>>10, slowest.Round(time.Millisecond))
	var wg sync.WaitGroup
	for i, f := range fast {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := f.Out.Bytes()[marks[i]:]; !bytes.Equal(got, sent.Bytes()) {
				t.Errorf("viewer %d: got %d bytes (differ at %d), want all %d", i, len(got), diff(got, sent.Bytes()), sent.Len())
			}
		}()
	}
	wg.Wait()

	stalled.Drain()
	stalled.Notice(" bytes skipped: this connection is too slow]")
	bmc.Inject([]byte("<after-the-stall>"))
	stalled.Expect("<after-the-stall>")
	if got := stalled.Out.Len(); got >= sent.Len() {
		t.Errorf("stalled viewer got %d bytes, want fewer than the %d sent (it skipped)", got, sent.Len())
	}
}

// TestConsoleDropSlowViewer: with drop_slow_viewers, a viewer that falls
// behind is disconnected instead (exit 1) and told why, once it reads; the
// others go on.
func TestConsoleDropSlowViewer(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t, func(c *daemon.Config) { c.Console.DropSlow = true })
	tok := o.AddSimNode("drop")
	bmc := o.Lab().BMC("drop", sim.ModeNormal)
	stalled := o.GoConsole(t, "drop", tok, obmdtest.SessionOpts{Stall: true})
	fast := o.GoConsole(t, "drop", tok, obmdtest.SessionOpts{})
	obmdtest.WaitUntil(t, "console open", bmc.ConsoleActive)
	obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "sync", allSaw([]*obmdtest.GoSession{fast}))
	want := fast.Out.Len()
	for k := range 48 { // 6 MiB in steps of 128 KiB, each waited for
		chunk := bytes.Repeat(fmt.Appendf(nil, "chunk %05d ", k), (128<<10)/12)
		want += len(chunk)
		bmc.Inject(chunk)
		obmdtest.WaitUntil(t, "the reading viewer's output", func() bool { return fast.Out.Len() >= want })
	}
	stalled.Drain()
	if code := stalled.Exit(); code != 1 {
		t.Errorf("dropped viewer: got exit %d, want 1", code)
	}
	stalled.Notice("console output overflowed: this session reads too slowly")
	bmc.Inject([]byte("<fast-goes-on>"))
	fast.Expect("<fast-goes-on>")
}
