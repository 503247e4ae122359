// Package goipmisrv runs go-ipmi's own BMC, goipmi-server, for tests: a
// second IPMI v2.0 implementation beside ipmi_sim.
//
// The server is the version of github.com/bougou/go-ipmi that obmd uses;
// beside OpenIPMI's ipmi_sim (sol/soltest/ipmisim), it brings cipher suites
// up to 17 and SOL on a pty whose other end the test holds as the node's
// serial port.
//
// Each Server runs in a network namespace of its own and is reached on
// 127.0.0.1 through a relay (see netns.go), so it needs root (or
// CAP_SYS_ADMIN); without it, Start skips the test, or fails it when
// OBMD_REQUIRE_INTEGRATION=1. Start also needs the goipmi-server binary
// (Binary).
//
// What the test observes, it observes beside the LAN path under test:
// power and boot flags are read in-band over the server's OpenIPMI VM
// socket (the system interface, no session), and the commands that reached
// the BMC come from its command trace (GOIPMI_SERVER_TRACE).
package goipmisrv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/term"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
)

// Credentials of the BMC's user, an administrator on LAN channel 1.
const (
	User   = "admin"
	UserID = "2"
	Pass   = "gis-password-7c1e" // distinctive, so leak tests can grep for it
)

// Options configure one server.
type Options struct {
	// CipherSuites are the RMCP+ cipher suites the BMC offers
	// (GOIPMI_SERVER_CIPHER_SUITES); nil means goipmi-server's default, 3
	// and 17.
	CipherSuites []int
	// Pass is the user's password (default Pass): a test that needs the
	// BMC to share a password with another service sets it (a Redfish
	// node's IPMI console logs in with the Redfish account's).
	Pass string
}

// Server is one running goipmi-server.
type Server struct {
	// Port is the UDP port on 127.0.0.1 (the relay's, equal to the
	// server's inside its namespace).
	Port int
	// Dir holds the VM socket.
	Dir string

	opts   Options
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	ns     *nsDialer
	relay  *relay
	vm     *vmClient
	host   *os.File       // the system's end of the SOL pty
	pipes  sync.WaitGroup // the stdout and stderr readers; they end with the process
	wg     sync.WaitGroup // the serial reader; it ends when stop closes host

	stopOnce sync.Once
	died     string // set by stop

	mu      sync.Mutex
	serial  bytes.Buffer // bytes typed into the node's serial port
	trace   []command    // LAN commands that changed the machine, see Actions
	mark    int          // trace entries before the last Reset
	lastErr []string     // the last lines of stderr, for failures
}

// command is one traced command.
type command struct {
	name string
	user string // "-" without a session (the VM socket)
	cc   uint8
}

// Start launches a goipmi-server with SOL on a pty and registers its end
// with t.Cleanup; the machine starts powered on (goipmi-server's starts
// off: Start powers it on in-band). If the server dies on its own during
// the test, the cleanup fails the test.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t)
	dir, err := os.MkdirTemp("", "goipmi") // short: a unix socket path has a 108-byte limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := start(bin, dir, opts)
	if errors.Is(err, syscall.EPERM) {
		soltest.Missing(t, "goipmi-server needs a network namespace of its own: %v", err)
	}
	if err != nil {
		t.Fatalf("start goipmi-server: %v", err)
	}
	t.Cleanup(func() {
		if died := s.stop(); died != "" {
			t.Errorf("goipmi-server died during the test: %s", died)
		}
	})
	return s
}

func start(bin, dir string, opts Options) (*Server, error) {
	front, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("relay socket: %w", err)
	}
	s := &Server{Port: front.LocalAddr().(*net.UDPAddr).Port, Dir: dir, opts: opts, exited: make(chan struct{})}
	slave, err := s.launch(bin)
	if err != nil {
		front.Close()
		s.stop()
		return nil, err
	}
	if err := s.connect(front, slave); err != nil {
		front.Close()
		s.stop()
		return nil, err
	}
	return s, nil
}

// launch starts the process in a new network namespace and waits for its
// banner, which names the pty's system end.
func (s *Server) launch(bin string) (slave string, err error) {
	env := []string{
		"PATH=/usr/bin:/bin",
		"GOIPMI_SERVER_PORT=" + strconv.Itoa(s.Port),
		"GOIPMI_SERVER_USER=" + User,
		"GOIPMI_SERVER_PASS=" + s.pass(),
		"GOIPMI_SERVER_CONSOLE=pty",
		"GOIPMI_SERVER_TRACE=1",
		"GOIPMI_SERVER_VM_SOCKET=" + filepath.Join(s.Dir, "vm.sock"),
	}
	if len(s.opts.CipherSuites) > 0 {
		ids := make([]string, len(s.opts.CipherSuites))
		for i, c := range s.opts.CipherSuites {
			ids[i] = strconv.Itoa(c)
		}
		env = append(env, "GOIPMI_SERVER_CIPHER_SUITES="+strings.Join(ids, ","))
	}
	s.cmd = exec.Command(bin)
	s.cmd.Env = env
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	if err := s.cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	banner := make(chan string, 1)
	s.pipes.Add(2)
	go s.readStdout(stdout, banner)
	go s.readStderr(stderr)
	go func() { s.pipes.Wait(); s.cmd.Wait(); close(s.exited) }() // stop waits on exited
	select {
	case slave = <-banner:
		return slave, nil
	case <-s.exited:
		return "", fmt.Errorf("%w: %s", errExited, s.stderrTail())
	case <-time.After(10 * time.Second):
		return "", errors.New("goipmi-server printed no banner within 10s")
	}
}

