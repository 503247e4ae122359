package daemon_test

// The admin port under clients without credentials: read-header, read and
// idle timeouts cut slow clients at their bounds (but never a console
// stream or a slow power operation), and the connection caps, full of
// hostile connections from many addresses, neither hold more than their
// bound nor keep HIL's rotation out.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
)

// acDial connects to addr from the local address src.
func acDial(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// acClosedAt reads c (ignoring what the server sends) until the server
// closes it, and returns when that was; it gives up after limit.
func acClosedAt(c net.Conn, limit time.Duration) (time.Time, error) {
	c.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return time.Time{}, fmt.Errorf("still open after %v", limit)
	}
	return time.Now(), nil
}

// acServerClosed reports whether the server has closed c, waiting briefly.
func acServerClosed(c net.Conn) bool {
	_, err := acClosedAt(c, 20*time.Millisecond)
	return err == nil
}

// acTrickle writes p one byte every interval until the write fails or stop
// is closed.
func acTrickle(c net.Conn, p string, interval time.Duration, stop <-chan struct{}) {
	for i := 0; i < len(p); i++ {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		if _, err := c.Write([]byte{p[i]}); err != nil {
			return
		}
	}
}

// TestAdminSlowClientsCut: a client that trickles its headers is cut at
// the read-header timeout; one that trickles a body, with or without a
// credential (the admin's, or a node token: a tenant's power call, or a
// route that takes no body), at the read timeout; an idle keep-alive
// connection at the idle timeout. Before, headers had 10 s and a body no
// bound at all.
func TestAdminSlowClientsCut(t *testing.T) {
	t.Parallel()
	const header, read, idle = 600 * time.Millisecond, 1500 * time.Millisecond, time.Second
	o := startObmd(t, func(c *daemon.Config) {
		c.Admin.ReadHeaderTimeout, c.Admin.ReadTimeout, c.Admin.IdleTimeout = header, read, idle
	})
	tok := url.QueryEscape(o.addSimNode("slow1"))
	auth := "Authorization: Basic " + basicAuth("admin", o.AdminToken()) + "\r\n"
	trickled := strings.Repeat("x", 1000)
	cases := []struct {
		name    string
		start   string // sent at once
		trickle bool   // then one byte of trickled every 100 ms
		bound   time.Duration
	}{
		{"slow headers", "GET /healthz HTTP/1.1\r\nHost: obmd\r\nX-Slow: ", true, header},
		{"slow body without credential", "POST /node/slow1/token HTTP/1.1\r\nHost: obmd\r\nContent-Length: 1000\r\n\r\n", true, read},
		{"slow body with the admin credential", "PUT /v1/nodes/slow1 HTTP/1.1\r\nHost: obmd\r\n" + auth +
			"Content-Length: 1000\r\n\r\n{\"type\":\"sim\",", true, read},
		{"slow body with a node token", "POST /node/slow1/power_cycle?token=" + tok + " HTTP/1.1\r\nHost: obmd\r\n" +
			"Content-Length: 1000\r\n\r\n{\"force\":", true, read},
		{"body never sent, node token, route without a body", "POST /node/slow1/power_on?token=" + tok + " HTTP/1.1\r\nHost: obmd\r\n" +
			"Content-Length: 1000\r\n\r\n", false, read},
		{"idle keep-alive", "GET /healthz HTTP/1.1\r\nHost: obmd\r\n\r\n", false, idle},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := acDial("127.0.0.1", o.AdminAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			if _, err := io.WriteString(c, tc.start); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			if tc.trickle {
				go acTrickle(c, trickled, 100*time.Millisecond, stop) // ends with stop or the connection
			}
			at, err := acClosedAt(c, tc.bound+10*time.Second)
			if err != nil {
				t.Fatalf("got %v, want the connection cut after %v", err, tc.bound)
			}
			took := at.Sub(start)
			t.Logf("cut after %v (bound %v)", took.Round(time.Millisecond), tc.bound)
			if took < tc.bound*8/10 || took > tc.bound+5*time.Second {
				t.Errorf("cut after %v, want after about %v", took.Round(time.Millisecond), tc.bound)
			}
		})
	}
}

