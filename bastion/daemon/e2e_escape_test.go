package daemon_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
)

// TestConsoleEscapeConfigured: with another escape prefix (YAML `escape`),
// that prefix works, every message that tells the user what to type names
// it, and the default one is plain data.
func TestConsoleEscapeConfigured(t *testing.T) {
	t.Parallel()
	o := startObmd(t, func(c *daemon.Config) { c.Escape = "\x1dq" })
	tok := o.addSimNode("esc1")
	bmc := o.Lab().BMC("esc1", sim.ModeNormal)

	g := o.goConsole(t, "esc1", tok, conOpts{})
	g.notice("[obmd: console of esc1; you are writing; no one else attached; Ctrl-] q ? for help]")
	ro := o.goConsole(t, "esc1", tok, conOpts{cmd: "console --read-only"})
	ro.notice("you are read-only (Ctrl-] q f to write); 1 other(s): #")

	g.typeKeys("\x1dq?")
	g.notice("[obmd: obmd escapes: Ctrl-] q then  . detach  f take over writing  s read-only  b break  r replay scrollback  ? help]")
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
