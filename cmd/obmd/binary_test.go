package main

// The harness for tests against the real obmd binary: built once per test
// run (with -race when the tests are), started as a child process on
// 127.0.0.1:0, its addresses read from the "obmd_listening" log line, talked
// to with net/http as HIL's client does, and stopped with signals.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite"

	"github.com/obmd/obmd/db/dbtest"
)

// testVersion is linked into the test binary.
const testVersion = "v0.0.0-e2e"

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// obmdBinary builds cmd/obmd once per test run and returns its path.
func obmdBinary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "obmd-bin-")
		if build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "obmd")
		args := []string{"build", "-o", build.bin, "-ldflags", "-X main.version=" + testVersion}
		if raceEnabled {
			args = append(args, "-race")
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		out, err := exec.Command(goTool, append(args, ".")...).CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

// childEnv is this process's environment without OBMD_* variables, plus env.
func childEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OBMD_") {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

// lockedBuffer collects a child's output while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runObmd runs the binary to completion (at most a minute) and returns its
// exit code and output.
func runObmd(t testing.TB, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runObmdIn(t, "", env, args...)
}

// runObmdIn is runObmd in working directory dir ("": this process's).
func runObmdIn(t testing.TB, dir string, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, obmdBinary(t), args...)
	c.Env, c.Dir = childEnv(env), dir
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run obmd %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("obmd %v did not exit within a minute; stderr:\n%s", args, e.String())
	}
	return code, o.String(), e.String()
}

// proc is a running `obmd serve`.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{} // closed by the waiter goroutine when the process has exited
	code   int           // exit code, valid after done

	// From the obmd_listening line.
	SSHAddr, AdminAddr, HostKey, TokenFile string
	TLS                                    bool
	client                                 *http.Client
}

// startObmd runs `obmd serve args...` with env and waits until it listens.
// The process is killed (by PID) at the end of the test if still running.
func startObmd(t testing.TB, env map[string]string, args ...string) *proc {
	t.Helper()
	c := exec.Command(obmdBinary(t), append([]string{"serve"}, args...)...)
	c.Env = childEnv(env)
	p := &proc{t: t, cmd: c, stderr: &lockedBuffer{}, done: make(chan struct{}),
		client: &http.Client{Timeout: 30 * time.Second}}
	c.Stdout, c.Stderr = p.stderr, p.stderr
	if err := c.Start(); err != nil {
		t.Fatalf("start obmd: %v", err)
	}
	go func() { // owned by p: done tells its end, the cleanup waits for it
		err := c.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = c.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("obmd stderr:\n%s", tail(p.stderr.String(), 8000))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if line, ok := p.logLine("obmd_listening"); ok {
			p.SSHAddr, _ = line["ssh"].(string)
			p.AdminAddr, _ = line["admin"].(string)
			p.HostKey, _ = line["host_key"].(string)
			p.TokenFile, _ = line["admin_token_file"].(string)
			p.TLS, _ = line["tls"].(bool)
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("obmd exited with %d before listening; output:\n%s", p.code, p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("obmd did not log obmd_listening within 60 s; output:\n%s", p.stderr.String())
		}
	}
}

// logLine returns the first JSON log line whose msg is msg.
func (p *proc) logLine(msg string) (map[string]any, bool) {
	return findLog(p.stderr.String(), msg)
}

func findLog(out, msg string) (map[string]any, bool) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			return m, true
		}
	}
	return nil, false
}

// checkJSONLogs fails unless every line obmd wrote is a JSON log line, but
// for the two lines that show a newly generated admin token.
func (p *proc) checkJSONLogs() {
	p.t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(p.stderr.String()), "\n") {
		if strings.HasPrefix(line, "obmd: generated the admin token: ") || strings.HasPrefix(line, "      (stored in ") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["msg"] == nil || m["level"] == nil {
			p.t.Errorf("obmd's stderr is not a terminal, so every log line should be JSON; got %q", line)
		}
	}
}

// stop sends sig and waits up to limit for the exit; it returns the exit
// code and how long the exit took.
func (p *proc) stop(sig syscall.Signal, limit time.Duration) (int, time.Duration) {
	p.t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal obmd: %v", err)
	}
	select {
	case <-p.done:
		return p.code, time.Since(start)
	case <-time.After(limit):
		p.t.Fatalf("obmd did not exit within %v of %v", limit, sig)
		return 0, 0
	}
}

