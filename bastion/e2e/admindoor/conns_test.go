package admindoor

// The admin port under clients without credentials: read-header, read and
// idle timeouts cut slow clients at their bounds (but never a console
// stream or a slow power operation), and the connection caps, full of
// hostile connections from many addresses, neither hold more than their
// bound nor keep HIL's rotation out.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
)

// trickle writes p one byte every interval until the write fails or stop
// is closed.
func trickle(c net.Conn, p string, interval time.Duration, stop <-chan struct{}) {
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
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.Admin.ReadHeaderTimeout, c.Admin.ReadTimeout, c.Admin.IdleTimeout = header, read, idle
	})
	tok := url.QueryEscape(o.AddSimNode("slow1"))
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
			c, err := obmdtest.DialTCPFrom("127.0.0.1", o.AdminAddr())
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
				go trickle(c, trickled, 100*time.Millisecond, stop) // ends with stop or the connection
			}
			at, err := obmdtest.ClosedAt(c, tc.bound+10*time.Second)
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
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.Admin.ReadHeaderTimeout, c.Admin.ReadTimeout, c.Admin.IdleTimeout = bound, bound, bound
		c.Commands.Timeout = time.Minute
	})
	tok := o.AddSimNode("stream1")
	bmc := o.Lab().BMC("stream1", sim.ModeNormal)
	h := o.ConsoleHTTP(t, "stream1", tok)
	time.Sleep(5 * bound)
	bmc.Inject([]byte("printed long after the read timeout\n"))
	h.Out.Wait(t, "HTTP console stream", 0, "printed long after the read timeout\n")
	if h.End.Ended() {
		t.Fatalf("the console stream ended: %v", h.End.Err)
	}

	bmc.SetDelay(4 * bound)
	start := time.Now()
	status, body := o.Request("POST", "/node/stream1/power_cycle?token="+url.QueryEscape(tok), `{"force": false}`, "", "")
	if status != 200 || time.Since(start) < 4*bound {
		t.Errorf("slow power cycle: got %d %s after %v, want 200 after at least %v", status, body,
			time.Since(start).Round(time.Millisecond), 4*bound)
	}
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
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		const maxConns, maxUnauth, perSource = 64, 32, 4
		o := obmdtest.Start(t, func(c *daemon.Config) {
			c.DB.DSN = dsn
			c.Admin.MaxConns, c.Admin.MaxUnauthConns, c.Admin.MaxUnauthConnsPerSource = maxConns, maxUnauth, perSource
			// The caps alone must hold the flood: no timeout helps them here.
			c.Admin.ReadHeaderTimeout, c.Admin.ReadTimeout = time.Minute, time.Minute
		})
		tok := o.AddSimNode("cap1")
		hilTok := o.AddSimNode("hil1")
		stream := o.ConsoleHTTP(t, "hil1", hilTok)

		// More sources than unauthenticated slots, each over its own cap:
		// HIL's address is known (it has authenticated), so its new
		// connections are the last to be pushed out.
		flood := obmdtest.StartFlood(t, o.AdminAddr(), obmdtest.Sources(2, 48), 5*time.Millisecond, 10, false)
		tenTok := o.AddSimNode("ten1")
		q := url.QueryEscape(tenTok)
		tenant := obmdtest.StartFloodOf(t, o.AdminAddr(), obmdtest.Sources(60, 6), 5*time.Millisecond, 12, false, []string{
			"GET /node/ten1/console?token=" + q + " HTTP/1.1\r\nHost: obmd\r\n\r\n",
			"POST /node/ten1/power_cycle?token=" + q + " HTTP/1.1\r\nHost: obmd\r\nContent-Length: 100000\r\n\r\n",
			"POST /node/ten1/power_on?token=" + q + " HTTP/1.1\r\nHost: obmd\r\nContent-Length: 100000\r\n\r\n"})
		obmdtest.WaitUntil(t, "the floods to fill the caps", func() bool {
			return flood.Dialed.Load() > 3*maxConns && tenant.Dialed.Load() > 2*maxConns
		})

		client, base := obmdtest.FreshHTTPClient(), "http://"+o.AdminAddr()
		for round := range 5 {
			g := o.GoConsole(t, "cap1", tok, obmdtest.SessionOpts{})
			g.Notice("[obmd: console of cap1")
			var err error
			if tok, err = obmdtest.RotateWith(t, client, base, o.AdminToken(), "cap1"); err != nil {
				t.Fatalf("round %d: rotation under the flood: %v", round, err)
			}
			g.Notice("token rotated")
			g.End.Wait(t, "the tenant's console")
		}
		o.Lab().BMC("hil1", sim.ModeNormal).Inject([]byte("HIL still streams\n"))
		stream.Out.Wait(t, "HIL's console stream", 0, "HIL still streams\n")

		// Those still queued are accepted, pushing out older ones.
		obmdtest.WaitUntil(t, fmt.Sprintf("at most %d hostile connections open", maxUnauth), func() bool { return flood.ServerOpen() <= maxUnauth })
		t.Logf("%d hostile connections opened, %d still open; the tenant opened %d, %d still open",
			flood.Dialed.Load(), flood.ServerOpen(), tenant.Dialed.Load(), tenant.ServerOpen())
	})
}

// TestAttackTenantHoldsAdminPort: "a correct admin credential is never
// refused because of others' failures", and revocation cannot be blocked.
// A tenant with its node's token opens the admin port's connections with
// a node-token request whose body never comes (power_cycle reads its body
// after the token check). A valid node token makes the connection trusted
// by the caps (conncap.TrustContext), and a trusted connection busy with a
// request is never closed to make room: once the tenant holds every slot,
// HIL's rotation, the change that would cut the tenant, is refused at
// accept. The tenant needs no more than admin_max_conns connections (sized
// from the open-file limit; 32 here) and renews each every read timeout.
func TestAttackTenantHoldsAdminPort(t *testing.T) {
	t.Parallel()
	const maxConns = 32
	o := obmdtest.Start(t, func(c *daemon.Config) { c.Admin.MaxConns = maxConns })
	tok := o.AddSimNode("victim1")
	g := o.GoConsole(t, "victim1", tok, obmdtest.SessionOpts{})
	g.Notice("[obmd: console of victim1")

	// The tenant's connections, from a few addresses (one stranger each at
	// a time, so the stranger caps never close them before they are trusted).
	head := "POST /node/victim1/power_cycle?token=" + url.QueryEscape(tok) +
		" HTTP/1.1\r\nHost: obmd\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for i := range maxConns + 8 { // a few more than the cap: the surplus is refused
		c, err := obmdtest.DialTCPFrom(fmt.Sprintf("127.0.0.%d", 2+i%8), o.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		time.Sleep(20 * time.Millisecond) // the token check trusts it
	}

	// HIL rotates the token, on new connections, as its driver does; a
	// few tries over two seconds.
	client, base := obmdtest.FreshHTTPClient(), "http://"+o.AdminAddr()
	var errs []error
	for range 5 {
		newTok, err := obmdtest.RotateWith(t, client, base, o.AdminToken(), "victim1")
		if err == nil {
			g.Notice("token rotated")
			t.Logf("rotated after %d refusals; new token %d bytes", len(errs), len(newTok))
			return
		}
		errs = append(errs, err)
		time.Sleep(400 * time.Millisecond)
	}
	t.Fatalf("HIL's rotation was refused %d times while a tenant held the admin port with its own token: %v",
		len(errs), errs)
}
