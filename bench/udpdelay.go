package main

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"time"
)

// udpDelay stands between IPMI clients and a BMC on loopback and holds
// every datagram, both ways, for delay before passing it on: a BMC that
// takes 2 x delay longer to answer each request (a slower BMC, or one
// further away on the network). One socket towards the BMC per client
// address, as a client's own socket would be.
type udpDelay struct {
	front *net.UDPConn
	bmc   *net.UDPAddr
	delay time.Duration

	mu     sync.Mutex
	back   map[string]*net.UDPConn
	closed bool
	wg     sync.WaitGroup // forwarders; Close waits
}

// startUDPDelay listens on 127.0.0.1 for the BMC at 127.0.0.1:port.
func startUDPDelay(port int, delay time.Duration) (*udpDelay, error) {
	front, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	d := &udpDelay{front: front, bmc: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
		delay: delay, back: map[string]*net.UDPConn{}}
	d.wg.Add(1)
	go d.fromClients() // ends when Close closes front
	return d, nil
}

// Port is where clients send to.
func (d *udpDelay) Port() int { return d.front.LocalAddr().(*net.UDPAddr).Port }

func (d *udpDelay) fromClients() {
	defer d.wg.Done()
	buf := make([]byte, 2048)
	for {
		n, from, err := d.front.ReadFromUDP(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		up := d.towards(from)
		if up == nil {
			continue
		}
		time.Sleep(d.delay) // one request in flight per IPMI session: serial is fine
		up.Write(buf[:n])
	}
}

// towards returns the socket to the BMC for client from, starting its
// answer forwarder the first time.
func (d *udpDelay) towards(from *net.UDPAddr) *net.UDPConn {
	key := from.IP.String() + ":" + strconv.Itoa(from.Port)
	d.mu.Lock()
	defer d.mu.Unlock()
	if up, ok := d.back[key]; ok || d.closed {
		return up
	}
	up, err := net.DialUDP("udp4", nil, d.bmc)
	if err != nil {
		return nil
	}
	d.back[key] = up
	d.wg.Add(1)
	go func() { // ends when Close closes up
		defer d.wg.Done()
		buf := make([]byte, 2048)
		for {
			n, err := up.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue // ICMP port unreachable: the BMC is down
			}
			time.Sleep(d.delay)
			d.front.WriteToUDP(buf[:n], from)
		}
	}()
	return up
}

// Close stops forwarding and waits for the forwarders.
func (d *udpDelay) Close() {
	d.mu.Lock()
	d.closed = true
	for _, up := range d.back {
		up.Close()
	}
	d.mu.Unlock()
	d.front.Close()
	d.wg.Wait()
}
