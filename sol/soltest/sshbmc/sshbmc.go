// Package sshbmc runs a BMC's SSH service for tests, speaking one vendor's
// manager CLI and console.
//
// It is a real SSH server (golang.org/x/crypto/ssh) on 127.0.0.1 that
// emulates a vendor's manager CLI (its prompt, its console command, the
// vendor's escape to leave the console, its single console slot) and bridges
// the console to a pty whose other side the test reads and writes as the
// host's serial port.
//
// What each vendor does here, as sol/sshconsole's presets expect it:
//
//	idrac    prompt "/admin1-> ", "console com2", banner "... To end type: ^\",
//	         Ctrl-\ leaves; a second console takes the slot over (the first
//	         session ends)
//	ilo      prompt "</>hpiLO-> ", "vsp", banner "Press 'ESC (' to return to
//	         the CLI Session.", ESC ( leaves; a second console is refused
//	         ("... in use by another session."), "stop /system1/oemhp_vsp1"
//	         frees it
//	xcc      prompt "system> ", "console 1", no banner, ESC ( leaves; a second
//	         console is refused
//	openbmc  the session is the console (port 2200 on a real one), CR ~ .
//	         leaves (obmc-console-client's rule); any number of consoles
//	generic  "console" as the session's command (or typed at "bmc> "); no
//	         escape; one console, refused when held
//
// On idrac, ilo and xcc, a console whose session ends without the escape
// (the client vanished) keeps the slot held, as such BMCs do, until it is freed, taken over, or
// Options.StaleFor has passed. A drop by the BMC itself (DropConnections)
// frees it.
package sshbmc

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/obmd/obmd/sol"
)

// Default credentials.
const (
	User = "root"
	Pass = "ssh-bmc-pass-4e1d" // distinctive, so leak tests can grep for it
)

// Options shape a test BMC.
type Options struct {
	// Vendor is the CLI emulated (default generic).
	Vendor string
	// User and Pass are its account (default User, Pass).
	User, Pass string
	// NoExec refuses every command: the BMC offers a shell only.
	NoExec bool
	// NoBreak refuses break requests.
	NoBreak bool
	// StaleFor is how long a console left without the escape keeps the
	// slot (default: until freed or taken over).
	StaleFor time.Duration
	// Greeting is CLI output written before the vendor's banner when a
	// console attaches (a hostile or odd BMC's words).
	Greeting string
}

// vendor is what the emulator does for one vendor.
type vendor struct {
	prompt  string
	command string
	banner  string
	busy    string // refused when held; "" with steal or shared
	free    string
	steal   bool
	shared  bool
	session bool // the session is the console
	// keeps: a console left without the escape keeps the slot (stale).
	keeps  bool
	escape func(*escState, byte) (forward []byte, leave bool)
}

var vendors = map[string]vendor{
	"idrac": {prompt: "/admin1-> ", command: "console com2", banner: "Connected to Serial Device 2. To end type: ^\\\r\n",
		steal: true, keeps: true, escape: escByte(0x1c)},
	"ilo": {prompt: "</>hpiLO-> ", command: "vsp",
		banner: "\r\nVirtual Serial Port Active: COM2\r\n\r\nStarting virtual serial port.\r\nPress 'ESC (' to return to the CLI Session.\r\n",
		busy:   "\r\nVirtual Serial Port is currently in use by another session.\r\n", free: "stop /system1/oemhp_vsp1",
		keeps: true, escape: escParen},
	"xcc": {prompt: "system> ", command: "console 1", busy: "SOL is in use by another session\r\n", keeps: true,
		escape: escParen},
	"openbmc": {session: true, shared: true, escape: escTilde},
	"generic": {prompt: "bmc> ", command: "console", busy: "console in use\r\n", escape: escNone},
}

// Stats is what the BMC saw.
type Stats struct {
	Logins   int  // authenticated connections
	Attaches int  // consoles attached
	Escapes  int  // consoles left through the vendor's escape
	Refused  int  // consoles refused: the slot was held
	Stolen   int  // consoles taken over by a newer one
	Freed    int  // slots freed by the vendor's free command
	Breaks   int  // break requests
	Held     bool // the console slot is held (by a session, or stale)
}

