package bmcs

// End-to-end tests of consoles over the BMC's own SSH service (sol/sshconsole):
// a test BMC that speaks SSH and emulates a vendor's manager CLI
// (sol/soltest/sshbmc), reached by obmd, watched through the real OpenSSH
// client.

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/redfish/redfishtest"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/goipmisrv"
	"github.com/obmd/obmd/sol/soltest/sshbmc"
)

// sshNodeInfo is the registration of an ipmi node whose console is b's SSH
// service (nothing answers IPMI at its address: only the console is used).
func sshNodeInfo(b *sshbmc.BMC) map[string]any {
	ci := b.ConsoleInfo()
	info := map[string]any{"addr": b.Host, "user": "ipmi-user", "pass": "ipmi-pass", "console": ci.Console,
		"ssh_port": ci.SSHPort, "ssh_user": ci.SSHUser, "ssh_pass": ci.SSHPass, "ssh_vendor": ci.SSHVendor}
	if ci.SSHCommand != "" {
		info["ssh_command"] = ci.SSHCommand
	}
	return info
}

// addSSHNode registers label on b (sshNodeInfo) and returns its token.
func addSSHNode(o *obmdtest.Daemon, label string, b *sshbmc.BMC) string {
	o.T.Helper()
	o.MustAPI(201, "PUT", "/v1/nodes/"+url.PathEscape(label), map[string]any{"type": "ipmi", "info": sshNodeInfo(b)})
	return o.Rotate(label)
}

// startRedfishSSH starts a Redfish BMC for power and b, whose SSH service
// has its account, for the console, and obmd trusting the Redfish one.
func startRedfishSSH(t *testing.T, vendor string) (*obmdtest.Daemon, *redfishtest.BMC, *sshbmc.BMC) {
	rf := redfishtest.Start(t, nil)
	b := sshbmc.Start(t, sshbmc.Options{Vendor: vendor, User: redfishtest.User, Pass: redfishtest.Pass})
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.Redfish.CAFile, c.Redfish.PollInterval = redfishCA(t, rf), 20*time.Millisecond
	})
	return o, rf, b
}

// nodeView is what GET /v1/nodes/{label} says of a console over SSH.
type nodeView struct {
	Console          string `json:"console"`
	ConsoleInUse     string `json:"console_in_use"`
	SSHHostKeyPinned *struct {
		Fingerprint, Addr string
	} `json:"ssh_host_key_pinned"`
}

// viewNode returns label's view (GET /v1/nodes/{label}), decoded and raw.
func viewNode(o *obmdtest.Daemon, label string) (nodeView, string) {
	o.T.Helper()
	data := o.MustAPI(200, "GET", "/v1/nodes/"+url.PathEscape(label), nil)
	var v nodeView
	if err := json.Unmarshal(data, &v); err != nil {
		o.T.Fatalf("decode node: %v: %s", err, data)
	}
	return v, string(data)
}

