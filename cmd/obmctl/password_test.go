package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// TestBMCPassword covers the sources of a BMC password other than a
// terminal, in order: --pass-file, OBMD_BMC_PASS, then stdin's first line
// after a prompt on run's stderr.
func TestBMCPassword(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(file, []byte("from-file\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pipe := func(data string) io.Reader {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		go func() {
			io.WriteString(w, data)
			w.Close()
		}()
		return r
	}
	tests := []struct {
		name       string
		file, env  string
		stdin      io.Reader
		want       string
		wantPrompt bool
		wantErr    bool
	}{
		{"file", file, "from-env", strings.NewReader("from-stdin\n"), "from-file", false, false},
		{"env", "", "from-env", strings.NewReader("from-stdin\n"), "from-env", false, false},
		{"reader", "", "", strings.NewReader("from-stdin\r\nmore\n"), "from-stdin", true, false},
		{"pipe", "", "", pipe("from-pipe\n"), "from-pipe", true, false},
		{"last line without newline", "", "", pipe("no-newline"), "no-newline", true, false},
		{"nothing", "", "", strings.NewReader(""), "", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			getenv := func(k string) string {
				if k == "OBMD_BMC_PASS" {
					return tt.env
				}
				return ""
			}
			got, err := bmcPassword(tt.file, tt.stdin, &stderr, getenv)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("got %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
			if prompted := stderr.String() == "BMC password: "; prompted != tt.wantPrompt {
				t.Errorf("stderr: got %q, want the prompt: %v", stderr.String(), tt.wantPrompt)
			}
		})
	}
}

// TestBMCPasswordTerminal: on a terminal the password is read with echo
// off, so it never shows on the screen (it did: stdin was read as a plain
// stream, and the terminal echoed every key).
func TestBMCPasswordTerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()

	var stderr bytes.Buffer
	type result struct {
		pass string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		p, err := bmcPassword("", tty, &stderr, func(string) string { return "" })
		done <- result{p, err}
	}()
	// Type only once echo is off, as a person would after the prompt.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			ptmx.Write([]byte("\n")) // let bmcPassword return
			t.Fatal("the terminal still echoes while the password is read")
		}
	}
	if _, err := ptmx.Write([]byte("s3cret-typed\n")); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("bmcPassword did not return")
	}
	if r.err != nil || r.pass != "s3cret-typed" {
		t.Errorf("got %q, %v; want %q, nil", r.pass, r.err, "s3cret-typed")
	}
	if got := stderr.String(); got != "BMC password: \n" {
		t.Errorf("stderr: got %q, want the prompt and a newline", got)
	}
	// Whatever the terminal shows comes back on the master side.
	shown := readAvailable(t, ptmx)
	if bytes.Contains(shown, []byte("s3cret")) {
		t.Errorf("the terminal showed %q, want no password", shown)
	}
	if tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err != nil || tio.Lflag&unix.ECHO == 0 {
		t.Errorf("echo not restored after the password was read (err %v)", err)
	}
}

// readAvailable reads what f has to give until it stays quiet for 200 ms.
// (A pty master is not pollable by the Go runtime: no read deadlines.)
func readAvailable(t *testing.T, f *os.File) []byte {
	t.Helper()
	fd := int(f.Fd())
	var out []byte
	buf := make([]byte, 512)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 200)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pty: %v", err)
		}
		if n == 0 || fds[0].Revents&unix.POLLIN == 0 {
			return out
		}
		k, err := unix.Read(fd, buf)
		if err != nil || k == 0 {
			return out
		}
		out = append(out, buf[:k]...)
	}
}
