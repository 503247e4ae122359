package bmcs

// End to end through the SSH front door to real BMCs: the native (ipmi)
// and ipmitool drivers against OpenIPMI's ipmi_sim, a BMC that never
// answers, and a second power operation while one is in flight.

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// driverCase is one row of the power table (the rows of sol/soltest,
// through obmd): run lines on a fresh machine that is on with no actions
// recorded, then expect exactly actions (ipmi_sim's power hook words).
type driverCase struct {
	name    string
	lines   []string
	stdout  []string // per line, with L for the label
	actions []string
	powerOn bool
	status  string // power-status afterwards, if set
}

func driverCases() []driverCase {
	return []driverCase{
		{"status on", []string{"power-status"}, []string{"L: power on"}, nil, true, ""},
		{"off", []string{"power-off"}, []string{"L: powered off"}, []string{"power 0"}, false, "off"},
		{"soft off", []string{"power-off --soft"}, []string{"L: soft power-off requested"}, []string{"shutdown 1"}, false, "off"},
		{"off then on", []string{"power-off", "power-on"}, []string{"L: powered off", "L: powered on"},
			[]string{"power 0", "power 1"}, true, "on"},
		{"cycle", []string{"power-cycle"}, []string{"L: power cycled"}, []string{"power 0", "power 1"}, true, "on"},
		{"cycle force", []string{"power-cycle --force"}, []string{"L: reset"}, []string{"reset 1"}, true, "on"},
		{"reset", []string{"power-reset"}, []string{"L: reset"}, []string{"reset 1"}, true, "on"},
		{"bootdev pxe", []string{"bootdev pxe"}, []string{"L: next boot from pxe"}, []string{"boot pxe"}, true, ""},
		{"bootdev disk", []string{"bootdev disk"}, []string{"L: next boot from disk"}, []string{"boot default"}, true, ""},
		{"bootdev bios", []string{"bootdev bios"}, []string{"L: next boot from bios"}, []string{"boot bios"}, true, ""},
		{"bootdev cdrom", []string{"bootdev cdrom"}, []string{"L: next boot from cdrom"}, []string{"boot cdrom"}, true, ""},
		{"bootdev none", []string{"bootdev none"}, []string{"L: next boot from none"}, []string{"boot none"}, true, ""},
		{"bootdev pxe persistent", []string{"bootdev pxe --persistent"}, []string{"L: next boot from pxe (persistent)"},
			[]string{"boot pxe"}, true, ""},
		{"bootdev disk persistent", []string{"bootdev disk --persistent"}, []string{"L: next boot from disk (persistent)"},
			[]string{"boot default"}, true, ""},
	}
}

// TestSSHDrivers runs the power table over SSH through obmd on both IPMI
// drivers against ipmi_sim, checking what the simulated machine went
// through.
func TestSSHDrivers(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmi_sim", "socat", "ipmitool")
	o := obmdtest.Start(t)
	for _, typ := range []string{"ipmi", "ipmitool"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			for i, tc := range driverCases() {
				t.Run(tc.name, func(t *testing.T) {
					s := ipmisim.Start(t)
					label := typ + "-" + string(rune('a'+i))
					tok := o.AddIPMINode(label, typ, s)
					for j, line := range tc.lines {
						res := obmdtest.Must(t)(o.ExecGo(label, tok, line))
						want := strings.ReplaceAll(tc.stdout[j], "L:", label+":") + "\n"
						if res.Code != 0 || res.Stdout != want || res.Stderr != "" {
							t.Fatalf("%q: got %v, want exit 0 and %q", line, res, want)
						}
					}
					waitActions(t, s, tc.actions)
					if got := s.PowerOn(); got != tc.powerOn {
						t.Errorf("machine power on: got %v, want %v", got, tc.powerOn)
					}
					if tc.status != "" {
						res := obmdtest.Must(t)(o.ExecGo(label, tok, "power-status --json"))
						if want := `"power":"` + tc.status + `"`; res.Code != 0 || !strings.Contains(res.Stdout, want) {
							t.Errorf("power-status --json: got %v, want %s", res, want)
						}
					}
				})
			}
		})
	}
}

