package ipmi

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// relay is a UDP forwarder between the driver and ipmi_sim that can drop
// datagrams at random, go silent (a BMC that vanished without an ICMP
// error) or answer late (a slow BMC), to exercise retransmission,
// link-loss detection and timeouts.
type relay struct {
	pc     net.PacketConn // the port the driver talks to
	target *net.UDPAddr   // ipmi_sim

	silent atomic.Bool
	dup    atomic.Bool  // every reply is forwarded twice
	sent   atomic.Int64 // datagrams from the driver
	// Replies are forwarded lag late once more than lagAfter datagrams
	// came from the driver (sent), and onLag runs at the first: setLag.
	lag, lagAfter atomic.Int64
	// session is the BMC session ID the driver's last RMCP+ datagram in a
	// session carried.
	session atomic.Uint32

	mu    sync.Mutex
	rng   *rand.Rand
	loss  float64                 // probability of dropping each datagram
	onLag func()                  // setLag's, called once
	peers map[string]*net.UDPConn // driver address -> socket towards the sim
	wg    sync.WaitGroup          // forwarding goroutines, waited by close
}

func startRelay(t testing.TB, simPort int) *relay {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("relay listen: %v", err)
	}
	r := &relay{
		pc:     pc,
		target: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: simPort},
		rng:    rand.New(rand.NewPCG(1, 2)),
		peers:  map[string]*net.UDPConn{},
	}
	r.wg.Add(1)
	go r.fromDriver() // ends when close closes pc
	t.Cleanup(r.close)
	return r
}

// simBehindRelay starts an ipmi_sim and a relay in front of it, and returns
// the relay and the BMC info that reaches the sim through it.
func simBehindRelay(t testing.TB) (*relay, sol.Info) {
	t.Helper()
	s := ipmisim.Start(t)
	r := startRelay(t, s.Port)
	info := s.Info()
	info.Port = r.port()
	return r, info
}

func (r *relay) port() int { return r.pc.LocalAddr().(*net.UDPAddr).Port }

func (r *relay) setLoss(p float64) {
	r.mu.Lock()
	r.loss = p
	r.mu.Unlock()
}

// setLag delays every reply to the driver's requests after its next
// skip ones by d (0: none), and calls onLag (if not nil) as the first
// delay starts.
func (r *relay) setLag(d time.Duration, skip int64, onLag func()) {
	r.mu.Lock()
	r.onLag = onLag
	r.mu.Unlock()
	r.lagAfter.Store(r.sent.Load() + skip)
	r.lag.Store(int64(d))
}

// wait delays a reply as setLag asked.
func (r *relay) wait() {
	d := r.lag.Load()
	if d <= 0 || r.sent.Load() <= r.lagAfter.Load() {
		return
	}
	r.mu.Lock()
	f := r.onLag
	r.onLag = nil
	r.mu.Unlock()
	if f != nil {
		f()
	}
	time.Sleep(time.Duration(d))
}

func (r *relay) dropNow() bool {
	if r.silent.Load() {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loss > 0 && r.rng.Float64() < r.loss
}

func (r *relay) fromDriver() {
	defer r.wg.Done()
	buf := make([]byte, 4096)
	for {
		n, from, err := r.pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		r.sent.Add(1)
		if p := buf[:n]; n >= 10 && p[3] == 0x07 && p[4] == 0x06 {
			if id := binary.LittleEndian.Uint32(p[6:10]); id != 0 {
				r.session.Store(id)
			}
		}
		up := r.peer(from)
		if up == nil || r.dropNow() {
			continue
		}
		up.Write(buf[:n])
	}
}

// peer returns the socket towards the sim for one driver address, starting
// its reply forwarder on first use.
func (r *relay) peer(from net.Addr) *net.UDPConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if up, ok := r.peers[from.String()]; ok {
		return up
	}
	up, err := net.DialUDP("udp4", nil, r.target)
	if err != nil {
		return nil
	}
	r.peers[from.String()] = up
	r.wg.Add(1)
	go func() { // ends when close closes up
		defer r.wg.Done()
		buf := make([]byte, 4096)
		for {
			n, err := up.Read(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue // ECONNREFUSED while the sim is down
			}
			if r.dropNow() {
				continue
			}
			r.wait()
			r.pc.WriteTo(buf[:n], from)
			if r.dup.Load() {
				r.pc.WriteTo(buf[:n], from)
			}
		}
	}()
	return up
}

func (r *relay) close() {
	r.pc.Close()
	r.mu.Lock()
	for _, up := range r.peers {
		up.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
