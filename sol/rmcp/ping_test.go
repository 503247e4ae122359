package rmcp_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/obmd/obmd/sol/rmcp"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/bmcs"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestPing: both BMCs answer a presence ping; a silent port does not, and
// a closed one fails at once with ECONNREFUSED.
func TestPing(t *testing.T) {
	bmcs.Each(t, func(t *testing.T, m soltest.Machine) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := rmcp.Ping(ctx, "127.0.0.1", m.Info().Port); err != nil {
			t.Errorf("ping %s: %v", m.Kind(), err)
		}
	})
	silent := ipmisim.Silent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if err := rmcp.Ping(ctx, silent.Addr, silent.Port); err == nil {
		t.Error("ping a silent port: got nil error")
	}
	closed := ipmisim.Closed(t)
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := rmcp.Ping(ctx, closed.Addr, closed.Port)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("ping a closed port: got %v, want ECONNREFUSED", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("ping a closed port took %v, want it at once", d)
	}
}
