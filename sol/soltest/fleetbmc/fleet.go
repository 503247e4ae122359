// Package fleetbmc runs many simulated IPMI v2.0 BMCs in one process, for
// fleet-scale tests and benchmarks on loopback.
//
// Each BMC is go-ipmi's own BMC (pkg/bmc and pkg/server, the code
// goipmi-server runs): RMCP+ session setup with cipher suites 3 and 17
// (RAKP, HMAC-SHA1/SHA256, AES-CBC-128), Chassis Control and boot options,
// SOL activation and the SOL payload with its sequence numbers,
// acknowledgements and retries. It listens on a UDP socket of its own on
// 127.0.0.1 and drives an in-memory machine: a power state and boot flags
// that chassis commands change (recorded in ipmi_sim's words), and a
// serial line that carries what the node prints at the line's baud rate
// into a UART buffer of fixed size, losing what overflows it (see line).
//
// ipmi_sim is one process per BMC and goipmi-server one namespace per BMC;
// a Fleet of a thousand costs one socket, a few goroutines and tens of KiB
// per BMC. The driver conformance tables (sol/soltest/bmcs) run on it
// beside ipmi_sim and goipmi-server, so it answers obmd's drivers and
// ipmitool as they do.
package fleetbmc

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/bougou/go-ipmi/pkg/bmc"
	"github.com/bougou/go-ipmi/pkg/clock"
	"github.com/bougou/go-ipmi/pkg/hal/mock"
	"github.com/bougou/go-ipmi/pkg/server"
	"github.com/bougou/go-ipmi/pkg/transport/udp"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
)

// Credentials of every BMC's user, an administrator on LAN channel 1.
const (
	User   = "admin"
	UserID = "2"
	Pass   = "fleet-password-5b2e" // distinctive, so leak tests can grep for it
)

// Defaults of Options.
const (
	DefaultBaud       = 115200
	DefaultUARTBuffer = 4096
	DefaultMaxTyped   = 1 << 20
	// DefaultSOLRetries and DefaultSOLRetryInterval are the SOL retry
	// parameters (IPMI v2.0 table 26-5, parameter 4) a fleet BMC starts
	// with: an unacknowledged SOL packet is resent this many times, this
	// long apart, then dropped (and the loss flagged), as by the BMCs
	// ipmitool's `sol info` commonly shows (7 retries, 500 ms). go-ipmi's
	// own default, 3 x 50 ms, drops output whenever a console is 200 ms late.
	DefaultSOLRetries       = 7
	DefaultSOLRetryInterval = 500 * time.Millisecond
)

// Options configure a Fleet.
type Options struct {
	// BMCs is how many BMCs to run (at least 1).
	BMCs int
	// Baud is the serial lines' rate (DefaultBaud when 0).
	Baud int
	// UARTBuffer is how many bytes a BMC's UART holds before what arrives
	// is lost (DefaultUARTBuffer when 0); go-ipmi's BMC buffers another 4
	// KiB of its own.
	UARTBuffer int
	// MaxTyped bounds the typed input each BMC keeps for Serial
	// (DefaultMaxTyped when 0); more is accepted and counted only.
	MaxTyped int
	// SOLRetries (at most 7) and SOLRetryInterval (10 ms to 2.55 s) are
	// the BMCs' SOL retry parameters (defaults DefaultSOLRetries and
	// DefaultSOLRetryInterval).
	SOLRetries       int
	SOLRetryInterval time.Duration
	// CipherSuites are the RMCP+ suites offered (nil: 3 and 17).
	CipherSuites []int
	// Echo makes each node print back what is typed into it, as a shell
	// at a prompt does.
	Echo bool
}

// Fleet is a set of running BMCs.
type Fleet struct {
	bmcs   []*BMC
	cancel context.CancelFunc
	wg     sync.WaitGroup // one Serve loop per BMC
}

// BMC is one simulated BMC and its machine.
type BMC struct {
	// Port is its UDP port on 127.0.0.1.
	Port int

	srv *server.Server
	bmc *bmc.BMC
	m   *machine
}