// TestSSHConsoleOpenSSH is a person's session on an iDRAC-style BMC over
// its SSH service, through the real OpenSSH client: the host's output on
// the screen without the CLI's words, keys on the host's serial port, ~B
// a break, a second viewer seeing the same output. The BMC's key is pinned
// at the first contact without cutting anyone; the node shows the console
// in use and the key, never the SSH password.
func TestSSHConsoleOpenSSH(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "idrac"})
	tok := addSSHNode(o, "idrac1", b)
	p := obmdtest.SSHPTY(t, o.SSHAddr(), "idrac1", tok, nil)
	p.Expect("[obmd: console of idrac1; you are writing; no one else attached;")
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "sync", func(m string) bool { return strings.Contains(p.Out.String(), m) })
	p.Pos = p.Out.Len()
	if err := b.WriteSerial([]byte("BIOS: printed on the serial port\r\n")); err != nil {
		t.Fatal(err)
	}
	p.Expect("BIOS: printed on the serial port\r\n")
	if s := p.Out.String(); strings.Contains(s, "Connected to Serial Device") || strings.Contains(s, "/admin1->") {
		t.Errorf("the screen shows the BMC's CLI: %q", s)
	}
	p.TypeKeys("root\r")
	b.WaitSerial(t, []byte("root\r"), obmdtest.Timeout)

	second := o.GoConsole(t, "idrac1", tok, obmdtest.SessionOpts{})
	second.Notice("console of idrac1")
	m := obmdtest.PrintUntilSeen(t, b.WriteSerial, "both", obmdtest.Shows(p.Out, second.Out))
	if !strings.Contains(p.Out.String(), m) {
		t.Errorf("the first viewer missed %s", m)
	}

	p.TypeKeys("\r~B")
	obmdtest.WaitUntil(t, "break audited", func() bool { return slices.Contains(o.ConsoleAudit("idrac1"), "console.break ok") })
	if got := b.Stats().Breaks; got != 1 {
		t.Errorf("breaks at the BMC: got %d, want 1", got)
	}

	v, raw := viewNode(o, "idrac1")
	if v.Console != "ssh" || v.ConsoleInUse != "ssh" || v.SSHHostKeyPinned == nil ||
		v.SSHHostKeyPinned.Fingerprint != gossh.FingerprintSHA256(b.HostKey()) || v.SSHHostKeyPinned.Addr != b.Addr() {
		t.Errorf("node view: %s, want console ssh in use and the BMC's key pinned", raw)
	}
	if strings.Contains(raw, sshbmc.Pass) || strings.Contains(raw, "ssh_pass") || strings.Contains(raw, "ipmi-pass") {
		t.Errorf("node view shows a password: %s", raw)
	}
	if acts := o.ConsoleAudit("idrac1"); !slices.Contains(acts, "console.ssh_host_key_pinned ok") {
		t.Errorf("audit: %v, want the pin audited", acts)
	}
	if strings.Contains(o.Logs.String(), sshbmc.Pass) {
		t.Errorf("the daemon log shows the SSH password")
	}
	p.Detach()
}

// TestSSHConsoleBinaryOpenSSH: every byte value passes untouched both ways
// between `ssh -T` and the host, through an OpenBMC-style console whose
// escape (CR ~ .) a viewer's keys never form: the link stays up.
func TestSSHConsoleBinaryOpenSSH(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "openbmc"})
	tok := addSSHNode(o, "bin", b)
	c := obmdtest.SSHNoPTY(t, o.SSHAddr(), "bin", tok)
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "sync", obmdtest.Shows(c.Out))
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	from := c.Out.Len()
	want := append(bytes.Clone(all), "<end>"...)
	if err := b.WriteSerial(want); err != nil {
		t.Fatal(err)
	}
	end := c.Out.Wait(t, "console output", from, "<end>")
	if got := c.Out.Bytes()[from:end]; !bytes.Equal(got, want) {
		t.Errorf("output: got %q, want the 256 byte values then <end>", got)
	}
	in := append(bytes.Clone(all), "\r~.\r~~\r~B<in-end>"...)
	if _, err := c.Stdin.Write(in); err != nil {
		t.Fatal(err)
	}
	b.WaitSerial(t, []byte("<in-end>"), obmdtest.Timeout)
	if got := b.Serial(); !bytes.Equal(got, in) {
		t.Errorf("serial side: got %q, want %q", got, in)
	}
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "after", obmdtest.Shows(c.Out))
	if s := b.Stats(); s.Escapes != 0 || s.Attaches != 1 {
		t.Errorf("BMC: %+v, want one console, never left", s)
	}
}