// adminToken reads the generated admin token file.
func (p *proc) adminToken() string {
	p.t.Helper()
	data, err := os.ReadFile(p.TokenFile)
	if err != nil {
		p.t.Fatalf("read admin token: %v", err)
	}
	return strings.TrimSpace(string(data))
}

func (p *proc) baseURL() string {
	if p.TLS {
		return "https://" + p.AdminAddr
	}
	return "http://" + p.AdminAddr
}

// do sends one request as HIL's client does (JSON body, no Content-Type
// header); user "" sends no basic auth.
func (p *proc) do(method, path, body, user, pass string) (int, string) {
	p.t.Helper()
	resp := p.send(method, path, body, user, pass)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, string(data)
}

// send sends a request and returns the response with its body unread.
func (p *proc) send(method, path, body, user, pass string) *http.Response {
	p.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, p.baseURL()+path, r)
	if err != nil {
		p.t.Fatalf("request %s %s: %v", method, path, err)
	}
	if req.Header.Get("Content-Type") != "" {
		p.t.Fatalf("request %s %s has a Content-Type", method, path)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// must is do as admin that fails the test unless the status is want.
func (p *proc) must(want int, method, path, body, adminToken string) string {
	p.t.Helper()
	code, got := p.do(method, path, body, "admin", adminToken)
	if code != want {
		p.t.Fatalf("%s %s: got %d %q, want %d", method, path, code, got, want)
	}
	return got
}

// useTLS makes p's client trust roots.
func (p *proc) useTLS(cfg *tls.Config) {
	p.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// engine is a database engine for the binary: the value of OBMD_DB ("" =
// the default SQLite file in the state directory) and how to read it back.
type engine struct {
	name string
	dsn  func(t *testing.T, stateDir string) string
}

func engines() []engine {
	return []engine{
		{"sqlite", func(t *testing.T, stateDir string) string { return "" }},
		{"mysql", func(t *testing.T, _ string) string { return dbtest.MySQLDSN(t) }},
		{"postgres", func(t *testing.T, _ string) string { return dbtest.PostgresDSN(t) }},
	}
}

// onEngines runs f on SQLite, MariaDB and PostgreSQL (the last two skipped
// without their DSN, fatal under OBMD_REQUIRE_INTEGRATION=1).
func onEngines(t *testing.T, f func(t *testing.T, e engine)) {
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) { f(t, e) })
	}
}

// openDB opens obmd's database read-side for inspection: dsn as given to
// OBMD_DB, or "" for stateDir's SQLite file.
func openDB(t testing.TB, dsn, stateDir string) (*sql.DB, string) {
	t.Helper()
	if strings.HasPrefix(dsn, "mysql://") {
		conn, err := sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
		if err != nil {
			t.Fatal(err)
		}
		return conn, "mysql"
	}
	if strings.HasPrefix(dsn, "postgres://") {
		conn, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		return conn, "postgres"
	}
	if dsn == "" {
		dsn = filepath.Join(stateDir, "obmd.db")
	}
	conn, err := sql.Open("sqlite", "file:"+dsn+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	return conn, "sqlite"
}

// dumpDB returns every row of every table as text, one "table: v1 | v2..."
// line per row.
func dumpDB(t testing.TB, dsn, stateDir string) string {
	t.Helper()
	conn, dialect := openDB(t, dsn, stateDir)
	defer conn.Close()
	q := "SELECT name FROM sqlite_master WHERE type = 'table'"
	switch dialect {
	case "mysql":
		q = "SHOW TABLES"
	case "postgres":
		q = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
	}
	tables := queryStrings(t, conn, q)
	if len(tables) < 3 {
		t.Fatalf("dump: got tables %v, want obmd's schema", tables)
	}
	var out strings.Builder
	for _, table := range tables {
		rows, err := conn.Query("SELECT * FROM " + table)
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatalf("dump %s: %v", table, err)
			}
			out.WriteString(table + ":")
			for _, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				fmt.Fprintf(&out, " %v |", v)
			}
			out.WriteString("\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		rows.Close()
	}
	return out.String()
}

func queryStrings(t testing.TB, conn *sql.DB, q string) []string {
	t.Helper()
	rows, err := conn.Query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
