package bmcs

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/fleetbmc"
	"github.com/obmd/obmd/sol/soltest/goipmisrv"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// Label is the node label the tables give drivers.
const Label = "node-7"

// Driver builds the IPMI driver under test (sol/ipmi or sol/ipmitool) for
// the node Label at info, with opts and a short timeout, logging to log.
type Driver func(t *testing.T, info sol.Info, opts sol.IPMIOptions, log logrus.FieldLogger) sol.BMC

// opTimeout bounds each operation of the tables.
const opTimeout = 30 * time.Second

// endpoint is the key the drivers remember a suite under.
func endpoint(info sol.Info) string { return net.JoinHostPort(info.Addr, strconv.Itoa(info.Port)) }

// logs is a logger that records entries (never the password: checked).
func logs(t *testing.T) (*logrus.Logger, *logtest.Hook) {
	l, hook := logtest.NewNullLogger()
	l.SetLevel(logrus.DebugLevel)
	t.Cleanup(func() {
		for _, e := range hook.AllEntries() {
			if s, _ := e.String(); strings.Contains(s, ipmisim.Pass) || strings.Contains(s, goipmisrv.Pass) || strings.Contains(s, fleetbmc.Pass) {
				t.Errorf("log entry %q holds the BMC password", e.Message)
			}
		}
	})
	return l, hook
}

// count is how many entries end with suffix ("_cipher_selected").
func count(hook *logtest.Hook, suffix string) int {
	n := 0
	for _, e := range hook.AllEntries() {
		if strings.HasSuffix(e.Message, suffix) {
			n++
		}
	}
	return n
}

// RunCiphers checks cipher suite negotiation: a node that pins no suite
// gets the first of 17, 3 that the BMC accepts (goipmi-server restricted to
// 17: 17; ipmi_sim, which has no SHA-256 suites: 3), remembered per node
// and logged once; a remembered suite the BMC now refuses is tried again
// from the top; a pinned suite the BMC refuses is a clear error that names
// it and, for tenants, no address.
func RunCiphers(t *testing.T, newDriver Driver) {
	only17 := goipmisrv.Start(t, goipmisrv.Options{CipherSuites: []int{17}})
	sim := ipmisim.Start(t)
	for _, tc := range []struct {
		name string
		m    soltest.Machine
		want int
	}{
		{"goipmi-server with only 17", only17, 17},
		{"ipmi_sim without 17 falls back to 3", sim, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := sol.NewCiphers()
			log, hook := logs(t)
			b := newDriver(t, soltest.Unpinned(tc.m.Info()), sol.IPMIOptions{Ciphers: mem}, log)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			for i := range 2 {
				if _, err := b.PowerStatus(ctx); err != nil {
					t.Fatalf("PowerStatus %d: got %v, want nil", i, err)
				}
			}
			soltest.Open(t, b).Close(t) // the console runs the negotiated suite too
			if got, ok := mem.Suite(Label); !ok || got != tc.want {
				t.Errorf("remembered suite: got %d (%v), want %d", got, ok, tc.want)
			}
			if n := count(hook, "_cipher_selected"); n != 1 {
				t.Errorf("suite choice logged %d times, want once", n)
			}
		})
	}

	t.Run("remembered suite refused: from the top", func(t *testing.T) {
		mem := sol.NewCiphers()
		info := soltest.Unpinned(only17.Info())
		mem.Remember(Label, endpoint(info), 3) // what worked before the BMC changed
		log, _ := logs(t)
		b := newDriver(t, info, sol.IPMIOptions{Ciphers: mem}, log)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if _, err := b.PowerStatus(ctx); err != nil {
			t.Fatalf("PowerStatus: got %v, want nil", err)
		}
		if got, _ := mem.Suite(Label); got != 17 {
			t.Errorf("remembered suite: got %d, want 17", got)
		}
	})

	for _, tc := range []struct {
		name  string
		info  sol.Info
		opts  sol.IPMIOptions
		suite string
	}{
		{"pinned 3 on goipmi-server with only 17", soltest.Pinned(only17.Info(), 3), sol.IPMIOptions{}, "IPMI cipher suite 3"},
		{"pinned 17 on ipmi_sim", soltest.Pinned(sim.Info(), 17), sol.IPMIOptions{}, "IPMI cipher suite 17"},
		{"every suite of the order refused", soltest.Unpinned(only17.Info()), sol.IPMIOptions{CipherOrder: []int{3, 2}}, "IPMI cipher suites 3 and 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := sol.NewCiphers()
			tc.opts.Ciphers = mem
			log, _ := logs(t)
			b := newDriver(t, tc.info, tc.opts, log)
			for _, op := range []struct {
				name string
				run  func(context.Context) error
			}{
				{"power status", func(ctx context.Context) error { _, err := b.PowerStatus(ctx); return err }},
				{"open console", func(ctx context.Context) error {
					c, err := b.OpenConsole(ctx)
					if err == nil {
						c.Close()
					}
					return err
				}},
			} {
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				err := op.run(ctx)
				cancel()
				var e *sol.Error
				if !errors.As(err, &e) || e.Fault != sol.FaultCipher {
					t.Fatalf("%s: got %v, want a refused cipher suite", op.name, err)
				}
				if want := "the BMC refused " + tc.suite; sol.TenantText(err) != want {
					t.Errorf("%s: tenant text: got %q, want %q", op.name, sol.TenantText(err), want)
				}
				if !strings.Contains(err.Error(), endpoint(tc.info)) {
					t.Errorf("%s: detail %q does not name the BMC", op.name, err)
				}
			}
			if _, ok := mem.Suite(Label); ok {
				t.Error("a suite is remembered though none worked")
			}
		})
	}

	t.Run("wrong password is no cipher problem", func(t *testing.T) {
		log, _ := logs(t)
		b := newDriver(t, soltest.Unpinned(sim.WrongPassword()), sol.IPMIOptions{}, log)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_, err := b.PowerStatus(ctx)
		var e *sol.Error
		if !errors.As(err, &e) || e.Fault != sol.FaultCredentials {
			t.Errorf("PowerStatus: got %v, want refused credentials", err)
		}
	})
}