// TestSSHConsoleSlotFreed: a link obmd closes (the last viewer left)
// leaves the console through the vendor's escape, so that an XCC-style
// BMC, which refuses a second console while one is held and has no
// command to free it, takes the next link at once.
func TestSSHConsoleSlotFreed(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "xcc"})
	tok := addSSHNode(o, "xcc1", b)
	for i := 1; i <= 2; i++ {
		g := o.GoConsole(t, "xcc1", tok, obmdtest.SessionOpts{PTY: true})
		obmdtest.PrintUntilSeen(t, b.WriteSerial, "sync", obmdtest.Shows(g.Out))
		g.TypeKeys(obmdtest.EscDetach)
		g.End.Wait(t, "detach")
		b.WaitStats(t, "console left", obmdtest.Timeout, func(s sshbmc.Stats) bool { return s.Escapes == i && !s.Held })
	}
	if s := b.Stats(); s.Refused != 0 || s.Attaches != 2 {
		t.Errorf("BMC: %+v, want two consoles, none refused", s)
	}
}

// TestSSHConsoleCapture: with capture always, the link is held with
// nobody attached and what the host prints is in console-log.
func TestSSHConsoleCapture(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t, func(c *daemon.Config) { c.Console.Capture = "always" })
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "ilo"})
	tok := addSSHNode(o, "cap", b)
	b.WaitStats(t, "link held for capture", obmdtest.Timeout, func(s sshbmc.Stats) bool { return s.Held })
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "captured", o.LogShows("cap", tok))
}

// TestSSHConsoleRotationCuts: a token rotation cuts the node's console
// viewer at once, with the reason; the link, held by nobody, is left
// cleanly.
func TestSSHConsoleRotationCuts(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "ilo"})
	tok := addSSHNode(o, "rot", b)
	g := o.GoConsole(t, "rot", tok, obmdtest.SessionOpts{})
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "sync", obmdtest.Shows(g.Out))
	start := time.Now()
	o.Rotate("rot")
	at := g.End.Wait(t, "the viewer cut")
	if took := at.Sub(start); took > 2*time.Second {
		t.Errorf("cut %v after the rotation, want within its bound", took)
	}
	if !strings.Contains(g.Stderr.String(), "token rotated") {
		t.Errorf("viewer stderr: %q, want the reason", g.Stderr.String())
	}
	b.WaitStats(t, "console left", obmdtest.Timeout, func(s sshbmc.Stats) bool { return !s.Held && s.Escapes == 1 })
}

// TestSSHConsoleReconnect: a BMC that drops the SSH connection: viewers
// are told the link is lost (without the BMC's address) and restored, and
// output flows again on the new link.
func TestSSHConsoleReconnect(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "idrac"})
	tok := addSSHNode(o, "drop", b)
	g := o.GoConsole(t, "drop", tok, obmdtest.SessionOpts{})
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "sync", obmdtest.Shows(g.Out))
	b.DropConnections()
	g.Notice("[obmd: console link lost, reconnecting]")
	g.Notice("[obmd: console link restored]")
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "again", obmdtest.Shows(g.Out))
	if strings.Contains(g.Stderr.String(), b.Host) {
		t.Errorf("notices name the BMC's address: %q", g.Stderr.String())
	}
	if s := b.Stats(); s.Attaches != 2 {
		t.Errorf("BMC: %+v, want the console attached again", s)
	}
}

