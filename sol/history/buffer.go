package history

import "time"

// buffer is a bounded queue of chunks, oldest first: a node's output and
// markers not yet stored, or a follower's not yet read. Output appended
// to it grows its last chunk (with a stamp per write that arrives in a
// later millisecond) up to a chunk size; trim makes the oldest chunks
// give way, leaving in their place one gap item per tenancy that counts
// what went. Not safe for concurrent use: its owner's mutex guards it.
type buffer struct {
	items []item
	size  int // data bytes of the items that are not gaps
}

// item is a chunk, or a gap: lost > 0 || lostMarks > 0, rendered as a
// KindGap chunk whose text says what was lost.
type item struct {
	c               Chunk
	lost, lostMarks int
}

func (it *item) gap() bool { return it.lost > 0 || it.lostMarks > 0 }

// output appends p (copied) as output of node's tenancy epoch that arrived
// at at, in chunks of at most maxChunk bytes.
func (b *buffer) output(node string, epoch int64, p []byte, at time.Time, maxChunk int) {
	for len(p) > 0 {
		var last *Chunk
		if k := len(b.items); k > 0 {
			it := &b.items[k-1]
			if !it.gap() && it.c.Kind == KindOutput && it.c.Epoch == epoch && len(it.c.Data) < maxChunk {
				last = &it.c
			}
		}
		if last == nil {
			b.items = append(b.items, item{c: Chunk{Node: node, Epoch: epoch, At: at, Kind: KindOutput}})
			last = &b.items[len(b.items)-1].c
		} else if at.After(last.Until()) {
			last.Stamps = append(last.Stamps, Stamp{Off: len(last.Data), At: at})
		}
		n := min(maxChunk-len(last.Data), len(p))
		last.Data = append(last.Data, p[:n]...)
		b.size += n
		p = p[n:]
	}
}

// marker appends a marker chunk.
func (b *buffer) marker(c Chunk) {
	b.items = append(b.items, item{c: c})
	b.size += len(c.Data)
}

// push appends a chunk as it is (a follower's copy of what a node got).
func (b *buffer) push(c Chunk, maxChunk int) {
	if c.Kind == KindOutput {
		// Merged into the last chunk when it continues it, so a follower's
		// queue holds few chunks however small the writes.
		for i, s := range append([]Stamp{{Off: 0, At: c.At}}, c.Stamps...) {
			end := len(c.Data)
			if i < len(c.Stamps) {
				end = c.Stamps[i].Off
			}
			b.output(c.Node, c.Epoch, c.Data[s.Off:end], s.At, maxChunk)
		}
		return
	}
	b.marker(c)
}

// trim makes the oldest items give way until the buffer holds at most
// limit bytes; what goes is counted in a gap item of its tenancy, which
// takes its place. Gap items stay. It returns the output bytes that went.
func (b *buffer) trim(limit int) int {
	dropped := 0
	for b.size > limit {
		i := 0
		for i < len(b.items) && b.items[i].gap() {
			i++
		}
		if i == len(b.items) {
			break // cannot happen: size counts non-gap items only
		}
		c := b.items[i].c
		excess := b.size - limit
		var cut item
		if c.Kind == KindOutput && len(c.Data) > excess {
			cut = item{lost: excess}
			b.items[i].c = c.tail(excess)
			b.size -= excess
			dropped += excess
		} else {
			cut = item{lost: len(c.Data)}
			if c.Kind != KindOutput {
				cut = item{lostMarks: 1}
			}
			b.items = append(b.items[:i], b.items[i+1:]...)
			b.size -= len(c.Data)
			dropped += cut.lost
		}
		b.addGap(i, c, cut)
	}
	return dropped
}

// addGap counts cut (from chunk c) in the gap just before index i if it is
// of c's tenancy, else in a new gap inserted at i.
func (b *buffer) addGap(i int, c Chunk, cut item) {
	if i > 0 && b.items[i-1].c.Epoch == c.Epoch {
		g := &b.items[i-1]
		g.lost += cut.lost
		g.lostMarks += cut.lostMarks
		return
	}
	cut.c = Chunk{Node: c.Node, Epoch: c.Epoch, At: c.At, Kind: KindGap}
	b.items = append(b.items, item{})
	copy(b.items[i+1:], b.items[i:])
	b.items[i] = cut
}

// take empties the buffer and returns its items.
func (b *buffer) take() []item {
	out := b.items
	b.items, b.size = nil, 0
	return out
}

// restore puts items back in front of what the buffer holds (a flush that
// failed), in order.
func (b *buffer) restore(items []item) {
	for _, it := range items {
		if !it.gap() {
			b.size += len(it.c.Data)
		}
	}
	b.items = append(items, b.items...)
}

// pop removes and returns the oldest item's chunk.
func (b *buffer) pop(text func(bytes, marks int) string) (Chunk, bool) {
	if len(b.items) == 0 {
		return Chunk{}, false
	}
	it := b.items[0]
	b.items[0] = item{}
	b.items = b.items[1:]
	if !it.gap() {
		b.size -= len(it.c.Data)
	}
	return it.chunk(text), true
}

// chunk is the item as a chunk: a gap's text says what was lost.
func (it item) chunk(text func(bytes, marks int) string) Chunk {
	if it.gap() {
		it.c.Data = []byte(text(it.lost, it.lostMarks))
	}
	return it.c
}

// snapshot copies the chunks of tenancy epoch, oldest first.
func (b *buffer) snapshot(epoch int64) []Chunk {
	var out []Chunk
	for _, it := range b.items {
		if it.c.Epoch == epoch {
			out = append(out, it.chunk(notRecorded).clone())
		}
	}
	return out
}
