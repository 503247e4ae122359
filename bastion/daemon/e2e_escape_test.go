package daemon_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestConsoleEscapeConfigured: with another escape prefix (YAML `escape`),
// that prefix works, every message that tells the user what to type names
// it, and the default one is plain data.
func TestConsoleEscapeConfigured(t *testing.T) {
	t.Parallel()
	o := startObmd(t, func(c *daemon.Config) { c.Escape = "\x1dq" })
	tok := o.addSimNode("esc1")
	bmc := o.Lab().BMC("esc1", sim.ModeNormal)

	g := o.goConsole(t, "esc1", tok, conOpts{pty: true})
	g.notice("[obmd: console of esc1; you are writing; no one else attached; Ctrl-] q ? for help]")
	ro := o.goConsole(t, "esc1", tok, conOpts{cmd: "console --read-only", pty: true})
	ro.notice("this session is read-only; 1 other(s): #")

	g.typeKeys("\x1dq?")
	g.notice("[obmd escapes: Ctrl-] q, then]\r\n  .       detach\r\n  f       take over writing\r\n  s       become read-only\r\n" +
		"  b       send a serial break\r\n  r       redraw the screen\r\n  p       play back the scrollback\r\n  Ctrl-]  send Ctrl-] q itself\r\n  ?       this help\r\n")
	g.typeKeys("\x1dqz")
	g.notice("[obmd: unknown escape; Ctrl-] q ? for help]")
	g.typeKeys("\x1dqs")
	g.notice("[obmd: you are read-only]")
	g.typeKeys("ignored")
	g.notice("[obmd: read-only: your keys are not sent; Ctrl-] q f takes over writing]")
	g.typeKeys("\x1dqf")
	g.notice("[obmd: you are writing]")

	g.typeKeys("\x05c.\r") // the default prefix is no escape here
	waitUntil(t, "the default prefix on the serial side", func() bool { return bytes.Contains(bmc.Typed(), []byte("\x05c.\r")) })
	g.typeKeys("\x1dq.")
	g.notice("[obmd: detached]")
	if code := g.exit(); code != 0 {
		t.Errorf("exit status after detach: got %d, want 0", code)
	}
	for _, m := range []string{g.errb.String(), ro.errb.String()} {
		if strings.Contains(m, "Ctrl-E") {
			t.Errorf("notices name the default prefix: %q", m)
		}
	}
}

// escBackends are conBackends plus ipmi_sim through ipmitool, whose own
// escape character ("~") the driver neutralises.
func escBackends() []conBackend {
	return append(conBackends(), conBackend{"ipmitool", func(t *testing.T, o *obmd, label string) *conNode {
		ipmisim.Require(t, "ipmitool")
		s := ipmisim.Start(t)
		return &conNode{label: label, token: o.addIPMINode(label, "ipmitool", s), write: s.WriteSerial, typed: s.Serial}
	}})
}

// TestConsoleNoPTYUntouched: through `ssh -T` (OpenSSH, no PTY) every byte
// value, obmd's escapes (Ctrl-E c then . ? b f s r, the literal key) and
// OpenSSH's and ipmitool's "~" escapes reach the serial side byte for
// byte, on the simulator and on ipmi_sim with both drivers; the console
// stays up and no escape is acted on.
func TestConsoleNoPTYUntouched(t *testing.T) {
	t.Parallel()
	o := startObmd(t)
	var in []byte
	for i := range 256 {
		in = append(in, byte(i))
	}
	in = append(in, "\x05c.\x05c?\x05cb\x05cf\x05cs\x05cr\x05c\x05\x05\x05cc\r~.\r~B\r~?\n~~\x00\xff<in-end>"...)
	for _, backend := range escBackends() {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			node := backend.node(t, o, "raw-"+backend.name)
			sc := sshNoPTY(t, o.SSHAddr(), node.label, node.token)
			sc.errb.wait(t, "banner", 0, "no escapes without a terminal")
			node.sync(t, shows(sc.out))
			before := len(node.typed())
			if _, err := sc.stdin.Write(in); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "input on the serial side", func() bool { return bytes.HasSuffix(node.typed(), []byte("<in-end>")) })
			if got := node.typed()[before:]; !bytes.Equal(got, in) {
				t.Errorf("serial side: got %q, want %q", got, in)
			}
			node.sync(t, shows(sc.out)) // still attached, the link still up
			if e := sc.errb.String(); strings.Contains(e, "detached") || strings.Contains(e, "obmd escapes") ||
				strings.Contains(e, "break") || strings.Contains(e, "link lost") {
				t.Errorf("notices: got %q, want no escape acted on", e)
			}
			if sc.end.ended() {
				t.Error("the console ended")
			}
		})
	}
}

// TestConsoleLiteralPrefix: on a PTY (OpenSSH ssh -tt), Ctrl-E c Ctrl-E
// sends Ctrl-E c to the node, the help names that key, and the other
// escapes still work.
func TestConsoleLiteralPrefix(t *testing.T) {
	t.Parallel()
	o := startObmd(t)
	for _, backend := range conBackends() {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			node := backend.node(t, o, "lit-"+backend.name)
			p := sshPTY(t, o.SSHAddr(), node.label, node.token, nil)
			p.expect("Ctrl-E c ? for help]")
			node.sync(t, shows(p.out))
			before := len(node.typed())
			p.typeKeys("a\x05c\x05b\x05c\x05\r")
			waitUntil(t, "the prefix on the serial side", func() bool { return bytes.Contains(node.typed()[before:], []byte("\r")) })
			if got, want := node.typed()[before:], []byte("a\x05cb\x05c\r"); !bytes.Equal(got, want) {
				t.Errorf("serial side: got %q, want %q", got, want)
			}
			p.typeKeys(escHelp)
			p.expect("  Ctrl-E  send Ctrl-E c itself\r\n")
			p.typeKeys(escReadOnly)
			p.expect("[obmd: you are read-only]")
			p.typeKeys(escTakeOver)
			p.expect("[obmd: you are writing]")
			p.detach()
		})
	}
}
