package sshbmc

import (
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// session is one SSH session: the manager CLI, or a console.
type session struct {
	b  *BMC
	ch ssh.Channel

	mu       sync.Mutex // guards attached; held while the console's output is written
	attached bool
	exec     bool // the console is the session's command (or the session itself)
	line     []byte
	esc      escState
}

// escState is a vendor escape's state across input bytes.
type escState struct {
	lastESC bool
	st      byte // obmc-console-client's state: 0, '\r' or '~'
}

func escNone(_ *escState, c byte) ([]byte, bool) { return []byte{c}, false }

func escByte(esc byte) func(*escState, byte) ([]byte, bool) {
	return func(_ *escState, c byte) ([]byte, bool) {
		if c == esc {
			return nil, true
		}
		return []byte{c}, false
	}
}

// escParen is ESC then '(' (iLO's and XCC's).
func escParen(e *escState, c byte) ([]byte, bool) {
	if e.lastESC && c == '(' {
		return nil, true
	}
	e.lastESC = c == 0x1b
	return []byte{c}, false
}

// escTilde is obmc-console-client's ssh-style escape (console-client.c,
// process_ssh_tty): a '~' right after CR is swallowed, and a '.' after it
// ends the client; anything else after it resets the state.
func escTilde(e *escState, c byte) ([]byte, bool) {
	switch c {
	case '.':
		if e.st == '~' {
			return nil, true
		}
		e.st = 0
	case '~':
		if e.st == '\r' {
			e.st = '~'
			return nil, false
		}
		e.st = 0
	case '\r':
		e.st = '\r'
	default:
		e.st = 0
	}
	return []byte{c}, false
}

// started is a session's start: exec of the console command or a shell;
// the request is answered once ready is closed (the console attached, or
// the prompt shown), so that a client that got its answer finds the
// console there.
type started struct {
	exec  bool
	ready chan struct{}
}

// run serves the session's requests and input until it ends.
func (s *session) run(reqs <-chan *ssh.Request) {
	start := make(chan started, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // ends when the channel closes
		defer wg.Done()
		begun := false
		for r := range reqs {
			ok := true
			switch r.Type {
			case "pty-req", "env", "window-change":
			case "shell":
				ok = !begun
				if ok {
					begun = true
					st := started{ready: make(chan struct{})}
					start <- st
					<-st.ready
				}
			case "exec":
				var cmd struct{ Command string }
				ok = !begun && !s.b.o.NoExec && ssh.Unmarshal(r.Payload, &cmd) == nil &&
					strings.TrimSpace(cmd.Command) == s.b.v.command && !s.b.v.session
				if ok {
					begun = true
					st := started{exec: true, ready: make(chan struct{})}
					start <- st
					<-st.ready
				}
			case "break":
				s.b.mu.Lock()
				s.b.stats.Breaks++
				s.b.mu.Unlock()
				ok = !s.b.o.NoBreak
			default:
				ok = false
			}
			if r.WantReply {
				r.Reply(ok, nil)
			}
		}
		close(start)
	}()
	defer func() {
		s.ch.Close() // ends the requests goroutine
		wg.Wait()
	}()
	st, ok := <-start
	if !ok {
		return
	}
	switch {
	case st.exec:
		s.exec = true
		if !s.attach("") {
			close(st.ready)
			s.exit(1)
			return
		}
	case s.b.v.session:
		s.exec = true
		s.attach("")
	default:
		s.ch.Write([]byte("Welcome to the test BMC\r\n" + s.b.v.prompt))
	}
	close(st.ready)
	s.input()
}

// input processes what the client types until the session ends.
func (s *session) input() {
	buf := make([]byte, 4096)
	for {
		n, err := s.ch.Read(buf)
		if n > 0 && s.feed(buf[:n]) {
			return
		}
		if err != nil {
			s.detach(false)
			return
		}
	}
}

// feed processes input bytes; true when the session is over.
func (s *session) feed(p []byte) bool {
	var host []byte
	flush := func() {
		if len(host) > 0 {
			s.b.ptm.Write(host)
			host = host[:0]
		}
	}
	for _, c := range p {
		if s.isAttached() {
			fwd, leave := s.b.v.escape(&s.esc, c)
			host = append(host, fwd...)
			if !leave {
				continue
			}
			flush()
			s.b.mu.Lock()
			s.b.stats.Escapes++
			s.b.mu.Unlock()
			s.detach(true)
			if s.exec {
				s.exit(0)
				return true
			}
			s.ch.Write([]byte("\r\n" + s.b.v.prompt))
			continue
		}
		if s.cli(c) {
			return true
		}
	}
	flush()
	return false
}

// cli takes one byte at the manager CLI's prompt; true when the session is
// over.
func (s *session) cli(c byte) bool {
	switch c {
	case '\r', '\n':
		line := strings.TrimSpace(string(s.line))
		s.line = s.line[:0]
		return s.command(line)
	case 0x7f, 0x08:
		if len(s.line) > 0 {
			s.line = s.line[:len(s.line)-1]
			s.ch.Write([]byte("\b \b"))
		}
	default:
		s.line = append(s.line, c)
		s.ch.Write([]byte{c})
	}
	return false
}

// command runs one CLI command line, its end of line not echoed yet;
// true when the session is over.
func (s *session) command(line string) bool {
	v := s.b.v
	if line == v.command {
		// The end of the line is echoed once the slot is taken, so that
		// a client seeing it finds the console attached.
		if s.attach("\r\n") {
			return false
		}
		s.ch.Write([]byte(v.prompt))
		return false
	}
	s.ch.Write([]byte("\r\n"))
	switch {
	case line == "":
	case line == "exit" || line == "quit":
		s.exit(0)
		return true
	case v.free != "" && line == v.free:
		s.b.free()
		s.ch.Write([]byte("status=0\r\nstatus_tag=COMMAND COMPLETED\r\n"))
	default:
		s.ch.Write([]byte("Unknown command: " + line + "\r\n"))
	}
	s.ch.Write([]byte(v.prompt))
	return false
}

func (s *session) isAttached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attached
}

