package goipmisrv

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/obmd/obmd/sol/soltest"
)

// goipmi-server listens on ":PORT", every interface of its network
// namespace, and has no option to bind an address. So that tests stay on
// 127.0.0.1, each server runs in a network namespace of its own (only a
// loopback interface) and a relay in the test process forwards datagrams
// between a socket on the host's 127.0.0.1:PORT and the server's
// 127.0.0.1:PORT inside its namespace. The port is the same on both sides
// because the BMC reports it as the SOL payload port, and ipmitool refuses
// a SOL session on a port other than the one it dialled.

// nsDialer makes UDP sockets inside another network namespace. One
// goroutine, locked to its OS thread, enters the namespace and dials for
// every caller; when it is done it returns the thread to its own namespace
// before unlocking it. (Leaving the thread to die instead would be unsafe:
// a child process started with Pdeathsig from that thread, such as an
// ipmi_sim, gets killed when the thread exits.) A socket keeps its
// namespace whatever thread later uses it.
type nsDialer struct {
	reqs chan dialReq // closed by close
	done chan struct{}
	tid  int // the thread's id, for tests; written before ready
}

type dialReq struct {
	raddr *net.UDPAddr
	res   chan dialRes
}

type dialRes struct {
	conn *net.UDPConn
	err  error
}

// newNSDialer enters the network namespace of process pid and brings its
// loopback interface up.
func newNSDialer(pid int) (*nsDialer, error) {
	d := &nsDialer{reqs: make(chan dialReq), done: make(chan struct{})}
	ready := make(chan error, 1)
	go d.run(pid, ready) // owned by d: close waits for it
	if err := <-ready; err != nil {
		<-d.done
		return nil, err
	}
	return d, nil
}

func (d *nsDialer) run(pid int, ready chan<- error) {
	defer close(d.done)
	runtime.LockOSThread()
	d.tid = unix.Gettid()
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread() // not moved yet
		ready <- fmt.Errorf("open own network namespace: %w", err)
		return
	}
	defer unix.Close(home)
	err = enterNetNS(pid)
	defer func() {
		// Back home, then the thread may serve other goroutines; if that
		// fails it stays locked and ends with this goroutine.
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	if err != nil {
		ready <- err
		return
	}
	ready <- nil
	for r := range d.reqs {
		c, err := net.DialUDP("udp4", nil, r.raddr)
		r.res <- dialRes{c, err}
	}
}

func enterNetNS(pid int) error {
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace: %w", err)
	}
	err = unix.Setns(fd, unix.CLONE_NEWNET)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("enter network namespace: %w", err)
	}
	return soltest.LoopbackUp()
}

// dial connects a UDP socket to raddr inside the namespace. Not after close.
func (d *nsDialer) dial(raddr *net.UDPAddr) (*net.UDPConn, error) {
	res := make(chan dialRes, 1)
	d.reqs <- dialReq{raddr: raddr, res: res}
	r := <-res
	return r.conn, r.err
}

// close ends the dialing goroutine and waits for it.
func (d *nsDialer) close() {
	close(d.reqs)
	<-d.done
}

// relay forwards datagrams between clients of the host's front socket and
// the server in its namespace: each client address gets a socket of its own
// inside the namespace (the BMC tells sessions apart by address too), with
// a goroutine that sends the server's answers back to that client. A
// client's socket that saw no traffic for peerIdle is closed when the next
// new client comes.
//
// Ownership: serve (the front reader) and each peer's back goroutine are
// started by the relay and waited for by close, which closes the front
// socket and every peer socket.
type relay struct {
	front  *net.UDPConn
	target *net.UDPAddr
	ns     *nsDialer

	mu     sync.Mutex
	peers  map[netip.AddrPort]*peer
	closed bool
	wg     sync.WaitGroup
}

type peer struct {
	conn *net.UDPConn
	last atomic.Int64 // unix nanoseconds of the last datagram either way
}

const peerIdle = 2 * time.Minute

func newRelay(front *net.UDPConn, ns *nsDialer) *relay {
	port := front.LocalAddr().(*net.UDPAddr).Port
	r := &relay{
		front:  front,
		target: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
		ns:     ns,
		peers:  map[netip.AddrPort]*peer{},
	}
	r.wg.Add(1)
	go r.serve()
	return r
}

func (r *relay) serve() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.front.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p := r.peer(from)
		if p == nil {
			continue
		}
		p.last.Store(time.Now().UnixNano())
		p.conn.Write(buf[:n])
	}
}

// peer returns the namespace socket of client from, making it if needed.
func (r *relay) peer(from netip.AddrPort) *peer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.peers[from]; ok || r.closed {
		return p
	}
	now := time.Now()
	for addr, p := range r.peers {
		if now.Sub(time.Unix(0, p.last.Load())) > peerIdle {
			p.conn.Close() // its back goroutine ends
			delete(r.peers, addr)
		}
	}
	c, err := r.ns.dial(r.target)
	if err != nil {
		return nil
	}
	p := &peer{conn: c}
	p.last.Store(now.UnixNano())
	r.peers[from] = p
	r.wg.Add(1)
	go r.back(from, p)
	return p
}

// back sends what the server answers on p's socket to client to.
func (r *relay) back(to netip.AddrPort, p *peer) {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := p.conn.Read(buf)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				continue // the server is down for now: the client sees silence
			}
			return
		}
		p.last.Store(time.Now().UnixNano())
		r.front.WriteToUDPAddrPort(buf[:n], to)
	}
}

// close stops forwarding and waits for every goroutine of the relay.
func (r *relay) close() {
	r.front.Close()
	r.mu.Lock()
	r.closed = true
	for _, p := range r.peers {
		p.conn.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