// BMC is one running test BMC.
type BMC struct {
	// Host and Port are where its SSH service listens (127.0.0.1).
	Host string
	Port int

	o  Options
	v  vendor
	l  net.Listener
	wg sync.WaitGroup // accept loop, connections, the pty reader

	ptm, pts *os.File // the pty: the BMC's end, the host's serial port

	mu       sync.Mutex
	signer   ssh.Signer
	conns    map[*ssh.ServerConn]bool
	holders  []*session
	stale    bool
	staleTil time.Time
	stats    Stats
	serial   bytes.Buffer
	frozen   chan struct{} // non-nil while frozen: closed by Thaw
	closed   bool
}

// Start starts a BMC of o.Vendor, stopped at the test's end.
func Start(t testing.TB, o Options) *BMC {
	t.Helper()
	if o.Vendor == "" {
		o.Vendor = "generic"
	}
	v, ok := vendors[o.Vendor]
	if !ok {
		t.Fatalf("sshbmc: unknown vendor %q", o.Vendor)
	}
	if o.User == "" {
		o.User, o.Pass = User, Pass
	}
	ptm, pts, err := openPTY()
	if err != nil {
		t.Fatalf("sshbmc: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &BMC{Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port, o: o, v: v, l: l, ptm: ptm, pts: pts,
		conns: map[*ssh.ServerConn]bool{}}
	b.signer = newSigner(t)
	b.wg.Add(3)
	go b.accept()
	go b.hostOutput()
	go b.hostInput()
	t.Cleanup(b.stop)
	return b
}

// openPTY opens a pty in raw mode, both ends in the runtime poller (so
// that Close ends a pending Read).
func openPTY() (ptm, pts *os.File, err error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open a pty: %w", err)
	}
	_, err = term.MakeRaw(int(s.Fd()))
	if err == nil {
		ptm, err = pollable(m)
	}
	if err == nil {
		if pts, err = pollable(s); err != nil {
			ptm.Close()
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("pty: %w", err)
	}
	return ptm, pts, nil
}

// pollable is a non-blocking duplicate of f (closed) that the runtime
// poller drives.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

func newSigner(t testing.TB) ssh.Signer {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stop closes everything and waits for every goroutine.
func (b *BMC) stop() {
	b.mu.Lock()
	b.closed = true
	if b.frozen != nil {
		close(b.frozen)
		b.frozen = nil
	}
	b.mu.Unlock()
	b.l.Close()
	b.DropConnections()
	b.ptm.Close()
	b.pts.Close()
	b.wg.Wait()
}

// Addr is "127.0.0.1:port".
func (b *BMC) Addr() string { return net.JoinHostPort(b.Host, strconv.Itoa(b.Port)) }

// ConsoleInfo is how a node reaches this BMC's console over SSH (console
// "ssh", this vendor, port and account).
func (b *BMC) ConsoleInfo() sol.ConsoleInfo {
	ci := sol.ConsoleInfo{Console: sol.ConsoleSSH, SSHPort: b.Port, SSHUser: b.o.User, SSHPass: b.o.Pass, SSHVendor: b.o.Vendor}
	if b.o.Vendor == "generic" {
		ci.SSHCommand = b.v.command
	}
	return ci
}

// HostKey is the host key the BMC shows now.
func (b *BMC) HostKey() ssh.PublicKey {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.signer.PublicKey()
}

// ShowHostKeyOf gives the BMC o's host key for the connections to come,
// as an impostor at its address (or o's replacement) would show.
func (b *BMC) ShowHostKeyOf(o *BMC) {
	o.mu.Lock()
	s := o.signer
	o.mu.Unlock()
	b.mu.Lock()
	b.signer = s
	b.mu.Unlock()
}

// RotateHostKey gives the BMC a new host key for the connections to come.
func (b *BMC) RotateHostKey(t testing.TB) {
	s := newSigner(t)
	b.mu.Lock()
	b.signer = s
	b.mu.Unlock()
}

// DropConnections ends every SSH connection, as a BMC resetting its SSH
// service does: its console slot is free afterwards.
func (b *BMC) DropConnections() {
	b.mu.Lock()
	conns := make([]*ssh.ServerConn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.holders, b.stale = nil, false
	b.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Freeze makes the BMC stop answering keepalive requests and stop sending
// host output, as a hung BMC does, until Thaw.
func (b *BMC) Freeze() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozen == nil {
		b.frozen = make(chan struct{})
	}
}

// Thaw ends a Freeze.
func (b *BMC) Thaw() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozen != nil {
		close(b.frozen)
		b.frozen = nil
	}
}

// waitThawed blocks while the BMC is frozen.
func (b *BMC) waitThawed() {
	b.mu.Lock()
	f := b.frozen
	b.mu.Unlock()
	if f != nil {
		<-f
	}
}

// Stats returns what the BMC saw so far.
func (b *BMC) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.Held = len(b.holders) > 0 && !b.v.shared || b.staleLocked()
	return s
}

// staleLocked reports whether a vanished console still holds the slot.
func (b *BMC) staleLocked() bool {
	if b.stale && b.o.StaleFor > 0 && time.Now().After(b.staleTil) {
		b.stale = false
	}
	return b.stale
}

// WriteSerial prints p on the host's serial port (console output).
func (b *BMC) WriteSerial(p []byte) error {
	_, err := b.pts.Write(p)
	return err
}

// Serial returns every byte typed into the host's serial port so far.
func (b *BMC) Serial() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.serial.Bytes())
}