// TestSSHConsoleHostKeyChanged: a BMC showing another host key than the
// one pinned is refused: the viewer is told (no address), doctor names the
// host key step, the admin log and the audit say so once; the pin, shown
// in the node view, stays. An administrator's reset makes the next link
// pin the new key; neither the pin nor the reset cuts the viewer.
func TestSSHConsoleHostKeyChanged(t *testing.T) {
	t.Parallel()
	o, rf, b := startRedfishSSH(t, "ilo")
	o.MustAPI(201, "PUT", "/v1/nodes/hk", map[string]any{"type": "redfish", "info": map[string]any{
		"addr": rf.URL, "user": redfishtest.User, "pass": redfishtest.Pass, "console": "ssh", "ssh_vendor": "ilo",
		"ssh_port": b.Port}})
	tok := o.Rotate("hk")
	g := o.GoConsole(t, "hk", tok, obmdtest.SessionOpts{})
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "sync", obmdtest.Shows(g.Out))
	old := gossh.FingerprintSHA256(b.HostKey())
	b.RotateHostKey(t)
	b.DropConnections()
	g.Notice("[obmd: console link lost, reconnecting]")
	g.Notice("[obmd: cannot open console: the BMC's SSH host key does not match the pinned one; retrying]")
	attaches := b.Stats().Attaches

	res, _ := o.ExecGo("hk", tok, "doctor")
	if res.Code != 1 || !strings.Contains(res.Stdout, "FAIL  ssh host key") || strings.Contains(res.Stdout, b.Host) {
		t.Errorf("tenant's doctor: %v, want the host key step failed, no address", res)
	}
	var doc struct {
		Failed string
		Checks []struct{ Name, Result string }
	}
	if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/nodes/hk/doctor", nil), &doc); err != nil || doc.Failed != "ssh host key" ||
		!strings.Contains(doc.Checks[len(doc.Checks)-1].Result, old) {
		t.Errorf("admin doctor: %+v (%v), want the host key step failed, naming the pinned key", doc, err)
	}
	if n := strings.Count(o.Logs.String(), `"msg":"ssh_host_key_changed"`); n == 0 {
		t.Errorf("no ssh_host_key_changed in the admin log")
	}
	if n := strings.Count(strings.Join(o.ConsoleAudit("hk"), "\n"), "console.ssh_host_key_changed refused"); n != 1 {
		t.Errorf("audit: %d changed-key events, want 1: %v", n, o.ConsoleAudit("hk"))
	}
	if v, raw := viewNode(o, "hk"); v.SSHHostKeyPinned == nil || v.SSHHostKeyPinned.Fingerprint != old {
		t.Errorf("node view: %s, want the old key still pinned", raw)
	}
	if got := b.Stats().Attaches; got != attaches {
		t.Errorf("attaches went from %d to %d: a console was attached past a changed key", attaches, got)
	}

	if code, _ := o.Request("DELETE", "/v1/nodes/hk/ssh-host-key", nil, "admin", "wrong-admin-token"); code != 404 {
		t.Errorf("reset with a wrong admin credential: got %d, want 404", code)
	}
	if code, _ := o.API("DELETE", "/v1/nodes/no-such-node/ssh-host-key", nil); code != 404 {
		t.Errorf("reset of an unknown node: got %d, want 404", code)
	}
	var reset struct{ Removed bool }
	if err := json.Unmarshal(o.MustAPI(200, "DELETE", "/v1/nodes/hk/ssh-host-key", nil), &reset); err != nil || !reset.Removed {
		t.Fatalf("reset: %+v %v", reset, err)
	}
	g.Notice("[obmd: console link restored]")
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "after-reset", obmdtest.Shows(g.Out))
	if v, raw := viewNode(o, "hk"); v.SSHHostKeyPinned == nil || v.SSHHostKeyPinned.Fingerprint != gossh.FingerprintSHA256(b.HostKey()) {
		t.Errorf("node view after the reset: %s, want the new key pinned", raw)
	}
	if g.End.Ended() {
		t.Errorf("the viewer was cut by a pin or a reset")
	}
	if acts := o.ConsoleAudit("hk"); !slices.Contains(acts, "node.ssh_host_key_reset ok") {
		t.Errorf("audit: %v, want the reset", acts)
	}
}