// connect joins the server's namespace, starts the relay, opens the serial
// pty and the VM socket, powers the machine on and waits until the BMC
// answers through the relay.
func (s *Server) connect(front *net.UDPConn, slave string) error {
	ns, err := newNSDialer(s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	s.ns = ns
	s.relay = newRelay(front, ns)
	host, err := openRaw(slave)
	if err != nil {
		return err
	}
	s.host = host
	s.wg.Add(1)
	go s.readSerial() // ends when stop closes host
	if s.vm, err = dialVM(filepath.Join(s.Dir, "vm.sock")); err != nil {
		return err
	}
	if err := s.Reset(); err != nil {
		return err
	}
	return waitPong(s.Port, 5*time.Second)
}

var (
	bannerSlave = regexp.MustCompile(`console pty slave: (/dev/pts/[0-9]+)`)
	traceLine   = regexp.MustCompile(`trace ("[^"]+"|<unregistered>)\s+netfn=0x[0-9a-f]+ cmd=0x[0-9a-f]+ user=(\S+)\s+priv=\S+\s+cc=0x([0-9a-f]{2})`)
)

func (s *Server) readStdout(r io.Reader, banner chan<- string) {
	defer s.pipes.Done()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := bannerSlave.FindStringSubmatch(sc.Text()); m != nil {
			select {
			case banner <- m[1]:
			default:
			}
		}
	}
}

// readStderr keeps the commands that change the machine (see Actions) and
// the last lines, for failure messages.
func (s *Server) readStderr(r io.Reader) {
	defer s.pipes.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		if m := traceLine.FindStringSubmatch(line); m != nil {
			cc, _ := strconv.ParseUint(m[3], 16, 8)
			if name := strings.Trim(m[1], `"`); name == "Chassis Control" || name == "Set System Boot Options" {
				s.trace = append(s.trace, command{name: name, user: m[2], cc: uint8(cc)})
			}
		} else if !strings.Contains(line, "SOL") {
			s.lastErr = append(s.lastErr, line)
			if len(s.lastErr) > 20 {
				s.lastErr = s.lastErr[1:]
			}
		}
		s.mu.Unlock()
	}
}

func (s *Server) stderrTail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lastErr, "\n")
}

// openRaw opens the pty's system end without making it our controlling
// terminal and puts it in raw mode before any byte passes (else it would
// echo typed keys back as console output).
func openRaw(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open serial pty: %w", err)
	}
	rc, err := f.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) { _, err = term.MakeRaw(int(fd)) })
		if cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("serial pty raw mode: %w", err)
	}
	return f, nil
}

func (s *Server) readSerial() {
	defer s.wg.Done()
	buf := make([]byte, 4096)
	for {
		n, err := s.host.Read(buf)
		s.mu.Lock()
		s.serial.Write(buf[:n])
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Kind implements soltest.Observer.
func (s *Server) Kind() soltest.Kind { return soltest.GoIPMIServer }

// Info is how obmd reaches this BMC, pinned to cipher suite 17 (or the
// first suite of Options.CipherSuites).
func (s *Server) Info() sol.Info {
	c := 17
	if len(s.opts.CipherSuites) > 0 {
		c = s.opts.CipherSuites[0]
	}
	return sol.Info{Addr: "127.0.0.1", Port: s.Port, User: User, Pass: s.pass(), Cipher: &c}
}

// pass is the user's password (Options.Pass).
func (s *Server) pass() string {
	if s.opts.Pass != "" {
		return s.opts.Pass
	}
	return Pass
}

// WrongPassword is how obmd would reach s with a password s refuses.
func (s *Server) WrongPassword() sol.Info {
	info := s.Info()
	info.Pass = "wrong-password"
	return info
}

// WriteSerial prints p on the node's serial port, as the host OS would.
// goipmi-server forwards it to the active SOL session; with none, the pty
// keeps it for the next one.
func (s *Server) WriteSerial(p []byte) error {
	_, err := s.host.Write(p)
	return err
}

// Serial returns every byte that reached the node's serial port so far.
func (s *Server) Serial() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.serial.Bytes())
}

// ResetSerial forgets what reached the serial port so far.
func (s *Server) ResetSerial() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serial.Reset()
}

// stop ends everything and waits for every goroutine; it returns a
// description if the server had died on its own. Idempotent.
func (s *Server) stop() string {
	s.stopOnce.Do(s.shutdown)
	return s.died
}

func (s *Server) shutdown() {
	select {
	case <-s.exited:
		s.died = fmt.Sprintf("%v; stderr: %s", s.cmd.ProcessState, s.stderrTail())
	default:
	}
	if s.relay != nil {
		s.relay.close()
	}
	if s.ns != nil {
		s.ns.close()
	}
	if s.vm != nil {
		s.vm.close()
	}
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		<-s.exited
	}
	if s.host != nil {
		s.host.Close()
	}
	s.wg.Wait()
}
