package replicas

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// poll is the replicas' epoch_poll in TestReplicasRebalance (the
// capture poll runs as often), and every how often each node prints.
const (
	poll  = 200 * time.Millisecond
	every = 20 * time.Millisecond
)

// TestReplicasRebalance: two replicas on MariaDB and four nodes (ipmi_sim)
// captured always. rep-a, alone, holds all four, and someone watches n4
// on it; rep-b joins and gets its share: rep-a hands two off, one a poll,
// not n4 (its viewer would see the link move, and never does), and each
// replica ends with two, which stay where they are for ten polls more. Each node prints a
// numbered line every 20 ms throughout: the history of a node that stayed
// lacks none, that of a node handed off lacks one run of lines, after
// which rep-b's output follows a console link lost marker (the gap is
// logged: what the node printed while no replica held its link). Before
// rebalancing rep-b never got any. Then a rolling restart: rep-a stops,
// rep-b takes its links, and rep-a, started again, gets two back.
func TestReplicasRebalance(t *testing.T) {
	dsn := dbtest.MySQLDSN(t)
	ipmisim.Require(t, "ipmitool")
	bin, vars := obmdtest.ReplicaEnv(t)
	env := func() map[string]string {
		m := vars(dsn, "")
		m["OBMD_CONSOLE_CAPTURE"], m["OBMD_ACCESS_POLL"] = "always", poll.String()
		return m
	}
	a := obmdtest.StartReplica(t, bin, "rep-a", env())
	if a == nil {
		t.FailNow()
	}
	var bmcs []*ipmisim.Sim
	var labels []string
	for i := range 4 {
		bmcs = append(bmcs, ipmisim.Start(t))
		labels = append(labels, fmt.Sprintf("n%d", i+1))
		a.MustAPI(200, "PUT", "/node/"+labels[i], map[string]any{"type": "ipmi", "info": bmcs[i].Info()})
	}
	st := obmdtest.OpenStore(t, dsn)
	counts := func() (map[string]string, map[string]int) {
		leases, err := st.Leases(context.Background(), db.LeaseSOL)
		if err != nil {
			t.Fatalf("SOL leases: %v", err)
		}
		holder, n := map[string]string{}, map[string]int{}
		for _, l := range leases {
			holder[l.Node] = l.Owner
			n[l.Owner]++
		}
		return holder, n
	}
	obmdtest.WaitUntil(t, "rep-a holding the four links", func() bool { _, n := counts(); return n["rep-a"] == 4 })
	// A viewer on n4, the first rep-a would give up: n4 stays.
	viewer := a.GoViewer(t, "n4", a.Rotate("n4"))
	pr := startPrinters(t, bmcs, labels)
	for _, label := range labels {
		obmdtest.WaitUntil(t, label+"'s output in its history", func() bool { return len(seqs(t, st, label).seqs) > 0 })
	}
	viewer.Expect("<n4-")

	b := obmdtest.StartReplica(t, bin, "rep-b", env())
	if b == nil {
		t.FailNow()
	}
	obmdtest.WaitUntil(t, "two links on each replica", func() bool { _, n := counts(); return n["rep-a"] == 2 && n["rep-b"] == 2 })
	balanced, _ := counts()
	for range 10 {
		time.Sleep(poll)
		if now, _ := counts(); !maps.Equal(now, balanced) {
			t.Fatalf("the links moved once balanced: %v, then %v", balanced, now)
		}
	}
	if balanced["n4"] != "rep-a" {
		t.Errorf("n4, watched on rep-a, was handed off: %v", balanced)
	}
	if k, m := count(a, "capture_handed_off"), count(b, "capture_handed_off"); k != 2 || m != 0 {
		t.Errorf("hand-offs logged: rep-a %d, rep-b %d; want 2 and 0", k, m)
	}
	if _, m := a.Request("GET", "/metrics", nil, "", ""); !strings.Contains(string(m), "obmd_console_capture_handoffs_total 2\n") {
		t.Errorf("rep-a's /metrics lacks obmd_console_capture_handoffs_total 2")
	}
	last := pr.stop()
	if pr.err != nil {
		t.Fatalf("printing on a serial port: %v", pr.err)
	}
	for _, label := range labels {
		moved := balanced[label] == "rep-b"
		var h storedHistory
		obmdtest.WaitUntil(t, label+"'s last line stored", func() bool {
			h = seqs(t, st, label)
			return len(h.seqs) > 0 && h.seqs[len(h.seqs)-1] == last[label]
		})
		check(t, label, h, moved, pr.times(label))
	}
	viewer.Expect(fmt.Sprintf("<n4-%d>", last["n4"]))
	if out := viewer.Out.String(); strings.Contains(out, "link lost") {
		t.Errorf("n4's viewer saw its link lost: %q", obmdtest.Tail(out, 600))
	}

	// A rolling restart: rep-a stops (SIGTERM releases its links, rep-b
	// takes them) and starts again; it gets its two back from rep-b.
	a.Stop(t)
	obmdtest.WaitUntil(t, "rep-b holding the four links", func() bool { _, n := counts(); return n["rep-b"] == 4 })
	if a = obmdtest.StartReplica(t, bin, "rep-a", env()); a == nil {
		t.FailNow()
	}
	obmdtest.WaitUntil(t, "two links on each replica after the restart", func() bool {
		_, n := counts()
		return n["rep-a"] == 2 && n["rep-b"] == 2
	})
	balanced, _ = counts()
	for range 10 {
		time.Sleep(poll)
		if now, _ := counts(); !maps.Equal(now, balanced) {
			t.Fatalf("the links moved once balanced after the restart: %v, then %v", balanced, now)
		}
	}
	if k := count(b, "capture_handed_off"); k != 2 {
		t.Errorf("rep-b logged %d hand-offs after rep-a's restart, want 2", k)
	}
}

