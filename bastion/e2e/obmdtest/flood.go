package obmdtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DialTCPFrom connects to addr from the local address src.
func DialTCPFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// Flood holds hostile connections to an admin port, from one worker per
// source address: idle ones, ones that trickle their headers, and ones
// that trickle a body without a credential. Each worker opens a new one
// every pause until halt, and keeps its last hold (older ones it closes
// itself, so the test's own descriptors stay bounded); a static flood's
// workers stop opening once they hold hold, and keep those.
type Flood struct {
	stop   chan struct{} // closed by halt
	wg     sync.WaitGroup
	Dialed atomic.Int64

	mu   sync.Mutex
	held []net.Conn // the workers' connections once they have stopped
}

// StartFlood starts a Flood on the admin port addr, a worker per source
// address (see Flood); it ends when t does.
func StartFlood(t testing.TB, addr string, sources []string, pause time.Duration, hold int, static bool) *Flood {
	return StartFloodOf(t, addr, sources, pause, hold, static, hostileStarts)
}

// hostileStarts are the starts of the hostile connections of StartFlood:
// none, headers trickled, a body trickled without a credential.
var hostileStarts = []string{"", "GET /healthz HTTP/1.1\r\nHost: obmd\r\nX-Slow: ",
	"POST /node/x/token HTTP/1.1\r\nHost: obmd\r\nContent-Length: 100000\r\n\r\n"}

// StartFloodOf is StartFlood with the connections starting with
// starts, in turn.
func StartFloodOf(t testing.TB, addr string, sources []string, pause time.Duration, hold int, static bool, starts []string) *Flood {
	f := &Flood{stop: make(chan struct{})}
	for w, src := range sources {
		f.wg.Add(1)
		go func() { // ends at stop
			defer f.wg.Done()
			f.work(addr, src, w, pause, hold, static, starts)
		}()
	}
	t.Cleanup(func() {
		for _, c := range f.halt() {
			c.Close()
		}
	})
	return f
}

func (f *Flood) work(addr, src string, w int, pause time.Duration, hold int, static bool, starts []string) {
	var mine []net.Conn
	defer func() {
		f.mu.Lock()
		f.held = append(f.held, mine...)
		f.mu.Unlock()
	}()
	trickle := time.NewTicker(200 * time.Millisecond)
	defer trickle.Stop()
	for i := w; ; i++ {
		select {
		case <-f.stop:
			return
		case <-trickle.C:
			for _, c := range mine {
				c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
				c.Write([]byte("x"))
			}
		case <-time.After(pause):
			if static && len(mine) >= hold {
				continue
			}
			c, err := DialTCPFrom(src, addr)
			if err != nil {
				continue // refused or out of descriptors: try again
			}
			f.Dialed.Add(1)
			io.WriteString(c, starts[i%len(starts)])
			mine = append(mine, c)
			if len(mine) > hold {
				mine[0].Close()
				mine = mine[1:]
			}
		}
	}
}

// halt stops the workers and returns the connections they held, still
// open on the client's side (idempotent; closed at cleanup).
func (f *Flood) halt() []net.Conn {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// ServerOpen counts the held connections the server has not closed.
func (f *Flood) ServerOpen() int {
	open := 0
	for _, c := range f.halt() {
		if !serverClosed(c) {
			open++
		}
	}
	return open
}

// Sources are count addresses 127.0.0.first, ...
func Sources(first, count int) []string {
	var out []string
	for i := range count {
		out = append(out, fmt.Sprintf("127.0.0.%d", first+i))
	}
	return out
}

// FreshHTTPClient sends one request on a new connection (no keep-alive).
func FreshHTTPClient() *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// RotateWith rotates label's token through the obmd route on a new
// connection and returns the new token.
func RotateWith(t testing.TB, client *http.Client, base, adminToken, label string) (string, error) {
	req, err := http.NewRequest("POST", base+"/node/"+label+"/token", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", adminToken)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		return "", fmt.Errorf("got %d %s (%v), want 200", resp.StatusCode, data, err)
	}
	var out struct{ Token string }
	if err := json.Unmarshal(data, &out); err != nil || out.Token == "" {
		return "", fmt.Errorf("rotation answered %s", data)
	}
	return out.Token, nil
}

// serverClosed reports whether the server has closed c, waiting briefly.
func serverClosed(c net.Conn) bool {
	_, err := ClosedAt(c, 20*time.Millisecond)
	return err == nil
}

// ClosedAt reads c (ignoring what the server sends) until the server
// closes it, and returns when that was; it gives up after limit.
func ClosedAt(c net.Conn, limit time.Duration) (time.Time, error) {
	c.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return time.Time{}, fmt.Errorf("still open after %v", limit)
	}
	return time.Now(), nil
}
