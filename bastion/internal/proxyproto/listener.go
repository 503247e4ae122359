package proxyproto

import (
	"errors"
	"net"
	"sync"
	"time"
)

// MaxPending bounds the connections of a Listener whose header is being
// read: a listed balancer sends it at once, so this is only ever reached by
// one that stalls, and then the others wait in the kernel's backlog.
const MaxPending = 64

// Listener is a net.Listener whose connections from listed balancers start
// with a PROXY header (Accept reads it, before anything else reads the
// connection: TLS, HTTP): Accept returns them as *Conn, whose RemoteAddr is
// the client's. A connection from a listed balancer without a valid header
// within the timeout is closed and reported to Refused; from anyone else a
// connection is returned as it is (a header it sends is then only bytes,
// which the server refuses as garbage: it is never honoured).
//
// Headers are read beside the accept loop, so a balancer that stalls holds
// up no one else: the loop and the readers are goroutines the Listener
// starts at its first Accept and Close waits for.
type Listener struct {
	net.Listener
	cfg ListenerConfig

	start sync.Once
	ready chan accepted // from the loop and the readers to Accept
	done  chan struct{} // closed by Close
	slots chan struct{} // a value per header being read
	wg    sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	pending map[net.Conn]struct{} // whose header is being read
}

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// From reports whether a peer is a listed balancer, whose connections
	// must start with a header. Required.
	From func(net.Addr) bool
	// Timeout bounds the read of a header (default 5 s).
	Timeout time.Duration
	// Refused, if set, is told of every connection closed for want of a
	// valid header (err wraps io.EOF for one closed before sending
	// anything: a TCP health check).
	Refused func(peer net.Addr, err error)
}

type accepted struct {
	c   net.Conn
	err error
}

// NewListener wraps l. It starts nothing.
func NewListener(l net.Listener, cfg ListenerConfig) (*Listener, error) {
	if l == nil || cfg.From == nil {
		return nil, errors.New("proxy protocol: listener: missing listener or From")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Listener{Listener: l, cfg: cfg, ready: make(chan accepted), done: make(chan struct{}),
		slots: make(chan struct{}, MaxPending), pending: map[net.Conn]struct{}{}}, nil
}

// Accept returns the next connection: from a listed balancer once its
// header is read, from anyone else as accepted. The wrapped listener's
// errors are returned as they come, so that a server retries the temporary
// ones (EMFILE) at its own pace: the loop accepts again only once the
// error has been taken.
func (l *Listener) Accept() (net.Conn, error) {
	l.start.Do(l.startLoop)
	select {
	case a := <-l.ready:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// startLoop starts the accept loop unless Close came first: under l.mu,
// so that Close's Wait never runs beside the Add.
func (l *Listener) startLoop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.wg.Add(1)
	go l.loop() // owned by l: Close waits for it
}

// Close closes the wrapped listener and the connections whose header is
// being read, and waits for the Listener's goroutines.
func (l *Listener) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.done)
		for c := range l.pending {
			c.Close()
		}
	}
	l.mu.Unlock()
	err := l.Listener.Close()
	l.wg.Wait()
	return err
}

// loop accepts connections until the wrapped listener is closed.
func (l *Listener) loop() {
	defer l.wg.Done()
	for {
		c, err := l.Listener.Accept()
		switch {
		case err != nil:
			if !l.deliver(accepted{err: err}) || errors.Is(err, net.ErrClosed) {
				return
			}
		case !l.cfg.From(c.RemoteAddr()):
			if !l.deliver(accepted{c: c}) {
				c.Close()
				return
			}
		default:
			if !l.readHeader(c) {
				return
			}
		}
	}
}

// readHeader starts reading c's header beside the loop; false if the
// Listener closed meanwhile (c is closed then).
func (l *Listener) readHeader(c net.Conn) bool {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		c.Close()
		return false
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Close()
		<-l.slots
		return false
	}
	l.pending[c] = struct{}{}
	l.mu.Unlock()
	l.wg.Add(1)
	go func() { // ends once the header is read or refused, at most Timeout
		defer l.wg.Done()
		pc, err := Accept(c, l.cfg.Timeout)
		l.mu.Lock()
		delete(l.pending, c)
		l.mu.Unlock()
		<-l.slots
		if err != nil {
			l.mu.Lock()
			closing := l.closed // then Close closed c: not the balancer's doing
			l.mu.Unlock()
			if l.cfg.Refused != nil && !closing {
				l.cfg.Refused(c.RemoteAddr(), err)
			}
			c.Close()
			return
		}
		if !l.deliver(accepted{c: pc}) {
			c.Close()
		}
	}()
	return true
}

// deliver hands a to Accept; false if the Listener closed first.
func (l *Listener) deliver(a accepted) bool {
	select {
	case l.ready <- a:
		return true
	case <-l.done:
		return false
	}
}

// CloseWrite shuts the sending side down when the connection can (TCP), as
// net/http does before closing a connection whose request it refused.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
