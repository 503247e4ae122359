package conncap

import "container/list"

// source holds one source's strangers and tenant connections, oldest
// first.
type source struct {
	strangers list.List
	tenants   list.List
	friend    bool // counted in the friendly tallies, else in the others
}

// Tally finds a key holding the most of something among a set of keys, in
// constant time per change (the front door's pre-authentication caps use
// one too). The zero value is an empty tally.
type Tally[K comparable] struct {
	byCount  []map[K]struct{} // keys by their count (index 0 unused)
	heaviest int              // the highest count of a key
}

// Move moves k from the keys counting from to those counting to (0: in or
// out of the tally).
func (t *Tally[K]) Move(k K, from, to int) {
	if from > 0 {
		delete(t.byCount[from], k)
	}
	if to > 0 {
		for len(t.byCount) <= to {
			t.byCount = append(t.byCount, map[K]struct{}{})
		}
		t.byCount[to][k] = struct{}{}
	}
	t.heaviest = max(t.heaviest, to)
	for t.heaviest > 0 && len(t.byCount[t.heaviest]) == 0 {
		t.heaviest--
	}
}

// Top returns a key with the highest count and that count (0 if the tally
// is empty).
func (t *Tally[K]) Top() (k K, n int) {
	if t.heaviest == 0 {
		return k, 0
	}
	for k := range t.byCount[t.heaviest] {
		return k, t.heaviest
	}
	return k, 0
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

// kind is one of a source's lists, with the tallies that count it.
type kind struct {
	list             func(*source) *list.List
	others, friendly *Tally[*source]
}

func (l *Listener) strangerKind() kind {
	return kind{func(s *source) *list.List { return &s.strangers }, &l.others, &l.friendly}
}

func (l *Listener) tenantKind() kind {
	return kind{func(s *source) *list.List { return &s.tenants }, &l.tenOthers, &l.tenFriendly}
}

func (k kind) tallyOf(s *source) *Tally[*source] {
	if s.friend {
		return k.friendly
	}
	return k.others
}

// heaviest returns a source holding the most connections of kind k,
// strangers to the listener first; nil if none holds any.
func (k kind) heaviest() *source {
	if s, n := k.others.Top(); n > 0 {
		return s
	}
	s, _ := k.friendly.Top()
	return s
}

// heaviestLocked returns the oldest stranger of a source that holds the
// most strangers, strangers to the listener first (there is a stranger).
func (l *Listener) heaviestLocked() *Conn {
	return l.strangerKind().heaviest().strangers.Front().Value.(*Conn)
}

// overallVictimLocked returns the connection to close at the overall
// cap: a stranger of the strangers to the listener, else a tenant
// connection of theirs, else a friend's stranger (HIL's new connection,
// about to present the admin credential), else a friend's tenant
// connection (HIL's console stream); each of a source that holds the most
// (a tenant connection: its oldest idle one, else its oldest). Nil if
// there is none: every connection is trusted.
func (l *Listener) overallVictimLocked() *Conn {
	if s, n := l.others.Top(); n > 0 {
		return s.strangers.Front().Value.(*Conn)
	}
	if s, n := l.tenOthers.Top(); n > 0 {
		return oldestIdle(&s.tenants)
	}
	if s, n := l.friendly.Top(); n > 0 {
		return s.strangers.Front().Value.(*Conn)
	}
	if s, n := l.tenFriendly.Top(); n > 0 {
		return oldestIdle(&s.tenants)
	}
	return nil
}

// oldestIdle returns the oldest idle connection of ls, else its oldest.
func oldestIdle(ls *list.List) *Conn {
	for e := ls.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*Conn); c.idle {
			return c
		}
	}
	return ls.Front().Value.(*Conn)
}

// addToSourceLocked counts c in its source's list of kind k.
func (l *Listener) addToSourceLocked(c *Conn, k kind) {
	s := l.sources[c.src]
	if s == nil {
		s = &source{friend: l.friends.has(c.src)}
		l.sources[c.src] = s
	}
	ls := k.list(s)
	n := ls.Len()
	k.tallyOf(s).Move(s, n, n+1)
	c.mine = ls.PushBack(c)
}

// dropFromSourceLocked uncounts c from its source's list of kind k.
func (l *Listener) dropFromSourceLocked(c *Conn, k kind) {
	s := l.sources[c.src]
	ls := k.list(s)
	ls.Remove(c.mine)
	n := ls.Len()
	k.tallyOf(s).Move(s, n+1, n)
	if s.strangers.Len() == 0 && s.tenants.Len() == 0 {
		delete(l.sources, c.src)
	}
}

// befriendLocked records that src has had a connection trusted, moving its
// connections (and those of a friend forgotten to make room) to the right
// tallies.
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
	for _, k := range []kind{l.strangerKind(), l.tenantKind()} {
		from, to := k.others, k.friendly
		if !friend {
			from, to = to, from
		}
		n := k.list(s).Len()
		from.Move(s, n, 0)
		to.Move(s, 0, n)
	}
	s.friend = friend
}
