package sessions

import "time"

// Conn is an authenticated SSH connection as the registry watches it
// (Watch): what its login established. Every field is plain data.
type Conn struct {
	Node string
	// Epoch is the node's access epoch its login read.
	Epoch int64
	// Cert is the certificate it logged in with (nil: another
	// credential); credential changes are matched against it (CutCerts),
	// as against its sessions'.
	Cert *Cert
	// Expires, if set, is when its credential expires (a certificate's
	// valid_before), as its sessions' Info.Expires.
	Expires time.Time
}

// watcher is a watched connection.
type watcher struct {
	conn    Conn
	revoked func(cause error)
	// expiry tells it at conn.Expires (nil: no expiry); stopped once it
	// is told or forgotten.
	expiry *time.Timer
}

// Watch registers an authenticated connection c. The first of these ends
// it: a Cut of c.Node above c.Epoch, a CutAll, a CutCerts that matches
// c.Cert, or c.Expires. revoked is then called once, with the cause its
// sessions are given (at the expiry, an *ExpiredError), before any of
// them is cut (so that the front door can tell whether the connection
// holds one), and the connection is forgotten. The front door closes it
// (at once, or once its sessions have ended): no access change,
// revocation or expiry leaves a connection from before it open. forget
// (idempotent) forgets it when the connection closes, and stops its
// expiry's timer.
func (r *Registry) Watch(c Conn, revoked func(cause error)) (forget func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextW++
	id := r.nextW
	w := &watcher{conn: c, revoked: revoked}
	r.watchers[id] = w
	if !c.Expires.IsZero() {
		// Its goroutine only tells the connection (short-lived), as a
		// session's expiry only cancels it; forget stops it.
		w.expiry = time.AfterFunc(time.Until(c.Expires), func() {
			r.mu.Lock()
			_, live := r.watchers[id]
			delete(r.watchers, id)
			r.mu.Unlock()
			if live { // not forgotten nor ended by a cut meanwhile
				w.revoked(expired(c.Node))
			}
		})
	}
	return func() {
		r.mu.Lock()
		delete(r.watchers, id)
		r.mu.Unlock()
		w.stop()
	}
}

// stop stops w's expiry, if it has one.
func (w *watcher) stop() {
	if w.expiry != nil {
		w.expiry.Stop()
	}
}

// endWatched forgets the watched connections match selects and calls their
// revoked with cause(its node), outside the lock.
func (r *Registry) endWatched(match func(*Conn) bool, cause func(node string) error) {
	var ended []*watcher
	r.mu.Lock()
	for id, w := range r.watchers {
		if match(&w.conn) {
			ended = append(ended, w)
			delete(r.watchers, id)
		}
	}
	r.mu.Unlock()
	for _, w := range ended {
		w.stop()
		w.revoked(cause(w.conn.Node))
	}
}

// expired is the cause given at a certificate's expiry, to its sessions and
// its connection.
func expired(node string) error {
	return &ExpiredError{&RevokedError{Node: node, Why: WhyExpired}}
}
