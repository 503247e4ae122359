package redfish_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/redfish"
)

// TestDiagnose: a Redfish node's diagnosis on metal-operator's mock, healthy
// and for each failure it names (unreachable address, untrusted
// certificate, wrong password, missing system, and the console's first
// IPMI step), stopping at the failure; tenant texts name no address; it
// resets, patches and leaves nothing.
func TestDiagnose(t *testing.T) {
	b := startBMC(t, nil)
	steps := []string{sol.CheckAddress, sol.CheckServiceRoot, sol.CheckAuth, sol.CheckSystem, sol.CheckResetActions}
	closedTCP := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return "https://" + l.Addr().String()
	}()
	closedUDP := func() int {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}()
	three := 3
	cases := []struct {
		name   string
		edit   func(*redfish.Info, *redfish.Config)
		steps  []string
		ok     bool
		tenant string // what the last step says
	}{
		{"healthy", nil, steps, true, "reset types"},
		{"insecure", func(i *redfish.Info, c *redfish.Config) { i.Insecure, c.RootCAs = true, x509.NewCertPool() }, steps, true, ""},
		{"unreachable", func(i *redfish.Info, _ *redfish.Config) { i.Addr = closedTCP }, steps[:1], false, redfish.ErrUnreachable.Error()},
		{"certificate not trusted", func(_ *redfish.Info, c *redfish.Config) { c.RootCAs = x509.NewCertPool() }, steps[:2], false, redfish.ErrCertificate.Error()},
		{"wrong password", func(i *redfish.Info, _ *redfish.Config) { i.Pass = "not-the-password-61" }, steps[:3], false, redfish.ErrAuth.Error()},
		{"system missing", func(i *redfish.Info, _ *redfish.Config) { i.System = "NoSuchSystem" }, steps[:4], false, redfish.ErrSystemMissing.Error()},
		{"console unreachable", func(i *redfish.Info, _ *redfish.Config) {
			i.SOL = &redfish.SOLInfo{Port: closedUDP, Cipher: &three}
		}, append(slices.Clone(steps), "console "+sol.CheckAddress), false, sol.FaultUnreachable.String()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := b.driver(t, tc.edit)
			checks := d.Diagnose(context.Background())
			var names []string
			for _, c := range checks {
				names = append(names, c.Name)
				safeText(t, errors.New(c.Tenant+" "+c.Hint), b, mockPass)
				if c.OK == (c.Hint != "") {
					t.Errorf("%s: OK %v with hint %q", c.Name, c.OK, c.Hint)
				}
			}
			if !slices.Equal(names, tc.steps) {
				t.Fatalf("steps: got %q, want %q (%+v)", names, tc.steps, checks)
			}
			if got := sol.Passed(checks); got != tc.ok {
				t.Errorf("Passed: got %v, want %v (%+v)", got, tc.ok, checks)
			}
			last := checks[len(checks)-1]
			if !strings.Contains(last.Tenant, tc.tenant) {
				t.Errorf("%s: tenant text %q, want it to say %q", last.Name, last.Tenant, tc.tenant)
			}
			t.Logf("%s: %s / %s", last.Name, last.Detail, last.Hint)
		})
	}
	if resets, patches := b.Recorded(); len(resets)+len(patches) != 0 {
		t.Errorf("a diagnosis changed the BMC: resets %q, patches %q", resets, patches)
	}
	b.noSessionLeft(t)
}
