package console

import (
	"bytes"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestConsoleEscapeConfigured: with another escape prefix (YAML `escape`),
// that prefix works, every message that tells the user what to type names
// it, and the default one is plain data.
func TestConsoleEscapeConfigured(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t, func(c *daemon.Config) { c.SSH.Escape = "\x1dq" })
	tok := o.AddSimNode("esc1")
	bmc := o.Lab().BMC("esc1", sim.ModeNormal)

	g := o.GoConsole(t, "esc1", tok, obmdtest.SessionOpts{PTY: true})
	g.Notice("[obmd: console of esc1; you are writing; no one else attached; Ctrl-] q ? for help]")
	ro := o.GoConsole(t, "esc1", tok, obmdtest.SessionOpts{Cmd: "console --read-only", PTY: true})
	ro.Notice("this session is read-only; 1 other(s): #")

	g.TypeKeys("\x1dq?")
	g.Notice("[obmd escapes: Ctrl-] q, then]\r\n  .       detach\r\n  f       take over writing\r\n  s       become read-only\r\n" +
		"  b       send a serial break\r\n  r       redraw the screen\r\n  p       play back the scrollback\r\n  Ctrl-]  send Ctrl-] q itself\r\n  ?       this help\r\n")
	g.TypeKeys("\x1dqz")
	g.Notice("[obmd: unknown escape; Ctrl-] q ? for help]")
	g.TypeKeys("\x1dqs")
	g.Notice("[obmd: you are read-only]")
	g.TypeKeys("ignored")
	g.Notice("[obmd: read-only: your keys are not sent; Ctrl-] q f takes over writing]")
	g.TypeKeys("\x1dqf")
	g.Notice("[obmd: you are writing]")

	g.TypeKeys("\x05c.\r") // the default prefix is no escape here
	obmdtest.WaitUntil(t, "the default prefix on the serial side", func() bool { return bytes.Contains(bmc.Typed(), []byte("\x05c.\r")) })
	g.TypeKeys("\x1dq.")
	g.Notice("[obmd: detached]")
	if code := g.Exit(); code != 0 {
		t.Errorf("exit status after detach: got %d, want 0", code)
	}
	for _, m := range []string{g.Stderr.String(), ro.Stderr.String()} {
		if strings.Contains(m, "Ctrl-E") {
			t.Errorf("notices name the default prefix: %q", m)
		}
	}
}

// escapeBackends are backends plus ipmi_sim through ipmitool, whose own
// escape character ("~") the driver neutralises.
func escapeBackends() []backend {
	return append(backends(), backend{"ipmitool", func(t *testing.T, o *obmdtest.Daemon, label string) *node {
		ipmisim.Require(t, "ipmitool")
		s := ipmisim.Start(t)
		return &node{label: label, token: o.AddIPMINode(label, "ipmitool", s), write: s.WriteSerial, typed: s.Serial}
	}})
}

// TestConsoleNoPTYUntouched: through `ssh -T` (OpenSSH, no PTY) every byte
// value, obmd's escapes (Ctrl-E c then . ? b f s r, the literal key) and
// OpenSSH's and ipmitool's "~" escapes reach the serial side byte for
// byte, on the simulator and on ipmi_sim with both drivers; the console
// stays up and no escape is acted on.
func TestConsoleNoPTYUntouched(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	var in []byte
	for i := range 256 {
		in = append(in, byte(i))
	}
	in = append(in, "\x05c.\x05c?\x05cb\x05cf\x05cs\x05cr\x05c\x05\x05\x05cc\r~.\r~B\r~?\n~~\x00\xff<in-end>"...)
	for _, backend := range escapeBackends() {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			node := backend.node(t, o, "raw-"+backend.name)
			sc := obmdtest.SSHNoPTY(t, o.SSHAddr(), node.label, node.token)
			sc.Stderr.Wait(t, "banner", 0, "no escapes without a terminal")
			node.sync(t, obmdtest.Shows(sc.Out))
			before := len(node.typed())
			if _, err := sc.Stdin.Write(in); err != nil {
				t.Fatal(err)
			}
			obmdtest.WaitUntil(t, "input on the serial side", func() bool { return bytes.HasSuffix(node.typed(), []byte("<in-end>")) })
			if got := node.typed()[before:]; !bytes.Equal(got, in) {
				t.Errorf("serial side: got %q, want %q", got, in)
			}
			node.sync(t, obmdtest.Shows(sc.Out)) // still attached, the link still up
			if e := sc.Stderr.String(); strings.Contains(e, "detached") || strings.Contains(e, "obmd escapes") ||
				strings.Contains(e, "break") || strings.Contains(e, "link lost") {
				t.Errorf("notices: got %q, want no escape acted on", e)
			}
			if sc.End.Ended() {
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
	o := obmdtest.Start(t)
	for _, backend := range backends() {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			node := backend.node(t, o, "lit-"+backend.name)
			p := obmdtest.SSHPTY(t, o.SSHAddr(), node.label, node.token, nil)
			p.Expect("Ctrl-E c ? for help]")
			node.sync(t, obmdtest.Shows(p.Out))
			before := len(node.typed())
			p.TypeKeys("a\x05c\x05b\x05c\x05\r")
			obmdtest.WaitUntil(t, "the prefix on the serial side", func() bool { return bytes.Contains(node.typed()[before:], []byte("\r")) })
			if got, want := node.typed()[before:], []byte("a\x05cb\x05c\r"); !bytes.Equal(got, want) {
				t.Errorf("serial side: got %q, want %q", got, want)
			}
			p.TypeKeys(obmdtest.EscHelp)
			p.Expect("  Ctrl-E  send Ctrl-E c itself\r\n")
			p.TypeKeys(obmdtest.EscReadOnly)
			p.Expect("[obmd: you are read-only]")
			p.TypeKeys(obmdtest.EscTakeOver)
			p.Expect("[obmd: you are writing]")
			p.Detach()
		})
	}
}
