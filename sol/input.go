package sol

import "fmt"

// A node's pending input: what its writer wrote, queued for the link's
// writer loop (writeLoop), which takes it, writes it, and puts back what a
// failed write did not deliver. Input still pending when the writer changes
// or the node retires is dropped, and its writer told (Viewer.dropped:
// AsWriter reports it).

// sendInput writes up to limit (at most maxWrite) pending input bytes to
// con; it returns what it took. What a failed Write did not deliver goes
// back to the head of the pending input, for the next link: input in flight
// when a link is lost is not lost with it.
func (n *node) sendInput(con Console, buf []byte, limit int) ([]byte, error) {
	buf, from := n.takeInput(buf, min(limit, maxWrite))
	if len(buf) == 0 {
		return buf, nil
	}
	var (
		k   int
		err error
	)
	if arb, ok := con.(Arbiter); ok {
		k, err = arb.WriteAs(from.id, buf)
	} else {
		k, err = con.Write(buf)
	}
	k = min(max(k, 0), len(buf))
	n.m.st.bytesIn.Add(uint64(k))
	if err != nil {
		n.untakeInput(buf[k:], from)
		return buf, fmt.Errorf("write console: %w", err)
	}
	n.landed()
	return buf, nil
}

// landed: the input the writer loop took has been written.
func (n *node) landed() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.flying = 0
}

// untakeInput puts p, input of writer from, back in front of the pending
// input (unless the node has retired or the writer changed: its input is
// dropped) and tells the writer loop.
func (n *node) untakeInput(p []byte, from *Viewer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.flying = 0
	if n.retired || len(p) == 0 || n.writer != from {
		if len(p) > 0 && from != nil {
			from.dropped = true
		}
		return
	}
	n.in = append(append(make([]byte, 0, len(p)+len(n.in)), p...), n.in...)
	signal(n.inReady)
}

func (n *node) pendingInput() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.in)
}

// unsent is the input not yet written to the link: pending, or taken by
// the writer loop and still being written.
func (n *node) unsent() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.unsentLocked()
}

func (n *node) unsentLocked() int { return len(n.in) + n.flying }

// dropInputLocked drops the pending input; its writer is told (dropped).
// n.mu held.
func (n *node) dropInputLocked() {
	if len(n.in) > 0 && n.writer != nil {
		n.writer.dropped = true
	}
	n.in = nil
}

// takeInput moves up to limit pending input bytes into buf, and returns
// whose they are: the writer's (pending input is dropped when the writer
// changes).
//
// It takes nothing while role messages are queued (sendCtl's, tellLocked):
// they were queued after the writer loop last sent them, and input behind
// them must not overtake them. A borrowed write's input sent before its
// RoleBorrow is dropped by the holder (not its writer yet), and the borrow
// clears that drop. Queuing them woke the writer loop, which sends them
// first on its next turn, then this input.
func (n *node) takeInput(buf []byte, limit int) ([]byte, *Viewer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.ctl) > 0 {
		return buf, n.writer
	}
	full := len(n.in) >= maxInput
	k := min(len(n.in), limit)
	buf = append(buf, n.in[:k]...)
	n.in = append(n.in[:0], n.in[k:]...)
	n.flying = k
	if len(n.in) > 0 {
		signal(n.inReady)
	}
	if full {
		n.wakeWritersLocked()
	}
	return buf, n.writer
}

// wakeWritersLocked wakes the Writes waiting for room in a full input
// buffer, to try again or to find they are no longer the writer. n.mu is
// held.
func (n *node) wakeWritersLocked() {
	if n.inDrained != nil {
		close(n.inDrained)
		n.inDrained = nil
	}
}
