package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/obmd/obmd/sol"
)

// simInfo registers a node on obmd's built-in simulator.
var simInfo = sol.Info{Addr: "sim"}

// clockTick is the unit of /proc/PID/stat times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU is the CPU time pid and its waited-for children have used (utime
// + stime + cutime + cstime of /proc/PID/stat). sshd's per-connection
// processes are reaped by the listener, so their time lands in cutime.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu of %d: %w", pid, err)
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("read cpu of %d: malformed stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("read cpu of %d: short stat", pid)
	}
	var ticks int64
	for _, k := range f[11:15] { // utime stime cutime cstime (fields 14-17)
		n, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read cpu of %d: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// procRSS returns VmRSS and RssAnon of pid, in KiB.
func procRSS(pid int) (rss, anon int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read rss of %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "RssAnon":
			anon = n
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("read rss of %d: no VmRSS", pid)
	}
	return rss, anon, nil
}

// settledRSS waits for pid's RSS to stop growing (two samples 250 ms apart
// within 1%), at most max, and returns the last sample.
func settledRSS(pid int, max time.Duration) (int64, error) {
	deadline := time.Now().Add(max)
	prev, _, err := procRSS(pid)
	if err != nil {
		return 0, err
	}
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		cur, _, err := procRSS(pid)
		if err != nil {
			return 0, err
		}
		if d := cur - prev; d >= -prev/100 && d <= prev/100 {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// goTool is the go command: $GO, then PATH, then this toolchain's.
func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// buildBinaries builds obmd and baressh into dir.
func buildBinaries(ctx context.Context, dir string) (obmd, bare string, err error) {
	obmd, bare = filepath.Join(dir, "obmd"), filepath.Join(dir, "baressh")
	for _, b := range []struct{ out, pkg string }{{obmd, "./cmd/obmd"}, {bare, "./bench/baressh"}} {
		cmd := exec.CommandContext(ctx, goTool(), "build", "-o", b.out, b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %w: %s", b.pkg, err, out)
		}
	}
	return obmd, bare, nil
}

// child is a server running as a separate process, so its CPU time and RSS
// are its own. Stop ends it.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // closing it tells baressh to exit
	waited chan struct{}  // closed by the goroutine that waits for cmd
	pumps  sync.WaitGroup // log copiers
}

func (c *child) Pid() int { return c.cmd.Process.Pid }

// startChild runs cmd, copying stderr and stdout into logPath. found, if
// not nil, is called with each line (stdout and stderr) and startChild
// returns once it returned true, which must happen within timeout.
func startChild(cmd *exec.Cmd, logPath string, timeout time.Duration, found func(line string) bool) (*child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", filepath.Base(cmd.Path), err)
	}
	c := &child{cmd: cmd, stdin: stdin, waited: make(chan struct{})}
	ready := make(chan struct{})
	var mu sync.Mutex
	isReady := false
	copyLines := func(r io.Reader) { // owned by c.pumps; ends when the child's pipe closes
		defer c.pumps.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			mu.Lock() // both copiers share the log file and found
			fmt.Fprintln(logf, sc.Text())
			if found != nil && !isReady && found(sc.Text()) {
				isReady = true
				close(ready)
			}
			mu.Unlock()
		}
	}
	c.pumps.Add(2)
	go copyLines(stdout)
	go copyLines(stderr)
	go func() { // owned by c: Stop waits on waited
		c.pumps.Wait()
		cmd.Wait()
		logf.Close()
		close(c.waited)
	}()
	if found == nil {
		return c, nil
	}
	select {
	case <-ready:
		return c, nil
	case <-c.waited:
		return nil, fmt.Errorf("%s exited at start (log %s): %s", filepath.Base(cmd.Path), logPath, tailFile(logPath))
	case <-time.After(timeout):
		c.Stop()
		return nil, fmt.Errorf("%s not ready within %v (log %s)", filepath.Base(cmd.Path), timeout, logPath)
	}
}

// Stop sends SIGTERM, waits up to 10 s, then kills.
func (c *child) Stop() {
	c.stdin.Close()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.waited:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.waited
	}
}

func tailFile(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 600 {
		data = data[len(data)-600:]
	}
	return strings.TrimSpace(string(data))
}