// TestSSHConsoleAutoRedfish is the operator's iDRAC-style node: Redfish
// power, console "auto". The Redfish service says IPMI SOL is off and SSH
// on (its port and entry command): obmd picks SSH at once, shows it in use
// and in doctor, and power still goes through Redfish.
func TestSSHConsoleAutoRedfish(t *testing.T) {
	t.Parallel()
	o, rf, b := startRedfishSSH(t, "idrac")
	rf.SetSerialConsole(t, redfishtest.SerialConsole{SSH: true, SSHPort: b.Port, SSHCommand: "console com2"})
	o.MustAPI(201, "PUT", "/v1/nodes/r1", map[string]any{"type": "redfish", "info": map[string]any{
		"addr": rf.URL, "user": redfishtest.User, "pass": redfishtest.Pass, "console": "auto", "ssh_vendor": "idrac"}})
	tok := o.Rotate("r1")
	res, _ := o.ExecGo("r1", tok, "doctor")
	if res.Code != 0 || !strings.Contains(res.Stdout, "auto: ssh (Redfish: IPMI SOL off, SSH on)") ||
		!strings.Contains(res.Stdout, "ssh console") || strings.Contains(res.Stdout, b.Host) {
		t.Errorf("doctor: %v, want the transport step (ssh, and why) and the SSH steps passing", res)
	}
	if s := b.Stats(); s.Held || s.Attaches != 1 || s.Escapes != 1 {
		t.Errorf("after doctor: %+v, want the console attached once and left", s)
	}
	g := o.GoConsole(t, "r1", tok, obmdtest.SessionOpts{})
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "sync", obmdtest.Shows(g.Out))
	g.TypeKeys("typed\r")
	b.WaitSerial(t, []byte("typed\r"), obmdtest.Timeout)
	if v, raw := viewNode(o, "r1"); v.ConsoleInUse != "ssh" {
		t.Errorf("node view: %s, want console_in_use ssh", raw)
	}
	res, err := o.ExecGo("r1", tok, "power-status")
	if err != nil || res.Code != 0 || strings.TrimSpace(res.Stdout) != "r1: power on" {
		t.Errorf("power-status: %v %v", res, err)
	}
}

// TestSSHConsoleAutoIPMIRedfish is an ipmi node (go-ipmi's BMC for power)
// whose BMC serves its console on SSH, not SOL: its Redfish service
// (info.redfish, the same account) says SOL is off and SSH on, so auto goes
// to the SSH console at once, with the port and command the service
// reports, and never tries SOL; power still goes over IPMI. The Redfish
// address shows in the admin view, never in the tenant's doctor.
func TestSSHConsoleAutoIPMIRedfish(t *testing.T) {
	t.Parallel()
	soltest.External(t, "goipmi-server") // before any daemon starts
	o, rf, b := startRedfishSSH(t, "generic")
	gis := goipmisrv.Start(t, goipmisrv.Options{Pass: redfishtest.Pass})
	rf.SetSerialConsole(t, redfishtest.SerialConsole{SSH: true, SSHPort: b.Port, SSHCommand: "console"})
	o.MustAPI(201, "PUT", "/v1/nodes/i1", map[string]any{"type": "ipmi", "info": map[string]any{
		"addr": "127.0.0.1", "port": gis.Port, "user": redfishtest.User, "pass": redfishtest.Pass,
		"console": "auto", "redfish": rf.URL}})
	tok := o.Rotate("i1")
	res, _ := o.ExecGo("i1", tok, "doctor")
	if res.Code != 0 || !strings.Contains(res.Stdout, "auto: ssh (Redfish: IPMI SOL off, SSH on)") ||
		!strings.Contains(res.Stdout, "ssh console") || strings.Contains(res.Stdout, rf.URL) {
		t.Errorf("doctor: %v, want SSH chosen from the Redfish service and its steps passing, without its address", res)
	}
	g := o.GoConsole(t, "i1", tok, obmdtest.SessionOpts{})
	obmdtest.PrintUntilSeen(t, b.WriteSerial, "sync", obmdtest.Shows(g.Out))
	g.TypeKeys("typed\r")
	b.WaitSerial(t, []byte("typed\r"), obmdtest.Timeout)
	if v, raw := viewNode(o, "i1"); v.ConsoleInUse != "ssh" || !strings.Contains(raw, `"redfish":"`+rf.URL+`"`) {
		t.Errorf("node view: %s, want console_in_use ssh and the Redfish service shown to the admin", raw)
	}
	if res, err := o.ExecGo("i1", tok, "power-status"); err != nil || res.Code != 0 {
		t.Errorf("power-status over IPMI: %v %v", res, err)
	}
}
