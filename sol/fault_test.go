package sol_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/obmd/obmd/sol"
)

// TestTenantText: what a tenant reads of an error is its classification or
// a sentinel's own text, never the detail a driver wrapped around it.
func TestTenantText(t *testing.T) {
	detail := errors.New("connect to BMC 192.0.2.5:623 as root: RAKP2 mismatch")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"credentials", sol.NewError(sol.FaultCredentials, detail), "the BMC refused obmd's credentials"},
		{"no answer", sol.NewError(sol.FaultNoAnswer, detail), "the BMC did not answer"},
		{"unreachable", sol.NewError(sol.FaultUnreachable, detail), "the BMC is unreachable"},
		{"rejected", sol.NewError(sol.FaultRejected, detail), "the BMC rejected the request"},
		{"rejected with code", &sol.Error{Fault: sol.FaultRejected, Code: 0xc1, Err: detail}, "the BMC rejected the request (completion code 0xc1)"},
		{"unknown", sol.NewError(sol.FaultUnknown, detail), "the BMC operation failed"},
		{"certificate", sol.NewError(sol.FaultCertificate, detail), "the BMC's TLS certificate is not trusted"},
		{"not reached", sol.NewError(sol.FaultNotReached, detail), "the node did not reach the requested state in time"},
		{"no console", fmt.Errorf("open SOL on 192.0.2.5: %w", sol.ErrNoConsole), "this node has no serial console"},
		{"cipher", &sol.Error{Fault: sol.FaultCipher, Suites: []int{17}, Err: detail}, "the BMC refused IPMI cipher suite 17"},
		{"ciphers", &sol.Error{Fault: sol.FaultCipher, Suites: []int{17, 3, 2}, Err: detail}, "the BMC refused IPMI cipher suites 17, 3 and 2"},
		{"cipher unnamed", sol.NewError(sol.FaultCipher, detail), "the BMC refused the IPMI cipher suite"},
		{"SOL disabled", fmt.Errorf("open console of n1: %w", &sol.Error{Fault: sol.FaultRejected, Code: 0x81, Err: fmt.Errorf("BMC 192.0.2.5:623: %w", sol.ErrSOLDisabled)}), sol.ErrSOLDisabled.Error()},
		{"wrapped twice", fmt.Errorf("open console of n1: %w", sol.NewError(sol.FaultNoAnswer, detail)), "the BMC did not answer"},
		{"sentinel with detail", fmt.Errorf("activate SOL on 192.0.2.5: %w", sol.ErrPayloadActive), sol.ErrPayloadActive.Error()},
		{"break mid-line", fmt.Errorf("send break on n1: %w", sol.ErrBreakMidLine), sol.ErrBreakMidLine.Error()},
		{"hub error", sol.ErrReadOnly, sol.ErrReadOnly.Error()},
		{"deadline", fmt.Errorf("dial 192.0.2.5: %w", context.DeadlineExceeded), "the BMC did not answer"},
		{"database", fmt.Errorf("verify access to n1: %w: %w", sol.ErrUnverified, context.DeadlineExceeded), "obmd cannot reach its database right now"},
		{"anything else", errors.New("read udp 192.0.2.5:623: connection refused"), "the BMC operation failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sol.TenantText(tt.err)
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if strings.Contains(got, "192.0.2.5") {
				t.Errorf("got %q: holds the address", got)
			}
		})
	}
	// The error's own text keeps the detail, for the log.
	if err := sol.NewError(sol.FaultCredentials, detail); !strings.Contains(err.Error(), "192.0.2.5:623") || !errors.Is(err, detail) {
		t.Errorf("got %q, want the detail kept and unwrappable", err)
	}
}