func basicAuth(user, pass string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestAdminReadTimeoutSparesStreams: the read timeout bounds reading a
// request, not answering it: a console stream keeps streaming long past
// it, and a power operation with a body that takes longer than it
// completes (net/http lifts the read deadline once the body is read; a
// deadline left on the connection would cancel the request's context).
func TestAdminReadTimeoutSparesStreams(t *testing.T) {
	t.Parallel()
	const bound = 400 * time.Millisecond
	o := startObmd(t, func(c *daemon.Config) {
		c.Admin.ReadHeaderTimeout, c.Admin.ReadTimeout, c.Admin.IdleTimeout = bound, bound, bound
		c.Commands.Timeout = time.Minute
	})
	tok := o.addSimNode("stream1")
	bmc := o.Lab().BMC("stream1", sim.ModeNormal)
	h := o.consoleHTTP(t, "stream1", tok)
	time.Sleep(5 * bound)
	bmc.Inject([]byte("printed long after the read timeout\n"))
	h.out.wait(t, "HTTP console stream", 0, "printed long after the read timeout\n")
	if h.end.ended() {
		t.Fatalf("the console stream ended: %v", h.end.err)
	}

	bmc.SetDelay(4 * bound)
	start := time.Now()
	status, body := o.request("POST", "/node/stream1/power_cycle?token="+url.QueryEscape(tok), `{"force": false}`, "", "")
	if status != 200 || time.Since(start) < 4*bound {
		t.Errorf("slow power cycle: got %d %s after %v, want 200 after at least %v", status, body,
			time.Since(start).Round(time.Millisecond), 4*bound)
	}
}

// acFlood holds hostile connections to an admin port, from one worker per
// source address: idle ones, ones that trickle their headers, and ones
// that trickle a body without a credential. Each worker opens a new one
// every pause until halt, and keeps its last hold (older ones it closes
// itself, so the test's own descriptors stay bounded); a static flood's
// workers stop opening once they hold hold, and keep those.
type acFlood struct {
	stop   chan struct{} // closed by halt
	wg     sync.WaitGroup
	dialed atomic.Int64

	mu   sync.Mutex
	held []net.Conn // the workers' connections once they have stopped
}

func acStartFlood(t testing.TB, addr string, sources []string, pause time.Duration, hold int, static bool) *acFlood {
	return acStartFloodOf(t, addr, sources, pause, hold, static, acHostile)
}

// acHostile are the starts of the hostile connections of acStartFlood:
// none, headers trickled, a body trickled without a credential.
var acHostile = []string{"", "GET /healthz HTTP/1.1\r\nHost: obmd\r\nX-Slow: ",
	"POST /node/x/token HTTP/1.1\r\nHost: obmd\r\nContent-Length: 100000\r\n\r\n"}

// acStartFloodOf is acStartFlood with the connections starting with
// starts, in turn.
func acStartFloodOf(t testing.TB, addr string, sources []string, pause time.Duration, hold int, static bool, starts []string) *acFlood {
	f := &acFlood{stop: make(chan struct{})}
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

func (f *acFlood) work(addr, src string, w int, pause time.Duration, hold int, static bool, starts []string) {
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
			c, err := acDial(src, addr)
			if err != nil {
				continue // refused or out of descriptors: try again
			}
			f.dialed.Add(1)
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
func (f *acFlood) halt() []net.Conn {
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

// serverOpen counts the held connections the server has not closed.
func (f *acFlood) serverOpen() int {
	open := 0
	for _, c := range f.halt() {
		if !acServerClosed(c) {
			open++
		}
	}
	return open
}

// acSources are count addresses 127.0.0.first, ...
func acSources(first, count int) []string {
	var out []string
	for i := range count {
		out = append(out, fmt.Sprintf("127.0.0.%d", first+i))
	}
	return out
}

// acFreshClient sends one request on a new connection (no keep-alive).
func acFreshClient() *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// acRotate rotates label's token through the obmd route on a new
// connection and returns the new token.
func acRotate(t testing.TB, client *http.Client, base, adminToken, label string) (string, error) {
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

// TestAdminCapsKeepRotation: with the admin port's caps full of hostile
// connections from many 127.0.0.x addresses, and more arriving all the
// time, HIL's rotation on a new connection succeeds and cuts the tenant,
// every time; HIL's console stream, opened before the flood, keeps
// streaming; and no more hostile connections stay open than the cap on
// unauthenticated connections. Besides the strangers, a tenant floods with
// its own node's token, from a few addresses: console streams (sessions
// that start) and power calls whose body never comes, more than the port
// holds; they neither block the rotation nor push out HIL's stream.
func TestAdminCapsKeepRotation(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, dsn string) {
		const maxConns, maxUnauth, perSource = 64, 32, 4
		o := startObmd(t, func(c *daemon.Config) {
			c.DB.DSN = dsn
			c.Admin.MaxConns, c.Admin.MaxUnauthConns, c.Admin.MaxUnauthConnsPerSource = maxConns, maxUnauth, perSource
			// The caps alone must hold the flood: no timeout helps them here.
			c.Admin.ReadHeaderTimeout, c.Admin.ReadTimeout = time.Minute, time.Minute
		})
		tok := o.addSimNode("cap1")
		hilTok := o.addSimNode("hil1")
		stream := o.consoleHTTP(t, "hil1", hilTok)

		// More sources than unauthenticated slots, each over its own cap:
		// HIL's address is known (it has authenticated), so its new
		// connections are the last to be pushed out.
		flood := acStartFlood(t, o.AdminAddr(), acSources(2, 48), 5*time.Millisecond, 10, false)
		tenTok := o.addSimNode("ten1")
		q := url.QueryEscape(tenTok)
		tenant := acStartFloodOf(t, o.AdminAddr(), acSources(60, 6), 5*time.Millisecond, 12, false, []string{
			"GET /node/ten1/console?token=" + q + " HTTP/1.1\r\nHost: obmd\r\n\r\n",
			"POST /node/ten1/power_cycle?token=" + q + " HTTP/1.1\r\nHost: obmd\r\nContent-Length: 100000\r\n\r\n",
			"POST /node/ten1/power_on?token=" + q + " HTTP/1.1\r\nHost: obmd\r\nContent-Length: 100000\r\n\r\n"})
		waitUntil(t, "the floods to fill the caps", func() bool {
			return flood.dialed.Load() > 3*maxConns && tenant.dialed.Load() > 2*maxConns
		})

		client, base := acFreshClient(), "http://"+o.AdminAddr()
		for round := range 5 {
			g := o.goConsole(t, "cap1", tok, conOpts{})
			g.notice("[obmd: console of cap1")
			var err error
			if tok, err = acRotate(t, client, base, o.AdminToken(), "cap1"); err != nil {
				t.Fatalf("round %d: rotation under the flood: %v", round, err)
			}
			g.notice("token rotated")
			g.end.wait(t, "the tenant's console")
		}
		o.Lab().BMC("hil1", sim.ModeNormal).Inject([]byte("HIL still streams\n"))
		stream.out.wait(t, "HIL's console stream", 0, "HIL still streams\n")

		// Those still queued are accepted, pushing out older ones.
		waitUntil(t, fmt.Sprintf("at most %d hostile connections open", maxUnauth), func() bool { return flood.serverOpen() <= maxUnauth })
		t.Logf("%d hostile connections opened, %d still open; the tenant opened %d, %d still open",
			flood.dialed.Load(), flood.serverOpen(), tenant.dialed.Load(), tenant.serverOpen())
	})
}
