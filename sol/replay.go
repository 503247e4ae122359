package sol

import (
	"context"
	"time"

	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/screen"
)

// A replay is the last Config.Scrollback bytes of console output a viewer
// gets before live output: on attach (AttachOptions.Replay) and on
// Viewer.Replay. It sits in the viewer's queue as a job, in order with
// live output and notices: the pump delivers it in its place, holding back
// what was queued after it until it has been read. Its source is chosen
// under the node's lock, where the link's output is published (so the
// replay ends exactly where the viewer's live output begins):
//   - the node's history, when this replica records the node (it holds
//     the link) or, with no link yet, when it can hold no other way
//     (Config.RelayWait zero): a history cut of the viewer's tenancy,
//     read at once by the job's own goroutine (a cut holds the node's
//     flushes off until it is read);
//   - the ring, when the link relays another replica's (its ring starts
//     with the holder's replay, Seeded), or with no history;
//   - undecided while a link is being opened in cluster mode: the job
//     waits for the link (which chooses when it comes up) at most
//     RelayWait, then chooses itself.
type replayJob struct {
	n     *node
	q     history.Query // Epoch 0: the ring
	ready chan struct{} // closed once the source is chosen (a waiting job)
	done  chan struct{} // closed once data is set

	// Set under n.mu by choose; read by the job's goroutine after ready
	// (or under n.mu).
	chosen bool
	cut    *history.Cut
	data   []byte

	// The node's screen where the replay ends, if the viewer wants it
	// (a relay viewer, AttachOptions.Screen): screenDone is closed once
	// redrawn is set (the screen's owner draws it) or will not be; screen
	// is redrawn, taken by the job's goroutine.
	screenDone chan struct{}
	redrawn    []byte
	screen     []byte
	// redraw: the job is a redraw (Viewer.Redraw): the screen alone, no
	// output, blank or not. Otherwise a person's viewer gets no screen
	// when it is blank (skipBlank): the replay alone draws it.
	redraw    bool
	skipBlank bool
}

// replayKind is what a replay job delivers.
type replayKind uint8

const (
	// replayAttach: the attach replay (AttachOptions.Replay), with the
	// screen for a viewer that wants it (AttachOptions.Screen, a relay);
	// it may wait for a link being opened.
	replayAttach replayKind = iota
	// replayOutput: the output again (Viewer.Replay), with the screen for
	// a relay viewer only.
	replayOutput
	// replayScreen: the screen alone (Viewer.Redraw).
	replayScreen
)

// replayLocked queues a replay job of kind for v and starts its reader.
// n.mu is held.
func (n *node) replayLocked(v *Viewer, kind replayKind) {
	m := n.m
	redraw := kind == replayScreen
	j := &replayJob{n: n, ready: make(chan struct{}), done: make(chan struct{}), redraw: redraw,
		skipBlank: !redraw && !v.relay}
	if v.relay || v.wantScreen && kind == replayAttach || redraw {
		j.screenDone = make(chan struct{})
	}
	wait := kind == replayAttach
	if m.hist != nil && v.epoch > 0 && !redraw {
		j.q = history.Query{Node: n.label, Epoch: v.epoch, MaxBytes: m.cfg.Scrollback + history.MaxChunkBytes}
	}
	wait = wait && j.q.Epoch > 0 && m.cfg.RelayWait > 0 && n.rec == nil && !n.relay && !n.retired
	if wait {
		n.waiting = append(n.waiting, j)
	} else {
		n.chooseLocked(j)
	}
	v.queueReplay(j)
	m.wg.Add(1)
	go func() { // owned by m.wg; ends once the replay is read (bounded)
		defer m.wg.Done()
		j.run(wait)
	}()
}

// chooseLocked picks j's source now (see replayJob). n.mu is held.
func (n *node) chooseLocked(j *replayJob) {
	if j.chosen {
		return
	}
	j.chosen = true
	defer close(j.ready)
	if j.screenDone != nil {
		// At the same point of the output as the replay's end.
		n.screenRequestLocked(func(t *screen.Terminal, ok bool) {
			if ok && !(j.skipBlank && t.Blank()) {
				j.redrawn = t.ANSI()
			}
			close(j.screenDone)
		})
	}
	if j.redraw {
		return
	}
	if j.q.Epoch > 0 && !n.relay && !n.retired {
		if c, err := n.m.hist.Cut(j.q); err == nil {
			j.cut = c
			return
		} else {
			n.log.WithError(err).Warn("console_replay_cut_failed")
		}
	}
	j.data = n.ring.bytes()
}

// chooseWaitingLocked picks the source of every waiting job: the link
// has just come up (or the node retires). n.mu is held.
func (n *node) chooseWaitingLocked() {
	for _, j := range n.waiting {
		n.chooseLocked(j)
	}
	n.waiting = nil
}

// endReplaysLocked ends the waiting jobs of a retiring node with nothing
// (its viewers have ended). n.mu is held.
func (n *node) endReplaysLocked() {
	for _, j := range n.waiting {
		if !j.chosen {
			j.chosen = true
			close(j.ready)
			if j.screenDone != nil {
				close(j.screenDone)
			}
		}
	}
	n.waiting = nil
}

// run is the job's reader: it waits for the source to be chosen (at most
// RelayWait, then chooses itself), reads a history cut, and sets data.
func (j *replayJob) run(wait bool) {
	defer close(j.done)
	defer j.awaitScreen()
	n := j.n
	if wait {
		t := time.NewTimer(n.m.cfg.RelayWait)
		select {
		case <-j.ready:
		case <-t.C:
			n.mu.Lock()
			for i, w := range n.waiting {
				if w == j {
					n.waiting = append(n.waiting[:i], n.waiting[i+1:]...)
					break
				}
			}
			n.chooseLocked(j)
			n.mu.Unlock()
		}
		t.Stop()
	}
	if j.cut == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.m.cfg.OpenTimeout)
	defer cancel()
	chunks, err := j.cut.Read(ctx)
	if err != nil {
		n.log.WithError(err).Debug("console_replay_read_failed") // ErrEnded: the session is being cut
		return
	}
	j.data = lastOutput(chunks, n.m.cfg.Scrollback)
}

// awaitScreen waits for the job's screen, if it wants one, at most
// OpenTimeout (a link that does not come up gives none), and sets its
// redraw.
func (j *replayJob) awaitScreen() {
	if j.screenDone == nil {
		return
	}
	t := time.NewTimer(j.n.m.cfg.OpenTimeout)
	defer t.Stop()
	select {
	case <-j.screenDone:
		j.screen = j.redrawn
	case <-t.C:
	}
}

// lastOutput is the last limit bytes of the console output in chunks.
func lastOutput(chunks []history.Chunk, limit int) []byte {
	size := 0
	first := len(chunks)
	for first > 0 && size < limit {
		first--
		if chunks[first].Kind == history.KindOutput {
			size += len(chunks[first].Data)
		}
	}
	out := make([]byte, 0, min(size, limit))
	skip := max(size-limit, 0)
	for _, c := range chunks[first:] {
		if c.Kind != history.KindOutput {
			continue
		}
		d := c.Data
		if skip > 0 {
			k := min(skip, len(d))
			d, skip = d[k:], skip-k
		}
		out = append(out, d...)
	}
	return out
}