// ResetSerial forgets what reached the serial port.
func (b *BMC) ResetSerial() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.serial.Reset()
}

// WaitSerial waits until the serial port has received want, or fails t.
func (b *BMC) WaitSerial(t testing.TB, want []byte, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !bytes.Contains(b.Serial(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("serial port never received %q; got %q", want, b.Serial())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitStats waits until cond holds of the BMC's stats, or fails t.
func (b *BMC) WaitStats(t testing.TB, what string, timeout time.Duration, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := b.Stats()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; stats %+v", what, timeout, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hostInput reads what reaches the host's serial port.
func (b *BMC) hostInput() {
	defer b.wg.Done()
	buf := make([]byte, 4096)
	for {
		n, err := b.pts.Read(buf)
		if n > 0 {
			b.mu.Lock()
			b.serial.Write(buf[:n])
			b.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// hostOutput carries what the host prints to the consoles attached (or
// drops it when none is).
func (b *BMC) hostOutput() {
	defer b.wg.Done()
	buf := make([]byte, 4096)
	for {
		n, err := b.ptm.Read(buf)
		if n > 0 {
			b.waitThawed()
			b.mu.Lock()
			holders := append([]*session(nil), b.holders...)
			b.mu.Unlock()
			for _, s := range holders {
				s.output(buf[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// accept serves connections until the listener closes.
func (b *BMC) accept() {
	defer b.wg.Done()
	for {
		c, err := b.l.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go b.serve(c)
	}
}

// serverConfig is the SSH server's configuration with the current key.
func (b *BMC) serverConfig() *ssh.ServerConfig {
	check := func(user string, pass []byte) bool {
		return user == b.o.User && string(pass) == b.o.Pass
	}
	cfg := &ssh.ServerConfig{
		PasswordCallback: func(m ssh.ConnMetadata, pass []byte) (*ssh.Permissions, error) {
			if check(m.User(), pass) {
				return nil, nil
			}
			return nil, errors.New("denied")
		},
		KeyboardInteractiveCallback: func(m ssh.ConnMetadata, ask ssh.KeyboardInteractiveChallenge) (*ssh.Permissions, error) {
			ans, err := ask("", "", []string{"Password: "}, []bool{false})
			if err == nil && len(ans) == 1 && check(m.User(), []byte(ans[0])) {
				return nil, nil
			}
			return nil, errors.New("denied")
		},
	}
	b.mu.Lock()
	cfg.AddHostKey(b.signer)
	b.mu.Unlock()
	return cfg
}

// serve runs one connection: its global requests (keepalive) and
// sessions.
func (b *BMC) serve(c net.Conn) {
	defer b.wg.Done()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	sc, chans, reqs, err := ssh.NewServerConn(c, b.serverConfig())
	if err != nil {
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		sc.Close()
		return
	}
	b.conns[sc] = true
	b.stats.Logins++
	b.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // answers keepalives, unless frozen; ends with the connection
		defer wg.Done()
		for r := range reqs {
			b.waitThawed()
			r.Reply(true, nil)
		}
	}()
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "sessions only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		s := &session{b: b, ch: ch}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(creqs)
		}()
	}
	sc.Close()
	wg.Wait()
	b.mu.Lock()
	delete(b.conns, sc)
	b.mu.Unlock()
}