// waitActions waits until the simulator recorded exactly want (a power
// cycle's "power 1" comes about a second after its "power 0").
func waitActions(t *testing.T, s *ipmisim.Sim, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.Actions()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) || len(got) > len(want) {
			t.Fatalf("actions: got %q, want %q", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deadBMC is a UDP socket on loopback that reads what it is sent and
// never answers: a BMC that is gone.
type deadBMC struct {
	conn *net.UDPConn
	got  chan struct{} // closed at the first packet
	done chan struct{} // closed when the reader has returned
}

func newDeadBMC(t *testing.T) *deadBMC {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	d := &deadBMC{conn: conn, got: make(chan struct{}), done: make(chan struct{})}
	go func() { // owned by the test: the cleanup closes conn and waits
		defer close(d.done)
		var once sync.Once
		buf := make([]byte, 2048)
		for {
			if _, _, err := conn.ReadFrom(buf); err != nil {
				return
			}
			once.Do(func() { close(d.got) })
		}
	}()
	t.Cleanup(func() { conn.Close(); <-d.done })
	return d
}

// deadPass is the dead BMC's password: it must never reach a client.
const deadPass = "dead-bmc-secret-7f3e"

func (d *deadBMC) info() sol.Info {
	return sol.Info{Addr: "127.0.0.1", Port: d.conn.LocalAddr().(*net.UDPAddr).Port, User: "admin", Pass: deadPass}
}

// TestSSHDeadBMC: while calls to BMCs that never answer are in flight (one
// node per driver), other nodes' power-status answers at once, and another
// power operation on a dead node is refused as busy (exit 4) at once; each
// dead call itself fails (exit 1) when the power timeout ends it.
func TestSSHDeadBMC(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmi_sim", "socat", "ipmitool")
	const powerTimeout = 3 * time.Second
	o := obmdtest.Start(t, func(c *daemon.Config) { c.Commands.Timeout = powerTimeout })
	s := ipmisim.Start(t)
	liveTok := o.AddIPMINode("live", "ipmi", s)
	simTok := o.AddSimNode("simnode")

	type outcome struct {
		res  obmdtest.Result
		err  error
		took time.Duration
		at   time.Time
	}
	drivers := []string{"ipmi", "ipmitool"}
	deadTok := map[string]string{}
	deadDone := map[string]chan outcome{}
	for _, typ := range drivers {
		dead := newDeadBMC(t)
		label := "dead-" + typ
		o.AddNode(label, typ, dead.info())
		deadTok[typ] = o.Rotate(label)
		done := make(chan outcome, 1)
		deadDone[typ] = done
		start := time.Now()
		go func() { // waited for below
			res, err := o.ExecGo(label, deadTok[typ], "power-on")
			done <- outcome{res, err, time.Since(start), time.Now()}
		}()
		select {
		case <-dead.got:
		case o := <-done:
			t.Fatalf("%s: dead BMC never contacted; the call returned %v, %v", typ, o.res, o.err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: dead BMC never contacted", typ)
		}
	}

	var healthy []outcome
	for _, c := range []struct{ label, tok, want string }{
		{"live", liveTok, "live: power on\n"},
		{"simnode", simTok, "simnode: power on\n"},
	} {
		t0 := time.Now()
		res, err := o.ExecGo(c.label, c.tok, "power-status")
		healthy = append(healthy, outcome{res, err, time.Since(t0), time.Now()})
		if err != nil || res.Code != 0 || res.Stdout != c.want {
			t.Errorf("%s power-status during the dead calls: got %v, %v; want exit 0 and %q", c.label, res, err, c.want)
		}
	}
	var busy []outcome
	for _, typ := range drivers {
		t0 := time.Now()
		res, err := o.ExecGo("dead-"+typ, deadTok[typ], "power-cycle")
		busy = append(busy, outcome{res, err, time.Since(t0), time.Now()})
		if err != nil || res.Code != commands.ExitBusy || !strings.Contains(res.Stderr, "in flight") {
			t.Errorf("%s: second power op on the dead node: got %v, %v; want exit 4 (busy)", typ, res, err)
		}
	}

	for _, typ := range drivers {
		d := <-deadDone[typ]
		if d.err != nil || d.res.Code != commands.ExitFailed || !strings.Contains(d.res.Stderr, "did not answer") {
			t.Errorf("%s: dead call: got %v, %v; want exit 1, BMC did not answer", typ, d.res, d.err)
		}
		for i, h := range append(healthy, busy...) {
			if !h.at.Before(d.at) || h.took*5 > d.took {
				t.Errorf("%s: call %d took %v and ended after the dead call (%v)? want a prompt answer before it ends",
					typ, i, h.took, d.took)
			}
		}
		t.Logf("%s: dead call %v, stderr %q", typ, d.took.Round(time.Millisecond), d.res.Stderr)
	}
	if strings.Contains(o.Logs.String(), deadPass) {
		t.Errorf("the BMC password reached the log")
	}
	t.Logf("meanwhile: power-status %v (ipmi_sim) and %v (sim); busy answers %v and %v",
		healthy[0].took.Round(time.Millisecond), healthy[1].took.Round(time.Millisecond),
		busy[0].took.Round(time.Millisecond), busy[1].took.Round(time.Millisecond))
}

// TestSSHBusy: a second power operation on a node whose BMC is slow gets
// exit 4 while the first is in flight, power-status is not held up by the
// slot, and the slot is free again afterwards; all of it is audited.
func TestSSHBusy(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("slow")
	bmc := o.Lab().BMC("slow", sim.ModeNormal)
	bmc.SetDelay(1500 * time.Millisecond)

	first := make(chan obmdtest.Result, 1)
	go func() { // waited for below
		res, err := o.ExecGo("slow", tok, "power-cycle")
		if err != nil {
			t.Errorf("first power-cycle: %v", err)
		}
		first <- res
	}()
	// The first operation holds the slot once its session has started and
	// the runner took it (right after the session.start record).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil && !hasAudit(o.Audit("slow"), "session.start", "ok") {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)

	for _, line := range []string{"power-on", "power-off --soft", "power-reset", "bootdev pxe", "power-cycle --force --json"} {
		res := obmdtest.Must(t)(o.ExecGo("slow", tok, line))
		if res.Code != commands.ExitBusy || !strings.Contains(res.Stderr, "another power operation on this node is in flight") {
			t.Errorf("%q during a power op: got %v, want exit 4", line, res)
		}
	}
	select {
	case res := <-first:
		t.Fatalf("first power-cycle ended before the busy checks were done (%v); the delay is too short", res)
	default:
	}
	// A read is never busy (it waits for the slow BMC, not for the slot).
	if res := obmdtest.Must(t)(o.ExecGo("slow", tok, "power-status")); res.Code != 0 {
		t.Errorf("power-status during a power op: got %v, want exit 0", res)
	}
	if res := <-first; res.Code != 0 || res.Stdout != "slow: power cycled\n" {
		t.Errorf("first power-cycle: got %v, want exit 0", res)
	}
	if got := bmc.Actions(); !slices.Equal(got, []string{"power cycle"}) {
		t.Errorf("simulator actions: got %q, want only the first power cycle", got)
	}
	bmc.SetDelay(0)
	if res := obmdtest.Must(t)(o.ExecGo("slow", tok, "power-on")); res.Code != 0 {
		t.Errorf("power-on after the first op ended: got %v, want exit 0", res)
	}
	busy := 0
	for _, e := range o.Audit("slow") {
		if e.Result == "busy" {
			busy++
		}
	}
	if busy != 5 {
		t.Errorf("busy audit records: got %d, want 5", busy)
	}
}

func hasAudit(events []obmdtest.AuditRow, action, result string) bool {
	for _, e := range events {
		if e.Action == action && e.Result == result {
			return true
		}
	}
	return false
}
