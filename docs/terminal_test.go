package docs

// A terminal as a reader has one: an interactive bash on a pseudo-
// terminal, commands typed into it, its screen read back. Whatever runs
// in it (ssh and its prompts, a console, obmd itself) sees a real tty.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// The prompt is a record separator, "P", the last exit status and a unit
// separator: nothing an example prints looks like it.
var promptRE = regexp.MustCompile("\x1eP(\\d+)\x1f")

// terminal is one interactive bash on a pty. Its output is collected by
// one goroutine (read, owned by the terminal: close waits for it).
type terminal struct {
	name   string
	pty    *os.File
	cmd    *exec.Cmd
	exited chan struct{} // closed when bash has exited (its waiter, started with it)

	mu   sync.Mutex
	out  []byte
	grew chan struct{} // closed and replaced when out grows
	done bool          // the pty read ended
	read sync.WaitGroup

	pos  int  // out[:pos] has been matched
	busy bool // a command typed has not returned to the prompt
	echo int  // newlines of echo still to skip at pos
}

// rcfile is what every terminal's bash runs first: a prompt the test
// can find, a sane tty before each prompt (a killed program may leave it
// raw), no history expansion ("!" in examples), no job notices.
const rcfile = `PS1=$'\x1eP$?\x1f'
PS2=''
PROMPT_COMMAND='stty sane 2>/dev/null'
set +o histexpand
unset HISTFILE
`

// startTerminal starts bash in dir with env; extra is appended to its
// rc file (the README's "make run").
func startTerminal(name, dir, scratch string, env []string, extra string) (*terminal, error) {
	rc := filepath.Join(scratch, "bashrc-"+name)
	if err := os.WriteFile(rc, []byte(rcfile+extra), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command("bash", "--noprofile", "--rcfile", rc, "--noediting", "-i")
	cmd.Dir, cmd.Env = dir, env
	// If the test process dies, bash dies too, and the hangup of its
	// terminal ends what runs in it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
	if err != nil {
		return nil, fmt.Errorf("start bash: %w", err)
	}
	t := &terminal{name: name, pty: f, cmd: cmd, grew: make(chan struct{}), exited: make(chan struct{})}
	t.read.Add(2)
	go t.collect()
	go func() { defer t.read.Done(); cmd.Wait(); close(t.exited) }()
	if _, _, err := t.waitPrompt(10 * time.Second); err != nil {
		t.close()
		return nil, fmt.Errorf("terminal %s: %w", name, err)
	}
	return t, nil
}

func (t *terminal) collect() {
	defer t.read.Done()
	buf := make([]byte, 8192)
	for {
		n, err := t.pty.Read(buf)
		t.mu.Lock()
		t.out = append(t.out, buf[:n]...)
		if err != nil {
			t.done = true
		}
		close(t.grew)
		t.grew = make(chan struct{})
		t.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// close ends bash and everything started in it: each command runs in a
// process group of its own (job control), so every group on the pty is
// sent SIGHUP, then SIGKILL.
func (t *terminal) close() {
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGKILL} {
		if g, err := unix.IoctlGetInt(int(t.pty.Fd()), unix.TIOCGPGRP); err == nil && g > 0 && g != t.cmd.Process.Pid {
			syscall.Kill(-g, sig) // the command in the foreground
		}
		t.cmd.Process.Signal(sig)
		select {
		case <-t.exited:
		case <-time.After(5 * time.Second):
			continue
		}
		break
	}
	t.pty.Close()
	t.read.Wait()
}

// snapshot returns the output after pos (the echo skipped), whether the
// prompt has come back (and then only what came before it, the exit
// status and where the prompt ends), and a channel that is closed when
// more arrives.
func (t *terminal) snapshot() (text string, ok bool, prompted bool, status, end int, grew <-chan struct{}, eof bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rest := t.out[t.pos:]
	skip, ok := echoEnd(rest, t.echo)
	if !ok {
		return "", false, false, 0, 0, t.grew, t.done
	}
	rest = rest[skip:]
	if m := promptRE.FindSubmatchIndex(rest); m != nil {
		status, _ = strconv.Atoi(string(rest[m[2]:m[3]]))
		return string(rest[:m[0]]), true, true, status, t.pos + skip + m[1], t.grew, t.done
	}
	return string(rest), true, false, 0, 0, t.grew, t.done
}

// echoEnd returns where the echo of what was typed (n lines) ends in
// out: after n newlines, or where the prompt comes back first (what was
// typed without echo, such as a password, may end in no newline). ok is
// false while neither has arrived.
func echoEnd(out []byte, n int) (end int, ok bool) {
	for i := 0; i < n; i++ {
		nl := bytes.IndexByte(out[end:], '\n')
		if p := promptRE.FindIndex(out[end:]); p != nil && (nl < 0 || p[0] < nl) {
			return end + p[0], true
		}
		if nl < 0 {
			return end, false
		}
		end += nl + 1
	}
	return end, true
}

// consume marks n more bytes of the output after pos (the echo skipped)
// as matched; n < 0: all of it.
func (t *terminal) consume(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rest := t.out[t.pos:]
	skip, _ := echoEnd(rest, t.echo)
	if n < 0 || skip+n > len(rest) {
		n = len(rest) - skip
	}
	t.pos += skip + n
	t.echo = 0
}

// waitPrompt waits until bash prompts again and returns the output of
// the command that ran (its echo skipped) and its exit status.
func (t *terminal) waitPrompt(timeout time.Duration) (string, int, error) {
	deadline := time.After(timeout)
	for {
		text, _, prompted, status, end, grew, eof := t.snapshot()
		if prompted {
			t.mu.Lock()
			t.pos, t.busy, t.echo = end, false, 0
			t.mu.Unlock()
			return text, status, nil
		}
		if eof {
			return text, 0, errors.New("the terminal's shell ended")
		}
		select {
		case <-grew:
		case <-deadline:
			return text, 0, fmt.Errorf("no prompt within %v", timeout)
		}
	}
}

// typeLines types a command (its lines) at the prompt.
func (t *terminal) typeLines(lines []string) error {
	t.mu.Lock()
	if t.busy {
		t.mu.Unlock()
		return errors.New("a command is still running in this terminal")
	}
	t.busy, t.echo = true, len(lines)
	t.mu.Unlock()
	_, err := t.pty.Write([]byte(strings.Join(lines, "\n") + "\n"))
	return err
}

// typeKeys types keys into whatever runs; the echo of the line they end
// (if any) is not matched.
func (t *terminal) typeKeys(k string) error {
	t.consume(-1)
	t.mu.Lock()
	t.echo = 1
	t.mu.Unlock()
	_, err := t.pty.Write([]byte(k))
	return err
}

// tail is the last part of the terminal's output, for failure messages.
func (t *terminal) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.out
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return strings.Join(normalise(promptRE.ReplaceAllString(string(b), "\n$ ")), "\n")
}