// obmdProc is the obmd binary running as a child.
type obmdProc struct {
	*child
	SSHAddr, AdminAddr, AdminToken string
	http                           *http.Client
}

// benchPerSource replaces the default per-source auth limit (5 tries, in
// flight included): every bench client connects from 127.0.0.1, and 8
// parallel logins from one address would otherwise be refused.
const benchPerSource = 1 << 20

// startObmdProc runs `obmd serve` with a config file in dir (the DSN and
// admin token go in the file, never in argv); extra adds YAML settings:
// a whole section ("auth_limits") or one key of one ("ssh.max_conns").
func startObmdProc(bin, dir, dsn string, extra map[string]any) (*obmdProc, error) {
	token, err := randomHex(24)
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"ssh":         map[string]any{"addr": "127.0.0.1:0", "max_conns_per_source": -1},
		"admin":       map[string]any{"addr": "127.0.0.1:0", "token": token},
		"daemon":      map[string]any{"state_dir": filepath.Join(dir, "state")},
		"sessions":    map[string]any{"max_per_node": -1, "max_per_source": -1},
		"auth_limits": map[string]any{"per_source": benchPerSource},
	}
	if dsn != "" {
		cfg["db"] = map[string]any{"dsn": dsn}
	}
	for k, v := range extra {
		section, key, ok := strings.Cut(k, ".")
		if !ok {
			cfg[k] = v
			continue
		}
		m, _ := cfg[section].(map[string]any)
		if m == nil {
			m = map[string]any{}
			cfg[section] = m
		}
		m[key] = v
	}
	data, _ := json.Marshal(cfg) // JSON is YAML
	file := filepath.Join(dir, "obmd.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return nil, err
	}
	var addrs struct{ SSH, Admin string }
	cmd := exec.Command(bin, "serve", "--config", file, "--log-format", "json", "--log-level", "info")
	cmd.Dir = dir
	c, err := startChild(cmd, filepath.Join(dir, "obmd.log"), 60*time.Second, func(line string) bool {
		if !strings.Contains(line, `"obmd_listening"`) {
			return false
		}
		return json.Unmarshal([]byte(line), &addrs) == nil && addrs.SSH != ""
	})
	if err != nil {
		return nil, err
	}
	return &obmdProc{child: c, SSHAddr: addrs.SSH, AdminAddr: addrs.Admin, AdminToken: token,
		http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// admin is a client of an obmd admin API.
type admin struct {
	addr, token string
	http        *http.Client
}

func (o *obmdProc) admin() admin { return admin{o.AdminAddr, o.AdminToken, o.http} }

// call sends an admin request and decodes a 2xx JSON answer into out.
func (a admin) call(method, path string, body, out any) error {
	_, err := a.callSized(method, path, body, out)
	return err
}

// callSized is call that also returns the answer's size; out is decoded
// once the whole answer has been read.
func (a admin) callSized(method, path string, body, out any) (int, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, "http://"+a.addr+path, r)
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth("admin", a.token)
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return len(data), fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return len(data), fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(data))
	}
	if out != nil {
		return len(data), json.Unmarshal(data, out)
	}
	return len(data), nil
}

// addNode registers label with driver typ and returns a fresh token.
func (a admin) addNode(label, typ string, info sol.Info) (string, error) {
	if err := a.call("PUT", "/node/"+url.PathEscape(label), map[string]any{"type": typ, "info": info}, nil); err != nil {
		return "", err
	}
	return a.rotate(label)
}

// rotate issues a new token for label (cutting its sessions).
func (a admin) rotate(label string) (string, error) {
	var out struct{ Token string }
	if err := a.call("POST", "/node/"+url.PathEscape(label)+"/token", nil, &out); err != nil {
		return "", err
	}
	if out.Token == "" {
		return "", errors.New("rotate: no token in the answer")
	}
	return out.Token, nil
}

// addSimNodes registers labels prefix-000.. on the simulator and returns
// their tokens.
func (a admin) addSimNodes(prefix string, n int) ([]string, error) {
	tokens := make([]string, n)
	for i := range n {
		t, err := a.addNode(fmt.Sprintf("%s-%03d", prefix, i), "sim", simInfo)
		if err != nil {
			return nil, err
		}
		tokens[i] = t
	}
	return tokens, nil
}
