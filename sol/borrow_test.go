package sol_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
// the node as the borrower's (the holder drops a non-writer's input), the
// writer is told, and gets the role back when the write is done, told
// again; with nobody writing before, nobody writes after.
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
	ra1.waitNotice(t, "bot is sending input; you are read-only meanwhile")
	ra1.waitNotice(t, "you are writing again")
	waitFor(t, "a1 writing again, everywhere", func() bool {
		return a1.Writer() && holder.Writer("n1").Name == "a1" && relays[0].Writer("n1").Name == "a1"
	})
	typed(t, b, a1, "a")
	if bot.Writer() {
		t.Error("bot still writes")
	}
	if n := ra1.Notices(); len(n) != 2 {
		t.Errorf("a1's notices: got %q, want the two above", n)
	}
	// With nobody writing, a borrowed write needs no force, and leaves
	// nobody writing.
	a1.ReadOnly()
	waitFor(t, "nobody writing", func() bool { return relays[0].Writer("n1").Name == "" })
	if err := bot.AsWriter(false, write("G")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second write", func() bool { return string(b.Typed()) == "FaG" })
	waitFor(t, "nobody writing after it", func() bool { return holder.Writer("n1").Name == "" && relays[0].Writer("n1").Name == "" })
}

// TestClusterAsWriterGivesBack: a forced borrowed write gives the role
// back to the writer wherever both are: the writer on another relaying
// hub (its hub tells it, from the holder), on the borrower's own relaying
// hub, or relayed while the borrower is on the holder. The writer is told
// both times, once each, and its keys reach the node again.
func TestClusterAsWriterGivesBack(t *testing.T) {
	for _, tc := range []struct {
		name            string
		writerOn, botOn int // 0: the holder, 1 and 2: relays[0] and relays[1]
	}{
		{"writer on another relay", 2, 1},
		{"writer on the same relay", 1, 1},
		{"writer relayed, borrower on the holder", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _, holder, relays, _ := newCluster(t)
			hubs := []*sol.Manager{holder, relays[0], relays[1]}
			attached(t, holder, "h", sol.AttachOptions{ReadOnly: true}) // the holder's link is up
			w, rw := attached(t, hubs[tc.writerOn], "w", sol.AttachOptions{})
			bot, _ := attached(t, hubs[tc.botOn], "bot", sol.AttachOptions{ReadOnly: true})
			if err := bot.WaitUp(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			typed(t, b, w, "1")
			if err := bot.AsWriter(false, func() error { return nil }); !errors.Is(err, sol.ErrWriterBusy) {
				t.Fatalf("without force: got %v, want ErrWriterBusy", err)
			}
			err := bot.AsWriter(true, func() error { _, err := bot.Write([]byte("S")); return err })
			if err != nil {
				t.Fatal(err)
			}
			rw.waitNotice(t, "bot is sending input; you are read-only meanwhile")
			rw.waitNotice(t, "you are writing again")
			waitFor(t, "w writing again on every hub", func() bool {
				for _, h := range []*sol.Manager{holder, hubs[tc.writerOn], hubs[tc.botOn]} {
					if h.Writer("n1").Name != "w" {
						return false
					}
				}
				return w.Writer()
			})
			typed(t, b, w, "2")
			if got := string(b.Typed()); got != "1S2" {
				t.Errorf("typed: got %q, want %q", got, "1S2")
			}
			if n := rw.Notices(); len(n) != 2 {
				t.Errorf("w's notices: got %q, want the two above, once each", n)
			}
		})
	}
}

// TestAsWriterBorrowBeforeInput: a borrowed write on a relaying hub whose
// role message is queued while the hub's writer loop is telling the holder
// something else still reaches the node. The writer loop used to send the
// input it found next before that role message, so the holder dropped it
// (the borrower was not its writer yet), then cleared the drop at the
// borrow, and confirmed the return: the send reported success for input
// never typed (TestReplicasAutomate's forced send through a relay).
func TestAsWriterBorrowBeforeInput(t *testing.T) {
	b, _, holder, relays, via := newCluster(t)
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	via[0].tellHook = func(m sol.RoleMsg) {
		if m.Op == sol.RoleJoin && m.Who.Name == "blocker" {
			once.Do(func() { close(entered) })
			<-unblock
		}
	}
	attached(t, holder, "h", sol.AttachOptions{ReadOnly: true}) // the holder's link is up
	w, _ := attached(t, holder, "w", sol.AttachOptions{})
	bot, _ := attached(t, relays[0], "bot", sol.AttachOptions{ReadOnly: true})
	if err := bot.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	typed(t, b, w, "1")
	go func() { // its RoleJoin holds the writer loop; ends once attached (or refused)
		relays[0].Attach(testCtx(t), "n1", sol.AttachOptions{Name: "blocker", ReadOnly: true})
	}()
	<-entered
	done := make(chan error, 1)
	go func() { // ends once the borrowed write is done (unblocked below)
		done <- bot.AsWriter(true, func() error { _, err := bot.Write([]byte("S")); return err })
	}()
	time.Sleep(100 * time.Millisecond) // the borrow and its input are queued behind the blocked Tell
	close(unblock)
	if err := <-done; err != nil {
		if !errors.Is(err, sol.ErrInputLost) {
			t.Fatalf("borrowed write: %v", err)
		}
		t.Fatalf("borrowed write lost its input (reported: %v)", err)
	}
	waitFor(t, "the borrowed write's input on the serial side", func() bool {
		return strings.Contains(string(b.Typed()), "S")
	})
}

// TestAsWriterInputLost: a borrowed write whose input the link does not
// take within OpenTimeout (the link is down and stays down) fails with
// ErrInputLost, on the holder and through a relay (the holder answers the
// return), and the bytes are not typed later either; once the link is
// back, a write succeeds.
func TestAsWriterInputLost(t *testing.T) {
	for _, relayed := range []bool{false, true} {
		t.Run(fmt.Sprintf("relayed=%v", relayed), func(t *testing.T) {
			lab := sim.NewLab()
			b := lab.BMC("n1", sim.ModeNormal)
			cfg := sol.Config{OpenTimeout: 300 * time.Millisecond}
			holder := newManager(t, cfg, lab)
			hub := holder
			if relayed {
				hub = newManager(t, cfg, &relayTo{hub: holder})
			}
			bot := attach(t, hub, "n1", "bot", sol.AttachOptions{ReadOnly: true})
			record(bot)
			if err := bot.WaitUp(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			write := func(p string) func() error {
				return func() error { _, err := bot.Write([]byte(p)); return err }
			}
			b.SetFail(errors.New("the BMC stopped answering"))
			b.DropLink()
			waitFor(t, "the holder's link down", func() bool { return !holder.LinkUp("n1") })
			if err := bot.AsWriter(false, write("lost")); !errors.Is(err, sol.ErrInputLost) {
				t.Errorf("a write into a link that stays down: got %v, want ErrInputLost", err)
			}
			b.SetFail(nil)
			waitFor(t, "the link back", func() bool { return holder.LinkUp("n1") })
			if err := bot.AsWriter(false, write("sent")); err != nil {
				t.Fatalf("a write once the link is back: %v", err)
			}
			waitFor(t, "the second write typed", func() bool { return strings.Contains(string(b.Typed()), "sent") })
			if strings.Contains(string(b.Typed()), "lost") {
				t.Errorf("the write reported lost was typed: %q", b.Typed())
			}
		})
	}
}