// printers prints a numbered line on each node's serial port every
// every (<n1-17>), remembering when each went out.
type printers struct {
	stopC chan struct{}
	wg    sync.WaitGroup

	mu  sync.Mutex
	at  map[string][]time.Time // label -> when line i was printed
	err error
}

func startPrinters(t *testing.T, bmcs []*ipmisim.Sim, labels []string) *printers {
	p := &printers{stopC: make(chan struct{}), at: map[string][]time.Time{}}
	for i, bmc := range bmcs {
		p.wg.Add(1)
		go func() { // ends at stop
			defer p.wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-p.stopC:
					return
				case <-tick.C:
				}
				p.mu.Lock()
				seq := len(p.at[labels[i]])
				p.at[labels[i]] = append(p.at[labels[i]], time.Now())
				p.mu.Unlock()
				if err := bmc.WriteSerial(fmt.Appendf(nil, "<%s-%d>\r\n", labels[i], seq)); err != nil {
					p.mu.Lock()
					p.err = err
					p.mu.Unlock()
					return
				}
			}
		}()
	}
	t.Cleanup(func() { p.stop() })
	return p
}

// stop ends the printers and returns each node's last line number.
func (p *printers) stop() map[string]int {
	select {
	case <-p.stopC:
	default:
		close(p.stopC)
	}
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	last := map[string]int{}
	for label, at := range p.at {
		last[label] = len(at) - 1
	}
	return last
}

func (p *printers) times(label string) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.at[label]
}

// storedHistory is a node's history as the test reads it: the line numbers
// in the order stored, and before which of them a link lost marker came.
type storedHistory struct {
	seqs []int
	lost map[int]bool // seqs[i] follows a link lost marker
}

var lineRE = regexp.MustCompile(`<n\d+-(\d+)>`)

// seqs reads label's current tenancy from the database, as an admin.
func seqs(t *testing.T, st *db.Store, label string) storedHistory {
	t.Helper()
	ctx := context.Background()
	epoch, err := st.Epoch(ctx, label)
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := st.ReadHistory(ctx, history.Query{Node: label, Epoch: epoch, Admin: true})
	if err != nil {
		t.Fatalf("history of %s: %v", label, err)
	}
	var text strings.Builder
	for _, c := range chunks {
		switch c.Kind {
		case history.KindOutput:
			text.Write(c.Data)
		case history.KindLinkLost:
			text.WriteString("\n[lost]\n")
		default:
			text.WriteString("\n[marker]\n")
		}
	}
	h := storedHistory{lost: map[int]bool{}}
	lost := false
	for _, line := range strings.Split(text.String(), "\n") {
		if line == "[lost]" {
			lost = true
		}
		for _, m := range lineRE.FindAllStringSubmatch(line, -1) {
			seq, _ := strconv.Atoi(m[1])
			if lost {
				h.lost[len(h.seqs)] = true
				lost = false
			}
			h.seqs = append(h.seqs, seq)
		}
	}
	return h
}

// check checks label's history: in order, no line twice, complete from
// its first line on, and with no link lost marker if the node stayed; if
// it was handed off, one link lost marker, and the lines missing (if any)
// right before it. The run is logged, with how long the node printed into
// it (the gap of the hand-off).
func check(t *testing.T, label string, h storedHistory, moved bool, at []time.Time) {
	t.Helper()
	if want := map[bool]int{false: 0, true: 1}[moved]; len(h.lost) != want {
		t.Errorf("%s (handed off: %v): %d link lost markers, want %d", label, moved, len(h.lost), want)
	}
	for i := 1; i < len(h.seqs); i++ {
		prev, seq := h.seqs[i-1], h.seqs[i]
		switch {
		case seq <= prev:
			t.Errorf("%s: line %d stored after line %d (out of order, or twice)", label, seq, prev)
		case h.lost[i]:
			gap := at[seq].Sub(at[prev])
			t.Logf("%s handed off: %d lines not recorded (%d-%d, of one per %v): %v from the last line before to the first after",
				label, seq-prev-1, prev+1, seq-1, every, gap.Round(time.Millisecond))
			if gap > obmdtest.LeaseTTL {
				t.Errorf("%s: the hand-off took %v, more than lease_ttl (%v): as long as a takeover from a dead holder", label, gap, obmdtest.LeaseTTL)
			}
		case seq > prev+1:
			t.Errorf("%s: lines %d-%d missing, with no hand-off there", label, prev+1, seq-1)
		}
	}
}

// count counts r's log lines with message msg.
func count(r *obmdtest.Replica, msg string) int {
	n := 0
	for _, m := range r.LogLines() {
		if m["msg"] == msg {
			n++
		}
	}
	return n
}
