package sol_test

import (
	"errors"
	"testing"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

// simNode is a hub over one simulated node, n1.
func simNode(t *testing.T) (*sim.BMC, *sol.Manager) {
	lab := sim.NewLab()
	return lab.BMC("n1", sim.ModeNormal), newManager(t, sol.Config{}, lab)
}

// TestAsWriter: a read-only viewer borrows the write role for one write:
// refused while another viewer writes, forced with notices both ways, the
// role handed back to that writer (or to nobody when nobody wrote); the
// link is up before WaitUp returns.
func TestAsWriter(t *testing.T) {
	b, m := simNode(t)
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

// TestClusterAsWriter: on a relaying hub, a read-only viewer's borrowed
// write is refused while a viewer on the holder writes; forced, it reaches
// the node as the borrower's (the holder drops a non-writer's input), and
// the role goes to nobody (a writer elsewhere does not get it back).
func TestClusterAsWriter(t *testing.T) {
	b, _, holder, relays, _ := newCluster(t)
	a1, ra1 := attached(t, holder, "a1", sol.AttachOptions{})
	bot, _ := attached(t, relays[0], "bot", sol.AttachOptions{ReadOnly: true})
	if err := bot.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	write := func(p string) func() error {
		return func() error { _, err := bot.Write([]byte(p)); return err }
	}
	if err := bot.AsWriter(false, write("refused")); !errors.Is(err, sol.ErrWriterBusy) {
		t.Fatalf("while a1 writes on the holder: got %v, want ErrWriterBusy", err)
	}
	if err := bot.AsWriter(true, write("F")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the forced write on the serial side", func() bool { return string(b.Typed()) == "F" })
	ra1.waitNotice(t, "bot took over writing; you are read-only")
	waitFor(t, "nobody writing", func() bool { return holder.Writer("n1") == "" && relays[0].Writer("n1") == "" })
	if a1.Writer() || bot.Writer() {
		t.Errorf("after: a1 %v, bot %v, want nobody", a1.Writer(), bot.Writer())
	}
	// With nobody writing, a borrowed write needs no force.
	if err := bot.AsWriter(false, write("G")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second write", func() bool { return string(b.Typed()) == "FG" })
}
