package obmdtest

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/obmd/obmd/bastion/internal/proxyproto"
)

// Pipe forwards TCP from its own address to target (set once known);
// Cut drops every connection and refuses new ones: a network partition.
// As a balancer (SetBalancer), it connects from its own address and sends
// a PROXY protocol v2 header naming the client first, as HAProxy's
// send-proxy-v2 does.
type Pipe struct {
	l net.Listener

	mu     sync.Mutex
	target string
	from   string // the address it connects from ("": any)
	proxy  bool   // send a PROXY header
	down   bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// StartPipe listens on 127.0.0.1 and forwards to the target SetTarget
// sets; it stops when t ends.
func StartPipe(t testing.TB) *Pipe {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Pipe{l: l, conns: map[net.Conn]struct{}{}}
	p.wg.Go(func() { // ends when l closes
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			target, down, from, proxy := p.target, p.down, p.from, p.proxy
			p.mu.Unlock()
			var up net.Conn
			if !down && target != "" {
				d := net.Dialer{}
				if from != "" {
					d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
				}
				up, err = d.Dial("tcp", target)
			}
			if up == nil || err != nil {
				c.Close()
				continue
			}
			if proxy {
				h := proxyproto.Header{Version: 2, Source: c.RemoteAddr().(*net.TCPAddr).AddrPort(),
					Dest: c.LocalAddr().(*net.TCPAddr).AddrPort()}
				up.Write(h.Append(nil))
			}
			p.mu.Lock()
			if p.down {
				p.mu.Unlock()
				c.Close()
				up.Close()
				continue
			}
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(up, c); up.Close() }) // ends when either side closes
			p.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(func() {
		l.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr is the address p listens on.
func (p *Pipe) Addr() string { return p.l.Addr().String() }

// SetTarget makes p forward new connections to addr.
func (p *Pipe) SetTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
}

// SetBalancer makes p a balancer that connects from address from and
// sends a PROXY header.
func (p *Pipe) SetBalancer(from string) {
	p.mu.Lock()
	p.from, p.proxy = from, true
	p.mu.Unlock()
}

// Heal takes new connections again after Cut.
func (p *Pipe) Heal() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Cut drops every connection and refuses new ones until Heal.
func (p *Pipe) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}
