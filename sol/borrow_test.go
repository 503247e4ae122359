package sol_test

import (
	"errors"
	"testing"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

// TestAsWriter: a read-only viewer borrows the write role for one write:
// refused while another viewer writes, forced with notices both ways, the
// role handed back to that writer (or to nobody when nobody wrote); the
// link is up before WaitUp returns.
func TestAsWriter(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	m := newManager(t, sol.Config{}, lab)
	bot := attach(t, m, "n1", "bot", sol.AttachOptions{ReadOnly: true})
	record(bot)
	if err := bot.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	write := func(p string) func() error {
		return func() error { _, err := bot.Write([]byte(p)); return err }
	}
	if err := bot.AsWriter(false, write("a")); err != nil {
		t.Fatal(err)
	}
	if bot.Writer() {
		t.Error("the role was not handed back")
	}
	alice := attach(t, m, "n1", "alice", sol.AttachOptions{})
	ra := record(alice)
	if err := bot.AsWriter(false, write("refused")); !errors.Is(err, sol.ErrWriterBusy) {
		t.Errorf("while alice writes: got %v, want ErrWriterBusy", err)
	}
	if err := bot.AsWriter(true, write("b")); err != nil {
		t.Fatal(err)
	}
	ra.waitNotice(t, "bot is sending input; you are read-only meanwhile")
	ra.waitNotice(t, "you are writing again")
	if !alice.Writer() || bot.Writer() {
		t.Errorf("after the forced write: alice %v, bot %v", alice.Writer(), bot.Writer())
	}
	if _, err := bot.Write([]byte("c")); !errors.Is(err, sol.ErrReadOnly) {
		t.Errorf("bot's own write outside AsWriter: got %v", err)
	}
	waitFor(t, "the borrowed writes", func() bool { return string(b.Typed()) == "ab" })
}
