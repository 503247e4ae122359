// Package ipmisim runs OpenIPMI's ipmi_sim on loopback for tests and
// benchmarks: a real IPMI v2.0 BMC.
//
// It listens on 127.0.0.1 (or ::1): a real IPMI v2.0 (RMCP+) BMC with a
// power hook that records every chassis action, and a SOL port backed by a
// pty pair whose host end the test reads and writes as the node's serial
// port.
//
// Each Sim has its own directory, UDP port and tty names (ipmi_sim takes a
// UUCP lock named after the SOL tty), so sims run in parallel.
package ipmisim

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
)

// RequireEnv is the variable that turns a missing dependency from a skip
// into a failure (CI sets it to 1).
const RequireEnv = soltest.RequireEnv

// Credentials of the simulated BMC's admin user.
const (
	User = "admin"
	Pass = "sim-password-9f3c" // distinctive, so leak tests can grep for it
)

// Require skips t when the named programs are missing, or fails it when
// RequireEnv is 1.
func Require(t testing.TB, programs ...string) {
	t.Helper()
	soltest.External(t, strings.Join(programs, ", "))
	var missing []string
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return
	}
	soltest.Missing(t, "missing %s (apt-get install -y ipmitool openipmi socat openssh-client sshpass haproxy)", strings.Join(missing, ", "))
}

// Sim is one running ipmi_sim with its serial pty.
type Sim struct {
	Host string // the loopback address it listens on: 127.0.0.1, or ::1 (StartOn)
	Port int    // UDP port on Host
	Dir  string // working directory: config, state, action log

	tag   string
	fixed bool // Port was asked for: never pick another
	socat *exec.Cmd
	host  *os.File // host end of the serial line

	mu      sync.Mutex
	proc    *exec.Cmd
	exited  chan struct{} // closed when proc exits
	killed  bool          // Kill was called for the current proc
	serial  bytes.Buffer  // bytes that reached the host's serial port (typed keys)
	readErr error
	readers sync.WaitGroup
}

// Start launches a simulator and registers its shutdown with t.Cleanup. The
// simulated machine starts powered on. If ipmi_sim dies on its own while the
// test runs, the cleanup reports it as a test failure.
func Start(t testing.TB) *Sim {
	t.Helper()
	return StartAt(t, 0)
}

// StartAt is Start on a given UDP port (0: a free one), for examples that
// name the port; it fails t if the port is taken.
func StartAt(t testing.TB, port int) *Sim {
	t.Helper()
	return startOn(t, "127.0.0.1", port)
}

// StartOn is Start on host, a loopback address: "127.0.0.1", or "::1" (it
// fails, or skips without OBMD_REQUIRE_INTEGRATION, where ::1 is missing).
func StartOn(t testing.TB, host string) *Sim {
	t.Helper()
	if c, err := net.ListenPacket("udp", net.JoinHostPort(host, "0")); err != nil {
		soltest.Missing(t, "no loopback address %s: %v", host, err)
	} else {
		c.Close()
	}
	return startOn(t, host, 0)
}

// startOn is StartAt on host.
func startOn(t testing.TB, host string, port int) *Sim {
	t.Helper()
	Require(t, "ipmi_sim", "socat")
	s, err := start(t.TempDir(), host, port)
	if err != nil {
		t.Fatalf("start ipmi_sim on port %d: %v", port, err)
	}
	t.Cleanup(func() {
		if died := s.stop(); died != "" {
			t.Errorf("ipmi_sim died during the test: %s", died)
		}
	})
	return s
}

// StartProcess launches a simulator in dir (an existing, empty directory)
// for programs that have no testing.TB, such as the benchmarks. Close ends
// it; the caller removes dir.
func StartProcess(dir string) (*Sim, error) {
	if _, err := exec.LookPath("ipmi_sim"); err != nil {
		return nil, fmt.Errorf("start ipmi_sim: %w", err)
	}
	if _, err := exec.LookPath("socat"); err != nil {
		return nil, fmt.Errorf("start ipmi_sim: %w", err)
	}
	return start(dir, "127.0.0.1", 0)
}

// Close ends the simulator and its serial pty (for StartProcess). It
// returns an error if ipmi_sim had died on its own.
func (s *Sim) Close() error {
	if died := s.stop(); died != "" {
		return fmt.Errorf("ipmi_sim died: %s", died)
	}
	return nil
}

