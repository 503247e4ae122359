package goipmisrv

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/bougou/go-ipmi/pkg/vmproto"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/rmcp"
)

// vmClient is the test's in-band line to the BMC: goipmi-server's OpenIPMI
// VM socket (the system interface: no session, no LAN), one request at a
// time.
type vmClient struct {
	mu   sync.Mutex
	conn net.Conn
	c    *vmproto.Client
}

func dialVM(path string) (*vmClient, error) {
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("VM socket: %w", err)
	}
	return &vmClient{conn: conn, c: vmproto.NewClient(conn, 5*time.Second)}, nil
}

// IPMI net functions and commands used in-band.
const (
	netFnChassis      = 0x00
	cmdChassisStatus  = 0x01
	cmdChassisControl = 0x02
	cmdSetBootOptions = 0x08
	cmdGetBootOptions = 0x09
	bootParamFlags    = 0x05
	controlPowerUp    = 0x01
)

func (v *vmClient) command(netFn, cmd byte, data ...byte) ([]byte, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	cc, resp, err := v.c.Command(netFn, cmd, data...)
	if err != nil {
		return nil, fmt.Errorf("VM command %#x/%#x: %w", netFn, cmd, err)
	}
	if cc != 0 {
		return nil, fmt.Errorf("VM command %#x/%#x: completion code %#x", netFn, cmd, cc)
	}
	return resp, nil
}

func (v *vmClient) close() { v.conn.Close() }

// Reset makes the machine look fresh to the power table: powered on, no
// boot flags, and no action recorded (Actions counts from here). It goes
// in-band, so it adds nothing to Actions.
func (s *Server) Reset() error {
	if _, err := s.vm.command(netFnChassis, cmdChassisControl, controlPowerUp); err != nil {
		return fmt.Errorf("reset power: %w", err)
	}
	if _, err := s.vm.command(netFnChassis, cmdSetBootOptions, bootParamFlags, 0, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("reset boot flags: %w", err)
	}
	s.mu.Lock()
	s.mark = len(s.trace)
	s.mu.Unlock()
	return nil
}

// Actions lists, oldest first, the Chassis Control commands that reached
// the BMC over the LAN and succeeded since the last Reset, by the name the
// server's trace gives them ("Chassis Control"): the trace does not show a
// command's data, and boot options are checked by Boot instead (drivers
// send them in different numbers).
func (s *Server) Actions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.trace[s.mark:] {
		if c.name == "Chassis Control" && c.user != "-" && c.cc == 0 {
			out = append(out, c.name)
		}
	}
	return out
}

// PowerOn reads the machine's power state in-band (Get Chassis Status). A
// failure reads as off.
func (s *Server) PowerOn() bool {
	resp, err := s.vm.command(netFnChassis, cmdChassisStatus)
	return err == nil && len(resp) > 0 && resp[0]&0x01 != 0
}

// bootDevices maps the boot device selector (boot flags byte 2, bits 5:2)
// to obmd's names.
var bootDevices = map[byte]string{
	0x0: sol.BootNone,
	0x1: sol.BootPXE,
	0x2: sol.BootDisk,
	0x5: sol.BootCDROM,
	0x6: sol.BootBIOS,
}

// Boot reads the boot flags in-band (Get System Boot Options, parameter 5):
// the device they select ("" when the flags are not valid) and whether
// they persist.
func (s *Server) Boot() (dev string, persistent bool, err error) {
	resp, err := s.vm.command(netFnChassis, cmdGetBootOptions, bootParamFlags, 0, 0)
	if err != nil {
		return "", false, err
	}
	if len(resp) < 4 { // version, selector, flags...
		return "", false, fmt.Errorf("boot flags: short answer % x", resp)
	}
	flags := resp[2:]
	if flags[0]&0x80 == 0 {
		return "", false, nil
	}
	d, ok := bootDevices[(flags[1]>>2)&0x0f]
	if !ok {
		return "", false, fmt.Errorf("boot flags: unknown device selector in % x", flags)
	}
	return d, flags[0]&0x40 != 0, nil
}

// waitPong pings 127.0.0.1:port until the BMC answers through the relay.
func waitPong(port int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := rmcp.Ping(pctx, "127.0.0.1", port)
		pcancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("goipmi-server on UDP port %d did not answer within %v: %w", port, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
