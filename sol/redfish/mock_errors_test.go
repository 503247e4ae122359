package redfish_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/redfish"
)

// TestAuth: a wrong password or user is ErrAuth, with neither the password
// nor the address in the error, and no session left.
func TestAuth(t *testing.T) {
	for _, tc := range []struct{ name, user, pass string }{
		{"wrong password", mockUser, "not-the-password-51"},
		{"unknown user", "mallory", "not-the-password-52"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBMC(t, nil)
			d := b.driver(t, func(i *redfish.Info, _ *redfish.Config) { i.User, i.Pass = tc.user, tc.pass })
			_, err := d.PowerStatus(context.Background())
			var e *redfish.Error
			if !errors.Is(err, redfish.ErrAuth) || !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
				t.Fatalf("PowerStatus: got %v, want ErrAuth (HTTP 401)", err)
			}
			safeText(t, err, b, tc.pass)
			if got, want := sol.TenantText(err), "the BMC refused obmd's credentials"; got != want {
				t.Errorf("tenant text: got %q, want %q", got, want)
			}
			if e.MessageID != "Base.1.8.NoValidSession" {
				t.Errorf("MessageID: got %q, want the BMC's", e.MessageID)
			}
			if _, created, _ := b.Counts(); created != 0 {
				t.Errorf("sessions created: got %d, want 0", created)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}

// TestSystem: a system named by Id or by path is found; a missing one, or
// none named on a BMC with several, is ErrSystemMissing; the session opened
// to look is logged out.
func TestSystem(t *testing.T) {
	b := startBMC(t, nil)
	for _, sys := range []string{systemID, systemPath, systemPath + "/"} {
		d := b.driver(t, func(i *redfish.Info, _ *redfish.Config) { i.System = sys })
		if _, err := d.PowerStatus(context.Background()); err != nil {
			t.Errorf("system %q: got %v, want nil", sys, err)
		}
	}
	d := b.driver(t, func(i *redfish.Info, _ *redfish.Config) { i.System = "NoSuchSystem" })
	err := d.PowerOn(context.Background())
	if !errors.Is(err, redfish.ErrSystemMissing) {
		t.Fatalf("missing system: got %v, want ErrSystemMissing", err)
	}
	safeText(t, err, b, mockPass)
	t.Logf("missing system: %v", err)

	// A second system (the mock adds a collection member on POST).
	req, _ := http.NewRequest(http.MethodPost, b.MockURL+"/redfish/v1/Systems", strings.NewReader(`{"Name":"second"}`))
	req.SetBasicAuth(mockUser, mockPass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("add a system to the mock: %v %v", resp, err)
	}
	resp.Body.Close()
	_, err = b.driver(t, nil).PowerStatus(context.Background())
	if !errors.Is(err, redfish.ErrSystemMissing) || !strings.Contains(err.Error(), "2 systems") {
		t.Fatalf("two systems, none named: got %v, want ErrSystemMissing saying so", err)
	}
	t.Logf("two systems: %v", err)
	if _, err := b.driver(t, func(i *redfish.Info, _ *redfish.Config) { i.System = systemID }).PowerStatus(context.Background()); err != nil {
		t.Errorf("two systems, one named: got %v, want nil", err)
	}
	if resets, _ := b.Recorded(); len(resets) != 0 {
		t.Errorf("resets: got %q, want none", resets)
	}
	b.noSessionLeft(t)
}

// TestCertificate: a certificate that does not verify is ErrCertificate
// before any request reaches the BMC (so no password either); insecure
// accepts it.
func TestCertificate(t *testing.T) {
	ca := newCA(t)
	cases := []struct {
		name  string
		cert  *tls.Certificate
		trust bool   // trust the CA (or httptest's certificate)
		note  string // what the error says of it
	}{
		{"unknown authority", nil, false, "unknown authority"},
		{"wrong host name", ca.leaf(t, "bmc-17.example", time.Now().Add(time.Hour)), true, "not issued for the host"},
		{"expired", ca.leaf(t, "127.0.0.1", time.Now().Add(-time.Hour)), true, "expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := startBMC(t, tc.cert)
			pool := x509.NewCertPool()
			if tc.cert != nil && tc.trust {
				pool.AddCert(ca.cert)
			}
			d := b.driver(t, func(_ *redfish.Info, c *redfish.Config) { c.RootCAs = pool })
			_, err := d.PowerStatus(context.Background())
			if !errors.Is(err, redfish.ErrCertificate) || !strings.Contains(err.Error(), tc.note) {
				t.Fatalf("PowerStatus: got %v, want ErrCertificate saying %q", err, tc.note)
			}
			safeText(t, err, b, mockPass)
			if _, _, requests := b.Counts(); requests != 0 {
				t.Errorf("requests that reached the BMC: got %d, want 0", requests)
			}
			t.Logf("%s: %v", tc.name, err)

			d = b.driver(t, func(i *redfish.Info, c *redfish.Config) { i.Insecure, c.RootCAs = true, pool })
			if got, err := d.PowerStatus(context.Background()); err != nil || got != "on" {
				t.Errorf("insecure: got %q, %v; want on", got, err)
			}
			b.noSessionLeft(t)
		})
	}
	t.Run("valid", func(t *testing.T) {
		b := startBMC(t, ca.leaf(t, "127.0.0.1", time.Now().Add(time.Hour)))
		pool := x509.NewCertPool()
		pool.AddCert(ca.cert)
		d := b.driver(t, func(_ *redfish.Info, c *redfish.Config) { c.RootCAs = pool })
		if _, err := d.PowerStatus(context.Background()); err != nil {
			t.Errorf("PowerStatus: got %v, want nil", err)
		}
	})
}

// TestUnreachable: a closed port is ErrUnreachable; a plain HTTP server (the
// mock itself) where HTTPS is expected is ErrProtocol. Neither names the
// address.
func TestUnreachable(t *testing.T) {
	b := startBMC(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		name, addr string
		want       error
		tenant     string // sol.TenantText
	}{
		{"closed port", "https://" + closed, redfish.ErrUnreachable, "the BMC is unreachable"},
		{"plain http server", "https://" + strings.TrimPrefix(b.MockURL, "http://"), redfish.ErrProtocol, "the BMC operation failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := b.driver(t, func(i *redfish.Info, _ *redfish.Config) { i.Addr = tc.addr })
			start := time.Now()
			err := d.PowerOn(context.Background())
			if !errors.Is(err, tc.want) {
				t.Fatalf("PowerOn: got %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), strings.TrimPrefix(tc.addr, "https://")) || strings.Contains(err.Error(), "127.0.0.1") {
				t.Errorf("error %q names the address", err)
			}
			if got := sol.TenantText(err); got != tc.tenant {
				t.Errorf("tenant text: got %q, want %q", got, tc.tenant)
			}
			t.Logf("%s after %v: %v", tc.name, time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// TestDeadline: the operation's context bounds everything: a BMC that
// accepts the connection and never answers, and a system that never reaches
// the state asked for (the BMC accepts resets and ignores them). The
// session is logged out all the same.
func TestDeadline(t *testing.T) {
	const deadline, bound = 300 * time.Millisecond, 3 * time.Second
	t.Run("silent BMC", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var accepted atomic.Int32
		done := make(chan struct{})
		go func() { // owned by this subtest: it closes l and waits
			defer close(done)
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				conns = append(conns, c) // held open, never answered
			}
		}()
		defer func() { l.Close(); <-done }()
		b := startBMC(t, nil)
		d := b.driver(t, func(i *redfish.Info, _ *redfish.Config) { i.Addr = "https://" + l.Addr().String() })
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		_, err = d.PowerStatus(ctx)
		if took := time.Since(start); took > bound {
			t.Errorf("returned after %v, want under %v", took, bound)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want DeadlineExceeded", err)
		}
		if accepted.Load() == 0 {
			t.Errorf("the silent BMC got no connection: the test proves nothing")
		}
		t.Logf("silent BMC: %v", err)
	})
	t.Run("state never reached", func(t *testing.T) {
		b := startBMC(t, nil)
		b.DropResets()
		d := b.driver(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		err := d.PowerOff(ctx, false)
		if took := time.Since(start); took > bound {
			t.Errorf("returned after %v, want under %v", took, bound)
		}
		if !errors.Is(err, redfish.ErrStateTimeout) || !errors.Is(err, context.DeadlineExceeded) ||
			!strings.Contains(err.Error(), "last seen On") {
			t.Errorf("got %v, want ErrStateTimeout and DeadlineExceeded, last seen On", err)
		}
		t.Logf("state never reached: %v", err)
		b.noSessionLeft(t)
	})
	t.Run("StateTimeout", func(t *testing.T) {
		b := startBMC(t, nil)
		b.DropResets()
		d := b.driver(t, func(_ *redfish.Info, c *redfish.Config) { c.StateTimeout = deadline })
		start := time.Now()
		err := d.PowerOff(context.Background(), false)
		if took := time.Since(start); took > bound {
			t.Errorf("returned after %v, want under %v", took, bound)
		}
		if !errors.Is(err, redfish.ErrStateTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want ErrStateTimeout alone", err)
		}
		b.noSessionLeft(t)
	})
	t.Run("cancelled before the call", func(t *testing.T) {
		b := startBMC(t, nil)
		d := b.driver(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := d.PowerOff(ctx, false); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want Canceled", err)
		}
		if resets, _ := b.Recorded(); len(resets) != 0 {
			t.Errorf("resets: got %q, want none", resets)
		}
		b.noSessionLeft(t)
	})
}

// TestNoRedirect (attack): a BMC, or something in its place, that answers
// the login with a redirect must not get the credentials sent on to where
// it points.
func TestNoRedirect(t *testing.T) {
	var stolen atomic.Int32
	evil := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer evil.Close()
	b := startBMC(t, nil) // httptest's certificate, which evil shares: trusted
	b.RedirectLogins(evil.URL + sessions)
	_, err := b.driver(t, nil).PowerStatus(context.Background())
	if !errors.Is(err, redfish.ErrProtocol) {
		t.Errorf("got %v, want ErrProtocol", err)
	}
	if n := stolen.Load(); n != 0 {
		t.Errorf("requests that followed the redirect: got %d, want 0", n)
	}
	t.Logf("redirected login: %v", err)
}

// TestNoToken: a login answered without a session token is ErrProtocol,
// and nothing more is asked of that BMC than the logout.
func TestNoToken(t *testing.T) {
	b := startBMC(t, nil)
	b.OmitToken()
	err := b.driver(t, nil).PowerOff(context.Background(), false)
	if !errors.Is(err, redfish.ErrProtocol) || !strings.Contains(err.Error(), "no session token") {
		t.Errorf("got %v, want ErrProtocol saying no session token", err)
	}
	if resets, _ := b.Recorded(); len(resets) != 0 {
		t.Errorf("resets: got %q, want none", resets)
	}
	t.Logf("no token: %v", err)
}

// ca is a certificate authority made for one test.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "obmd test CA"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(2 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &ca{cert: cert, key: key}
}

// leaf issues a server certificate for host (an IP address or a DNS name)
// that expires at notAfter.
func (c *ca) leaf(t *testing.T, host string, notAfter time.Time) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