// start runs a simulator in dir on host and port, or on a free port if
// port is 0.
func start(dir, host string, port int) (*Sim, error) {
	b := make([]byte, 4)
	rand.Read(b)
	s := &Sim{Host: host, Dir: dir, tag: hex.EncodeToString(b), Port: port, fixed: port != 0}
	if err := s.writeConfig(); err != nil {
		return nil, err
	}
	// The pty pair: ipmi_sim opens sol-<tag>; the test holds host-<tag>.
	s.socat = exec.Command("socat",
		"pty,link="+s.path("sol-"+s.tag)+",raw,echo=0",
		"pty,link="+s.path("host-"+s.tag)+",raw,echo=0")
	s.socat.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.socat.Start(); err != nil {
		return nil, fmt.Errorf("start socat: %w", err)
	}
	if err := waitFile(s.path("host-"+s.tag), 5*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	tty, err := os.OpenFile(s.path("host-"+s.tag), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("open host tty: %w", err)
	}
	s.host = tty
	s.readers.Add(1)
	go s.readSerial() // ends when stop closes host
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if lastErr = s.launch(); lastErr == nil {
			return s, nil
		}
	}
	s.stop()
	return nil, lastErr
}

// launch picks a free port (first start only) and starts ipmi_sim on it,
// waiting until the port answers.
func (s *Sim) launch() error {
	if s.Port == 0 {
		port, err := freeUDPPort(s.Host)
		if err != nil {
			return err
		}
		s.Port = port
		if err := s.writeConfig(); err != nil {
			return err
		}
	}
	os.RemoveAll(s.path("state"))
	if err := os.MkdirAll(s.path("state"), 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	log, err := os.Create(s.path("ipmi_sim.log"))
	if err != nil {
		return fmt.Errorf("ipmi_sim log: %w", err)
	}
	cmd := exec.Command("ipmi_sim", "-n", "-c", s.path("lan.conf"), "-f", s.path("bmc.emu"), "-s", s.path("state"))
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start ipmi_sim: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(exited) }() // owned by the Sim: stop waits on exited
	s.mu.Lock()
	s.proc, s.exited, s.killed = cmd, exited, false
	s.mu.Unlock()
	if err := waitAnswer(s.Host, s.Port, exited, 5*time.Second); err != nil {
		s.Kill()
		if !s.fixed {
			s.Port = 0 // maybe someone else took the port: pick another
		}
		return err
	}
	return nil
}

func (s *Sim) writeConfig() error {
	hook := s.path("hook.sh")
	files := map[string]string{
		"lan.conf": fmt.Sprintf(lanConf, s.tag, s.Host, s.Port, hook, s.Dir, s.path("sol-"+s.tag), User, Pass),
		"bmc.emu":  bmcEmu,
		"hook.sh":  hookScript,
		"power":    "1\n",
	}
	for name, body := range files {
		mode := os.FileMode(0o600)
		if name == "hook.sh" {
			mode = 0o700
		}
		if name == "power" {
			if _, err := os.Stat(s.path(name)); err == nil {
				continue // keep power state across restarts
			}
		}
		if err := os.WriteFile(s.path(name), []byte(body), mode); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

func (s *Sim) path(name string) string { return filepath.Join(s.Dir, name) }

// Info is how obmd reaches this BMC (cipher suite 3, as ipmi_sim needs).
func (s *Sim) Info() sol.Info {
	c := 3
	return sol.Info{Addr: s.Host, Port: s.Port, User: User, Pass: Pass, Cipher: &c}
}

// Actions returns every chassis action the power hook recorded, in order:
// "power 0", "power 1", "reset 1", "shutdown 1", "boot pxe", ...
func (s *Sim) Actions() []string {
	data, _ := os.ReadFile(s.path("actions"))
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// PowerOn reports the simulated machine's power state.
func (s *Sim) PowerOn() bool {
	data, _ := os.ReadFile(s.path("power"))
	return strings.TrimSpace(string(data)) == "1"
}

// Kind says which BMC this is, for the conformance table's per-BMC
// expectations.
func (s *Sim) Kind() soltest.Kind { return soltest.IPMISim }

// Reset makes the simulated machine look fresh to the power table: powered
// on, with no action recorded. It does not touch ipmi_sim itself, so tests
// that share one Sim call it between cases.
func (s *Sim) Reset() error {
	if err := os.WriteFile(s.path("power"), []byte("1\n"), 0o600); err != nil {
		return fmt.Errorf("reset power: %w", err)
	}
	if err := os.Remove(s.path("actions")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reset actions: %w", err)
	}
	return nil
}

// ResetSerial forgets what reached the serial port so far, for tests that
// share one Sim between console cases.
func (s *Sim) ResetSerial() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serial.Reset()
}

// WriteSerial prints p on the node's serial port, as the host OS would.
// ipmi_sim forwards it to the active SOL session (or drops it if none).
func (s *Sim) WriteSerial(p []byte) error {
	_, err := s.host.Write(p)
	return err
}

// Serial returns every byte that reached the node's serial port so far (what
// SOL users typed).
func (s *Sim) Serial() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.serial.Bytes())
}

