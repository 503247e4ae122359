package conncap

import "container/list"

// source holds one source's strangers, oldest first.
type source struct {
	strangers list.List
	friend    bool // counted in Listener.friendly, else in others
}

// tally finds a source holding the most strangers among a set of sources.
type tally struct {
	byCount  []map[*source]struct{} // sources by their number of strangers (index 0 unused)
	heaviest int                    // the highest number of strangers of a source
}

// move moves s from the sources with from strangers to those with to (0:
// in or out of the tally).
func (t *tally) move(s *source, from, to int) {
	if from > 0 {
		delete(t.byCount[from], s)
	}
	if to > 0 {
		for len(t.byCount) <= to {
			t.byCount = append(t.byCount, map[*source]struct{}{})
		}
		t.byCount[to][s] = struct{}{}
	}
	t.heaviest = max(t.heaviest, to)
	for t.heaviest > 0 && len(t.byCount[t.heaviest]) == 0 {
		t.heaviest--
	}
}

// top returns a source holding the most strangers, or nil if none holds any.
func (t *tally) top() *source {
	if t.heaviest == 0 {
		return nil
	}
	for s := range t.byCount[t.heaviest] {
		return s
	}
	return nil
}

// friends remembers the sources that had a connection trusted, the most
// recent first, up to a bound.
type friends struct {
	max   int
	order list.List // of string, most recent first
	at    map[string]*list.Element
}

func newFriends(max int) friends { return friends{max: max, at: map[string]*list.Element{}} }

// add makes src the most recent friend; it returns the source it forgot to
// make room, if any.
func (f *friends) add(src string) (forgot string, ok bool) {
	if e := f.at[src]; e != nil {
		f.order.MoveToFront(e)
		return "", false
	}
	f.at[src] = f.order.PushFront(src)
	if f.order.Len() <= f.max {
		return "", false
	}
	last := f.order.Back()
	f.order.Remove(last)
	forgot = last.Value.(string)
	delete(f.at, forgot)
	return forgot, true
}

func (f *friends) has(src string) bool { return f.at[src] != nil }

// heaviestLocked returns the oldest stranger of a source that holds the
// most strangers, strangers to the listener first (there is a stranger).
func (l *Listener) heaviestLocked() *Conn {
	s := l.others.top()
	if s == nil {
		s = l.friendly.top()
	}
	return s.strangers.Front().Value.(*Conn)
}

// tallyOf is the tally s is counted in.
func (l *Listener) tallyOf(s *source) *tally {
	if s.friend {
		return &l.friendly
	}
	return &l.others
}

// addToSourceLocked counts the stranger c in its source.
func (l *Listener) addToSourceLocked(c *Conn) {
	s := l.sources[c.src]
	if s == nil {
		s = &source{friend: l.friends.has(c.src)}
		l.sources[c.src] = s
	}
	n := s.strangers.Len()
	l.tallyOf(s).move(s, n, n+1)
	c.mine = s.strangers.PushBack(c)
}

// dropFromSourceLocked uncounts the stranger c from its source.
func (l *Listener) dropFromSourceLocked(c *Conn) {
	s := l.sources[c.src]
	s.strangers.Remove(c.mine)
	n := s.strangers.Len()
	l.tallyOf(s).move(s, n+1, n)
	if n == 0 {
		delete(l.sources, c.src)
	}
}

// befriendLocked records that src has had a connection trusted, moving its
// strangers (and those of a friend forgotten to make room) to the right
// tally.
func (l *Listener) befriendLocked(src string) {
	forgot, ok := l.friends.add(src)
	l.setFriendLocked(src, true)
	if ok {
		l.setFriendLocked(forgot, false)
	}
}

func (l *Listener) setFriendLocked(src string, friend bool) {
	s := l.sources[src]
	if s == nil || s.friend == friend {
		return
	}
	n := s.strangers.Len()
	l.tallyOf(s).move(s, n, 0)
	s.friend = friend
	l.tallyOf(s).move(s, 0, n)
}