// attach takes the console slot, as the vendor does: shared, taken over,
// or refused when held; then it writes echo and the banner (or the busy
// text). false: refused (the CLI said so).
func (s *session) attach(echo string) bool {
	b := s.b
	b.mu.Lock()
	held := len(b.holders) > 0 || b.staleLocked()
	if held && !b.v.shared && !b.v.steal {
		b.stats.Refused++
		b.mu.Unlock()
		s.ch.Write([]byte(echo + b.v.busy))
		return false
	}
	var old []*session
	if !b.v.shared {
		old = b.holders
		b.holders = nil
		if held {
			b.stats.Stolen++
		}
	}
	b.holders = append(b.holders, s)
	b.stale = false
	b.stats.Attaches++
	b.mu.Unlock()
	for _, o := range old {
		o.kick("\r\n[console taken over by another session]\r\n")
	}
	// The host's output reaches the session from the end of its banner
	// on (output), never in the middle of the CLI's words.
	s.mu.Lock()
	s.attached, s.esc = true, escState{}
	s.ch.Write([]byte(echo + b.o.Greeting + b.v.banner))
	s.mu.Unlock()
	return true
}

// detach leaves the slot; a console left without the escape (clean
// false) keeps a single slot held.
func (s *session) detach(clean bool) {
	s.mu.Lock()
	was := s.attached
	s.attached = false
	s.mu.Unlock()
	if !was {
		return
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, h := range b.holders {
		if h == s {
			b.holders = append(b.holders[:i], b.holders[i+1:]...)
			if !clean && b.v.keeps {
				b.stale = true
				b.staleTil = time.Now().Add(b.o.StaleFor)
			}
			return
		}
	}
}

// output writes host output p to the session if its console is attached.
func (s *session) output(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attached {
		s.ch.Write(p)
	}
}

// kick ends a console taken from the session.
func (s *session) kick(msg string) {
	s.mu.Lock()
	s.attached = false
	s.mu.Unlock()
	s.ch.Write([]byte(msg))
	s.exit(1)
}

// free frees the slot (the vendor's free command): its holder is ended.
func (b *BMC) free() {
	b.mu.Lock()
	old := b.holders
	b.holders, b.stale = nil, false
	b.stats.Freed++
	b.mu.Unlock()
	for _, o := range old {
		o.kick("\r\n[console freed by another session]\r\n")
	}
}

// exit ends the session with status code.
func (s *session) exit(code uint32) {
	s.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{code}))
	s.ch.Close()
}

// Leaves runs vendor's escape over input, as its CLI reads a console's
// input: what reaches the host, and whether the input left the console
// (the rest after the escape is not the host's).
func Leaves(vendor string, input []byte) (host []byte, left bool) {
	v, ok := vendors[vendor]
	if !ok {
		panic("sshbmc: unknown vendor " + vendor)
	}
	var e escState
	for _, c := range input {
		fwd, leave := v.escape(&e, c)
		host = append(host, fwd...)
		if leave {
			return host, true
		}
	}
	return host, false
}