// WaitSerial waits until the serial port has received want, or fails t
// (soltest.WaitSerial).
func (s *Sim) WaitSerial(t testing.TB, want []byte, timeout time.Duration) {
	t.Helper()
	soltest.WaitSerial(t, s, want, timeout)
}

func (s *Sim) readSerial() {
	defer s.readers.Done()
	buf := make([]byte, 4096)
	for {
		n, err := s.host.Read(buf)
		s.mu.Lock()
		s.serial.Write(buf[:n])
		if err != nil {
			s.readErr = err
		}
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Kill ends ipmi_sim with SIGKILL (a BMC that vanishes), leaving the serial
// pty in place. Restart brings it back on the same port.
func (s *Sim) Kill() {
	s.mu.Lock()
	proc, exited := s.proc, s.exited
	s.killed = true
	s.mu.Unlock()
	if proc == nil {
		return
	}
	proc.Process.Kill()
	<-exited
	// ipmi_sim's UUCP lock would make the next start fail to open the tty.
	os.Remove("/var/lock/LCK..sol-" + s.tag)
}

// Restart starts ipmi_sim again on the same port after Kill.
func (s *Sim) Restart() error {
	return s.launch()
}

// Alive reports whether ipmi_sim is running.
func (s *Sim) Alive() bool {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// stop ends everything; it returns a description if ipmi_sim had died on
// its own (not through Kill).
func (s *Sim) stop() (died string) {
	s.mu.Lock()
	proc, exited, killed := s.proc, s.exited, s.killed
	s.mu.Unlock()
	if proc != nil {
		select {
		case <-exited:
			if !killed {
				log, _ := os.ReadFile(s.path("ipmi_sim.log"))
				died = fmt.Sprintf("%v; log: %s", proc.ProcessState, tail(log, 500))
			}
		default:
		}
		s.Kill()
	}
	if s.host != nil {
		s.host.Close()
	}
	if s.socat != nil && s.socat.Process != nil {
		s.socat.Process.Kill()
		s.socat.Wait()
	}
	s.readers.Wait()
	return died
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func freeUDPPort(host string) (int, error) {
	c, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("pick a UDP port: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

func waitFile(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v", path, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rmcpPing is an ASF presence ping; an RMCP endpoint answers with a pong.
var rmcpPing = []byte{0x06, 0x00, 0xff, 0x06, 0x00, 0x00, 0x11, 0xbe, 0x80, 0x00, 0x00, 0x00}

// waitAnswer pings the port until the BMC answers, ipmi_sim exits, or timeout.
func waitAnswer(host string, port int, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return errors.New("ipmi_sim exited during start (see ipmi_sim.log)")
		default:
		}
		if ping(host, port) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ipmi_sim on UDP port %d did not answer within %v", port, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ping(host string, port int) bool {
	c, err := net.Dial("udp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Write(rmcpPing); err != nil {
		return false
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return err == nil && n > 0
}

const lanConf = `name "bmcsim%s"
set_working_mc 0x20
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "%s %s"
  sol "%s" 115200
  user 1 false ""      "unused"   user  10 none md2 md5 straight
  user 2 true  "%s" "%s" admin 10 none md2 md5 straight
`

const bmcEmu = `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02
sel_enable 0x20 1000 0x0a
mc_enable 0x20
`

// hookScript is ipmi_sim's chassis_control program: "DIR get power" prints
// the state; every "set" is appended to DIR/actions.
const hookScript = `#!/bin/sh
dir=$1; shift
case "$1 $2" in
"get power") echo "power:$(cat "$dir/power" 2>/dev/null || echo 1)" ;;
"get "*) ;;
"set power") echo "$3" > "$dir/power"; echo "power $3" >> "$dir/actions" ;;
"set reset") echo "reset $3" >> "$dir/actions" ;;
"set shutdown") echo "0" > "$dir/power"; echo "shutdown $3" >> "$dir/actions" ;;
"set "*) shift; echo "$*" >> "$dir/actions" ;;
esac
exit 0
`
