package ipmitool

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

func TestNew(t *testing.T) {
	cipher := func(c int) *int { return &c }
	tests := []struct {
		name    string
		info    sol.Info
		cfg     Config
		wantErr bool
		args    string
	}{
		{name: "defaults: suite 17 first", info: sol.Info{Addr: "10.0.0.5", User: "root", Pass: "x"},
			args: "-I lanplus -C 17 -H 10.0.0.5 -p 623 -U root -E -e ~ power status"},
		{name: "cipher order", info: sol.Info{Addr: "h", User: "u"}, cfg: Config{Options: sol.IPMIOptions{CipherOrder: []int{3, 17}}},
			args: "-I lanplus -C 3 -H h -p 623 -U u -E -e ~ power status"},
		{name: "explicit", info: sol.Info{Addr: "bmc.example", Port: 6230, User: "u", Pass: "x", Cipher: cipher(17)},
			cfg:  Config{Escape: '&'},
			args: "-I lanplus -C 17 -H bmc.example -p 6230 -U u -E -e & power status"},
		{name: "cipher -1 is unset", info: sol.Info{Addr: "h", Cipher: cipher(-1)},
			args: "-I lanplus -C 17 -H h -p 623 -E -e ~ power status"},
		{name: "lan has no cipher", info: sol.Info{Addr: "h", User: "u", Interface: "lan"},
			args: "-I lan -H h -p 623 -U u -E -e ~ power status"},
		{name: "no address", info: sol.Info{User: "u"}, wantErr: true},
		{name: "address like a flag", info: sol.Info{Addr: "-P"}, wantErr: true},
		{name: "address with space", info: sol.Info{Addr: "a b"}, wantErr: true},
		{name: "bad port", info: sol.Info{Addr: "h", Port: 70000}, wantErr: true},
		{name: "bad cipher", info: sol.Info{Addr: "h", Cipher: cipher(-2)}, wantErr: true},
		{name: "local interface", info: sol.Info{Addr: "h", Interface: "open"}, wantErr: true},
		{name: "escape is a command", info: sol.Info{Addr: "h"}, cfg: Config{Escape: '.'}, wantErr: true},
		{name: "escape is CR", info: sol.Info{Addr: "h"}, cfg: Config{Escape: '\r'}, wantErr: true},
		{name: "cipher order twice", info: sol.Info{Addr: "h"}, cfg: Config{Options: sol.IPMIOptions{CipherOrder: []int{3, 3}}}, wantErr: true},
		{name: "cipher order out of range", info: sol.Info{Addr: "h"}, cfg: Config{Options: sol.IPMIOptions{CipherOrder: []int{256}}}, wantErr: true},
		{name: "sol_enable sometimes", info: sol.Info{Addr: "h"}, cfg: Config{Options: sol.IPMIOptions{SOLEnable: "sometimes"}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New("n", tt.info, tt.cfg, nil)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New: got error %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				if tt.info.Pass != "" && strings.Contains(err.Error(), tt.info.Pass) {
					t.Errorf("error %q contains the password", err)
				}
				return
			}
			suite := b.cipher
			if suite < 0 {
				suite = b.opts.CipherOrder[0] // negotiated: the first tried
			}
			if got := strings.Join(b.args(suite, "power", "status"), " "); got != tt.args {
				t.Errorf("args: got %q, want %q", got, tt.args)
			}
			if env := b.env(); !slices.Contains(env, "IPMI_PASSWORD="+tt.info.Pass) || len(env) != 3 {
				t.Errorf("env: got %d variables, want PATH, LC_ALL and IPMI_PASSWORD", len(env))
			}
		})
	}
}

func TestBadBootDevice(t *testing.T) {
	// A binary that does not exist proves that nothing is run.
	b, err := New("n", sol.Info{Addr: "127.0.0.1"}, Config{Path: "/nonexistent/ipmitool"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"floppy", "", "PXE", "A", "disk options=persistent"} {
		if err := b.SetBootDevice(context.Background(), dev, false); !errors.Is(err, sol.ErrBadBootDevice) {
			t.Errorf("SetBootDevice(%q): got %v, want ErrBadBootDevice", dev, err)
		}
	}
}

func TestPowerErrors(t *testing.T) {
	ipmisim.Require(t, "ipmitool", "ipmi_sim", "socat")
	s := ipmisim.Start(t)
	info := s.Info()
	info.Pass = "wrong-password-77"
	b, err := New("node-1", info, testConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.PowerStatus(context.Background())
	if err == nil {
		t.Fatal("PowerStatus with a wrong password: got nil error")
	}
	// The caller (commands) names the operation and the node; the driver's
	// error is what ipmitool said.
	if msg := err.Error(); !strings.Contains(msg, "RMCP+ session") || strings.Contains(msg, info.Pass) {
		t.Errorf("error: got %q, want ipmitool's first stderr line and no password", msg)
	}
	t.Logf("wrong password: %v", err)
	noChildren(t)
}

// TestPowerTimeout: a BMC that never answers is bounded by ctx, and the
// killed ipmitool is reaped.
func TestPowerTimeout(t *testing.T) {
	ipmisim.Require(t, "ipmitool")
	b := silentBMC(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.PowerOn(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("PowerOn: got %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("PowerOn returned after %v, want about 300ms", d)
	}
	noChildren(t)
}

// TestFaults: a wrong password, a silent BMC and a closed port are each
// classified, for power and console alike (ipmitool reports the first two
// alike; the driver's probe tells them apart, and ends a call to a closed
// port early).
func TestFaults(t *testing.T) {
	s, _ := startSim(t)
	soltest.RunFaults(t, func(t *testing.T, info sol.Info) sol.BMC {
		b, err := New("node-1", info, testConfig(), testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, ipmisim.FaultCases(t, s))
}
