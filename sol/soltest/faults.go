package soltest

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
)

// FaultCase is a BMC that fails in one way, and how a driver must classify
// the failure.
type FaultCase struct {
	Name string
	Info sol.Info
	Want sol.Fault
}

// faultBound is how long one failing call may take here: the caller's
// deadline (faultCall) plus room for a loaded machine.
const (
	faultCall  = 3 * time.Second
	faultBound = faultCall + 5*time.Second
)

// RunFaults checks that a driver classifies each case: power status, a
// power operation and opening the console each fail within their deadline
// with a *sol.Error of the wanted Fault, whose own text names the BMC's
// address and port (for the log) while sol.TenantText does not.
func RunFaults(t *testing.T, newBMC func(t *testing.T, info sol.Info) sol.BMC, cases []FaultCase) {
	ops := []struct {
		name string
		run  func(ctx context.Context, b sol.BMC) error
	}{
		{"power status", func(ctx context.Context, b sol.BMC) error { _, err := b.PowerStatus(ctx); return err }},
		{"power on", func(ctx context.Context, b sol.BMC) error { return b.PowerOn(ctx) }},
		{"open console", func(ctx context.Context, b sol.BMC) error {
			c, err := b.OpenConsole(ctx)
			if err == nil {
				c.Close()
			}
			return err
		}},
	}
	for _, fc := range cases {
		t.Run(fc.Name, func(t *testing.T) {
			t.Parallel()
			b := newBMC(t, fc.Info)
			hostPort := net.JoinHostPort(fc.Info.Addr, strconv.Itoa(fc.Info.Port))
			for _, op := range ops {
				ctx, cancel := context.WithTimeout(context.Background(), faultCall)
				start := time.Now()
				err := op.run(ctx, b)
				took := time.Since(start)
				cancel()
				var e *sol.Error
				switch {
				case err == nil:
					t.Errorf("%s: got success, want %v", op.name, fc.Want)
				case !errors.As(err, &e):
					t.Errorf("%s: got %v, want a *sol.Error", op.name, err)
				case e.Fault != fc.Want:
					t.Errorf("%s: got fault %q (%v), want %q", op.name, e.Fault, err, fc.Want)
				case !strings.Contains(err.Error(), hostPort):
					t.Errorf("%s: got %q, want the detail to name %s", op.name, err, hostPort)
				}
				if got := sol.TenantText(err); got != fc.Want.String() {
					t.Errorf("%s: tenant text: got %q, want %q", op.name, got, fc.Want)
				}
				if took > faultBound {
					t.Errorf("%s: took %v, want within %v", op.name, took, faultBound)
				}
			}
		})
	}
}