// Start starts o.BMCs BMCs, each on a UDP port of its own on 127.0.0.1,
// their machines powered on. Close ends them.
func Start(o Options) (*Fleet, error) {
	if o.BMCs < 1 {
		return nil, fmt.Errorf("fleet of %d BMCs: want at least 1", o.BMCs)
	}
	if o.Baud == 0 {
		o.Baud = DefaultBaud
	}
	if o.UARTBuffer == 0 {
		o.UARTBuffer = DefaultUARTBuffer
	}
	if o.MaxTyped == 0 {
		o.MaxTyped = DefaultMaxTyped
	}
	if o.SOLRetries == 0 {
		o.SOLRetries = DefaultSOLRetries
	}
	if o.SOLRetryInterval == 0 {
		o.SOLRetryInterval = DefaultSOLRetryInterval
	}
	retry10ms := o.SOLRetryInterval / (10 * time.Millisecond)
	if o.SOLRetries < 0 || o.SOLRetries > 7 || retry10ms < 1 || retry10ms > 255 {
		return nil, fmt.Errorf("SOL retries %d every %v: want 0-7 every 10ms-2.55s", o.SOLRetries, o.SOLRetryInterval)
	}
	suites := []types.CipherSuiteID{3, 17}
	if o.CipherSuites != nil {
		suites = suites[:0]
		for _, s := range o.CipherSuites {
			id := types.CipherSuiteID(s)
			if !bmc.SupportedCipherSuite(id) {
				return nil, fmt.Errorf("cipher suite %d: go-ipmi's BMC does not implement it", s)
			}
			suites = append(suites, id)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fleet{cancel: cancel}
	for range o.BMCs {
		b, err := newBMC(o, suites)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.bmcs = append(f.bmcs, b)
		f.wg.Go(func() { b.srv.Serve(ctx) })
	}
	return f, nil
}

func newBMC(o Options, suites []types.CipherSuiteID) (*BMC, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("fleet BMC socket: %w", err)
	}
	m := &machine{HAL: mock.New(), line: newLine(o.Baud, o.UARTBuffer, o.MaxTyped, o.Echo, time.Now), on: true}
	info := bmc.DeviceInfo{DeviceID: 32, DeviceRevision: 1, FirmwareMajor: 1, IPMIVersion: 0x20,
		ManufacturerID: 0x000157, ProductID: 0x0001, AdditionalDeviceSupport: 0x39}
	var guid [16]byte
	copy(guid[:], "obmd-fleetbmc")
	b := bmc.New(info, guid, m, bmc.WithClock(clock.Real), bmc.WithCipherSuites(suites), bmc.WithV15Disabled())
	u, err := b.Users.Add(2, User)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("fleet BMC user: %w", err)
	}
	u.SetPassword([]byte(Pass))
	u.Enabled = true
	u.ChannelAccess[1] = bmc.UserChannelAccess{MaxPrivilege: bmc.PrivilegeLevelAdministrator, Enabled: true}
	const solRetryParam = 4
	if cc := b.SOL.Config().SetParam(solRetryParam, []byte{byte(o.SOLRetries), byte(o.SOLRetryInterval / (10 * time.Millisecond))}); cc != types.CodeOK {
		conn.Close()
		return nil, fmt.Errorf("fleet BMC SOL retry parameters: completion code %#x", uint8(cc))
	}
	return &BMC{
		Port: conn.LocalAddr().(*net.UDPAddr).Port,
		srv:  server.NewServer(b, udp.Wrap(conn)),
		bmc:  b,
		m:    m,
	}, nil
}

// Len is how many BMCs the fleet runs.
func (f *Fleet) Len() int { return len(f.bmcs) }

// BMC returns the i-th BMC (0 <= i < Len).
func (f *Fleet) BMC(i int) *BMC { return f.bmcs[i] }

// Close stops every BMC and waits for their loops.
func (f *Fleet) Close() {
	f.cancel()
	for _, b := range f.bmcs {
		b.srv.Close()
	}
	f.wg.Wait()
}

// Print queues p on the node's serial line (see line.Print: p is kept,
// not copied, until transmitted).
func (b *BMC) Print(p []byte) { b.m.line.Print(p) }

// Deactivate ends the BMC's SOL activation, if any, as `ipmitool sol
// deactivate` would (a console whose process died leaves it active).
func (b *BMC) Deactivate() { b.bmc.SOL.CloseAll() }

// Line reports what the node's serial line has carried.
func (b *BMC) Line() Stats { return b.m.line.stats() }

// Kind says which BMC this is (soltest.Observer).
func (b *BMC) Kind() soltest.Kind { return soltest.FleetBMC }

// Info is how obmd reaches the BMC: 127.0.0.1, its port, the user, no
// cipher suite pinned.
func (b *BMC) Info() sol.Info {
	return sol.Info{Addr: "127.0.0.1", Port: b.Port, User: User, Pass: Pass}
}

// WrongPassword is Info with a password the BMC refuses.
func (b *BMC) WrongPassword() sol.Info {
	i := b.Info()
	i.Pass = "fleet-wrong-pass"
	return i
}

// Actions lists, oldest first, the chassis actions since the last Reset
// in ipmi_sim's words: "power 0", "power 1" (a cycle records both),
// "shutdown 1" (soft off), "reset 1", and a boot device set valid as
// "boot pxe", "boot default" (disk), "boot bios", "boot cdrom", "boot
// none".
func (b *BMC) Actions() []string {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	return append([]string(nil), b.m.actions...)
}

// PowerOn reports the machine's power state.
func (b *BMC) PowerOn() bool {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	return b.m.on
}

// Boot returns the device the boot flags select ("" when they are not
// valid) and whether they persist (soltest.BootObserver).
func (b *BMC) Boot() (dev string, persistent bool, err error) {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	f := b.m.flags
	if f == nil || !f.BootFlagsValid {
		return "", false, nil
	}
	d, ok := bootDevices[f.BootDeviceSelector]
	if !ok {
		return "", false, fmt.Errorf("boot flags select device %#x", f.BootDeviceSelector)
	}
	return d, f.Persist, nil
}

// Reset powers the machine on, clears its boot flags and forgets its
// recorded actions.
func (b *BMC) Reset() error {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	b.m.on, b.m.flags, b.m.actions = true, nil, nil
	return nil
}

// WriteSerial prints p on the node's serial port (a copy of it).
func (b *BMC) WriteSerial(p []byte) error {
	b.m.line.Print(bytes.Clone(p))
	return nil
}

// Serial returns the bytes typed into the node's serial port so far.
func (b *BMC) Serial() []byte { return b.m.line.Typed() }

// ResetSerial forgets what was typed.
func (b *BMC) ResetSerial() { b.m.line.forgetTyped() }
