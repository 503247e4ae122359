package console

// End-to-end tests of the mock type's console as HIL's tooling reads it:
// through a pipe, as fast as the reader takes it, and however slowly.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// cliEnv, set to a console URL, makes this test binary run as a console CLI
// (runConsoleCLI) instead of running tests: TestMain checks it.
const cliEnv = "OBMD_TEST_CONSOLE_CLI"

// runConsoleCLI behaves as HIL's `hil node console show` with its stdout on
// a pipe: it GETs url, says "streaming" on stderr once the response has
// begun, and copies the body to stdout through a 4 KiB block buffer (as C
// stdio and Python buffer a pipe), so the reader of the pipe sees nothing
// until 4 KiB have come. It returns the process's exit code.
func runConsoleCLI(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, resp.Status)
		return 1
	}
	fmt.Fprintln(os.Stderr, "streaming")
	out := bufio.NewWriterSize(os.Stdout, 4<<10)
	buf := make([]byte, 512) // small reads: whole 4 KiB blocks reach the pipe
	for {
		n, err := resp.Body.Read(buf)
		if _, werr := out.Write(buf[:n]); werr != nil {
			return 0 // the reader went away
		}
		if err != nil {
			out.Flush()
			return 0
		}
	}
}

// mockChild starts a client process whose stdout is a pipe (returned) and
// whose stderr is collected; it is killed at cleanup.
func mockChild(t *testing.T, c *exec.Cmd) (stdout *os.File, stderr *obmdtest.Buffer) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr = obmdtest.NewBuffer()
	c.Stdout, c.Stderr = pw, stderr
	if err := c.Start(); err != nil {
		t.Fatalf("start %s: %v", c.Path, err)
	}
	pw.Close()
	t.Cleanup(func() {
		c.Process.Kill()
		c.Wait()
		pr.Close()
	})
	return pr, stderr
}

// TestConsoleMockBufferedPipe: a client copies the mock's console to a pipe
// (HTTP through HIL's block-buffered CLI, SSH through the real OpenSSH
// client without a PTY); the reader of the pipe sees "0\n".."10\n" within a
// second of the stream's start (paced at a line per 50 ms, a 4 KiB buffer
// took 52 s to fill), then, also after pausing, the counter without a gap
// or anything else in it: the mock runs as fast as its reader and no
// faster.
func TestConsoleMockBufferedPipe(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		o.AddNode("hil-http", "mock", sol.Info{Addr: "10.0.0.4"})
		tok := o.Rotate("hil-http")
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), cliEnv+"=http://"+o.AdminAddr()+"/node/hil-http/console?token="+url.QueryEscape(tok))
		out, errb := mockChild(t, c)
		errb.Wait(t, "the CLI's stderr", 0, "streaming\n")
		readCounter(t, out, time.Now())
	})
	t.Run("ssh", func(t *testing.T) {
		t.Parallel()
		ipmisim.Require(t, "ssh", "sshpass")
		o.AddNode("hil-ssh", "mock", sol.Info{Addr: "10.0.0.5"})
		tok := o.Rotate("hil-ssh")
		args := append([]string{"-p", tok, "ssh"}, o.SSHArgs("hil-ssh", "-T", "-o", "PubkeyAuthentication=no")...)
		out, errb := mockChild(t, exec.Command("sshpass", args...))
		errb.Wait(t, "ssh's stderr", 0, "[obmd: console of hil-ssh;") // the banner, before any output
		readCounter(t, out, time.Now())
	})
}

// readCounter reads the mock's counter from r: "0\n".."10\n" within a
// second of began, then 1 MiB in all, with a pause to let every buffer on
// the way fill up, each line the next number.
func readCounter(t *testing.T, r *os.File, began time.Time) {
	t.Helper()
	br := bufio.NewReader(r)
	next := 0
	line := func() {
		t.Helper()
		got, err := br.ReadBytes('\n')
		if want := strconv.Itoa(next) + "\n"; string(got) != want {
			t.Fatalf("line %d: got %q (%v), want %q", next, got, err, want)
		}
		next++
	}
	if err := r.SetReadDeadline(began.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for next <= 10 {
		line()
	}
	t.Logf("0..10 after %v", time.Since(began).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond) // a slow reader: queues and socket buffers fill
	if err := r.SetReadDeadline(time.Now().Add(obmdtest.Timeout)); err != nil {
		t.Fatal(err)
	}
	for read := 0; read < 1<<20; read += len(strconv.Itoa(next)) + 1 {
		line()
	}
}

// BenchmarkMockConsoleHTTP measures the mock console's throughput through
// obmd's HTTP console (GET /node/{label}/console, loopback): bytes per
// second as one client reads a stream.
func BenchmarkMockConsoleHTTP(b *testing.B) {
	o := obmdtest.Start(b)
	o.AddNode("bench", "mock", sol.Info{Addr: "10.0.0.4"})
	tok := o.Rotate("bench")
	resp, err := http.Get("http://" + o.AdminAddr() + "/node/bench/console?token=" + url.QueryEscape(tok))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	const chunk = 1 << 20
	buf := make([]byte, 32<<10)
	b.SetBytes(chunk)
	b.ResetTimer()
	for range b.N {
		if _, err := io.CopyBuffer(io.Discard, io.LimitReader(resp.Body, chunk), buf); err != nil {
			b.Fatal(err)
		}
	}
}
