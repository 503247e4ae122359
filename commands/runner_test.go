package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/printable"
)

// fakeBMC records calls. When gate is set, every call (or only the call
// named slow, when set) first reports on started, if set, and then waits for
// gate to close or ctx to end: a hung BMC that honours ctx, as sol.BMC
// requires.
type fakeBMC struct {
	status  string
	err     error
	gate    chan struct{}
	slow    string
	started chan string

	mu    sync.Mutex
	calls []string
}

func (f *fakeBMC) do(ctx context.Context, call string) error {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	if f.gate != nil && (f.slow == "" || f.slow == call) {
		if f.started != nil {
			f.started <- call
		}
		select {
		case <-f.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return f.err
}

func (f *fakeBMC) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeBMC) PowerStatus(ctx context.Context) (string, error) {
	if err := f.do(ctx, "status"); err != nil {
		return "", err
	}
	return f.status, nil
}
func (f *fakeBMC) PowerOn(ctx context.Context) error { return f.do(ctx, "on") }
func (f *fakeBMC) PowerOff(ctx context.Context, soft bool) error {
	return f.do(ctx, fmt.Sprintf("off soft=%t", soft))
}
func (f *fakeBMC) PowerCycle(ctx context.Context) error { return f.do(ctx, "cycle") }
func (f *fakeBMC) PowerReset(ctx context.Context) error { return f.do(ctx, "reset") }
func (f *fakeBMC) SetBootDevice(ctx context.Context, dev string, persistent bool) error {
	return f.do(ctx, fmt.Sprintf("bootdev %s persistent=%t", dev, persistent))
}

type fakeResolver map[string]BMC

func (m fakeResolver) Resolve(_ context.Context, label string) (BMC, error) {
	b, ok := m[label]
	if !ok {
		return nil, errors.New("node not found")
	}
	return b, nil
}

type fakeConsoles map[string][]byte

func (m fakeConsoles) Scrollback(label string) []byte { return m[label] }

type fakeSessions map[string][]SessionInfo

func (m fakeSessions) Sessions(node string) []SessionInfo { return m[node] }

type fakeAuditor struct {
	mu     sync.Mutex
	events []Event
}

func (a *fakeAuditor) Audit(ctx context.Context, e Event) {
	if ctx.Err() != nil {
		e.Detail = "AUDIT CONTEXT DONE"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, e)
}

func (a *fakeAuditor) Events() []Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Event(nil), a.events...)
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type testEnv struct {
	r     *Runner
	bmcs  fakeResolver
	audit *fakeAuditor
}

func newEnv(t *testing.T, cfg Config) *testEnv {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	env := &testEnv{
		bmcs:  fakeResolver{"node-17": &fakeBMC{status: sol.PowerOn}, "mock-1": &fakeBMC{status: "Mock Status"}},
		audit: &fakeAuditor{},
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return t0 }
	}
	consoles := fakeConsoles{"node-17": []byte("line 1\r\nline 2\r\n\x1b[1mline 3\x1b[0m\r\n")}
	sessions := fakeSessions{"node-17": {
		{ID: "7", Kind: "exec", User: "token", Remote: "10.0.0.2:4242", Started: t0.Add(-5 * time.Second)},
		{ID: "3", Kind: "console", User: "key SHA256:abc", Remote: "10.0.0.1:5555", Started: t0.Add(-3 * time.Minute), Writer: true},
	}}
	r, err := NewRunner(cfg, env.bmcs, consoles, sessions, env.audit, log)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	env.r = r
	return env
}

func req(node string) Request {
	return Request{Node: node, Actor: "ssh:password", User: "token", Source: "10.0.0.2:5000", Session: "42"}
}

// run parses line and runs it the way the SSH layer does.
func run(t *testing.T, r *Runner, ctx context.Context, node, line string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	argv, err := Split(line)
	if err != nil {
		code = WriteError(&out, &errb, node, Command{}, err)
		return out.String(), errb.String(), code
	}
	cmd, err := Parse(argv)
	if err != nil {
		code = WriteError(&out, &errb, node, cmd, err)
		return out.String(), errb.String(), code
	}
	code = r.Run(ctx, req(node), cmd, &out, &errb)
	return out.String(), errb.String(), code
}

func TestNewRunnerValidates(t *testing.T) {
	log := logrus.New()
	ok := func(c Config, b Resolver, co Consoles, s Sessions, a Auditor, l logrus.FieldLogger) error {
		_, err := NewRunner(c, b, co, s, a, l)
		return err
	}
	b, co, s, a := fakeResolver{}, fakeConsoles{}, fakeSessions{}, &fakeAuditor{}
	tests := []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"all set", ok(Config{}, b, co, s, a, log), false},
		{"negative timeout", ok(Config{Timeout: -1}, b, co, s, a, log), true},
		{"nil resolver", ok(Config{}, nil, co, s, a, log), true},
		{"nil consoles", ok(Config{}, b, nil, s, a, log), true},
		{"nil sessions", ok(Config{}, b, co, nil, a, log), true},
		{"nil auditor", ok(Config{}, b, co, s, nil, log), true},
		{"nil logger", ok(Config{}, b, co, s, a, nil), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err != nil; got != tt.wantErr {
				t.Errorf("got error %v, want error %v", tt.err, tt.wantErr)
			}
		})
	}
}

func TestRunText(t *testing.T) {
	tests := []struct {
		node, line string
		want       string
		calls      []string
	}{
		{"node-17", "power-status", "node-17: power on\n", []string{"status"}},
		{"mock-1", "power-status", "mock-1: power Mock Status\n", []string{"status"}},
		{"node-17", "power-on", "node-17: powered on\n", []string{"on"}},
		{"node-17", "power-off", "node-17: powered off\n", []string{"off soft=false"}},
		{"node-17", "power-off --soft", "node-17: soft power-off requested\n", []string{"off soft=true"}},
		{"node-17", "power-cycle", "node-17: power cycled\n", []string{"cycle"}},
		{"node-17", "power-cycle --force", "node-17: reset\n", []string{"reset"}},
		{"node-17", "power-reset", "node-17: reset\n", []string{"reset"}},
		{"node-17", "bootdev pxe", "node-17: next boot from pxe\n", []string{"bootdev pxe persistent=false"}},
		{"node-17", "bootdev disk --persistent", "node-17: next boot from disk (persistent)\n", []string{"bootdev disk persistent=true"}},
		{"node-17", "console-log", "line 1\r\nline 2\r\n\x1b[1mline 3\x1b[0m\r\n", nil},
		{"node-17", "console-log --lines 2", "line 2\r\n\x1b[1mline 3\x1b[0m\r\n", nil},
		{"node-17", "console-log --lines=1", "\x1b[1mline 3\x1b[0m\r\n", nil},
		{"node-17", "console-log --lines 99", "line 1\r\nline 2\r\n\x1b[1mline 3\x1b[0m\r\n", nil},
		{"node-9", "console-log", "", nil},
		{"node-17", "version", "1.2.3\n", nil},
		{"node-17", "help", Usage(), nil},
		{"node-17", "help power-cycle", CommandUsage(CmdPowerCycle), nil},
		{"node-17", "bootdev --help", CommandUsage(CmdBootdev), nil},
		// The requester (the token from 10.0.0.2) sees its own session in
		// full, the key holder's from 10.0.0.1 without user or address.
		{"node-17", "sessions", "ID  KIND     USER   REMOTE         STARTED                          WRITER\n" +
			"3   console  -      -              2026-11-29T11:57:00Z (3m0s ago)  yes\n" +
			"7   exec     token  10.0.0.2:4242  2026-11-29T11:59:55Z (5s ago)    -\n", nil},
		{"node-9", "sessions", "no sessions\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.node+" "+tt.line, func(t *testing.T) {
			env := newEnv(t, Config{Version: "1.2.3"})
			stdout, stderr, code := run(t, env.r, context.Background(), tt.node, tt.line)
			if code != ExitOK || stderr != "" {
				t.Fatalf("got exit %d, stderr %q, want 0 and nothing", code, stderr)
			}
			if stdout != tt.want {
				t.Errorf("got stdout %q, want %q", stdout, tt.want)
			}
			var calls []string
			if b, ok := env.bmcs[tt.node].(*fakeBMC); ok {
				calls = b.Calls()
			}
			if strings.Join(calls, ";") != strings.Join(tt.calls, ";") {
				t.Errorf("got BMC calls %q, want %q", calls, tt.calls)
			}
		})
	}
}

func TestRunJSON(t *testing.T) {
	tests := []struct {
		line string
		want map[string]any
	}{
		{"power-status --json", map[string]any{"node": "node-17", "command": "power-status", "ok": true, "power": "on"}},
		{"power-on --json", map[string]any{"node": "node-17", "command": "power-on", "ok": true}},
		{"power-off --json --soft", map[string]any{"node": "node-17", "command": "power-off", "ok": true}},
		{"power-cycle --force --json", map[string]any{"node": "node-17", "command": "power-cycle", "ok": true}},
		{"power-reset --json", map[string]any{"node": "node-17", "command": "power-reset", "ok": true}},
		{"bootdev --json pxe", map[string]any{"node": "node-17", "command": "bootdev", "ok": true, "bootdev": "pxe", "persistent": false}},
		{"bootdev bios --persistent --json", map[string]any{"node": "node-17", "command": "bootdev", "ok": true, "bootdev": "bios", "persistent": true}},
		{"console-log --json --lines 1", map[string]any{"node": "node-17", "command": "console-log", "ok": true, "log": "\x1b[1mline 3\x1b[0m\r\n"}},
		{"version --json", map[string]any{"node": "node-17", "command": "version", "ok": true, "version": "1.2.3"}},
		{"help --json", map[string]any{"node": "node-17", "command": "help", "ok": true, "help": Usage()}},
		{"sessions --json", map[string]any{"node": "node-17", "command": "sessions", "ok": true, "sessions": []any{
			map[string]any{"id": "7", "kind": "exec", "user": "token", "remote": "10.0.0.2:4242", "started": "2026-11-29T11:59:55Z", "own": true},
			map[string]any{"id": "3", "kind": "console", "started": "2026-11-29T11:57:00Z", "writer": true},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			env := newEnv(t, Config{Version: "1.2.3"})
			stdout, stderr, code := run(t, env.r, context.Background(), "node-17", tt.line)
			if code != ExitOK || stderr != "" {
				t.Fatalf("got exit %d, stderr %q, want 0 and nothing", code, stderr)
			}
			if strings.Count(stdout, "\n") != 1 || !strings.HasSuffix(stdout, "\n") {
				t.Errorf("got %q, want one JSON line", stdout)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("decode %q: %v", stdout, err)
			}
			if g, w := fmt.Sprint(got), fmt.Sprint(tt.want); g != w {
				t.Errorf("got %s, want %s", g, w)
			}
		})
	}
}

func TestRunJSONEmptySessions(t *testing.T) {
	env := newEnv(t, Config{})
	stdout, _, code := run(t, env.r, context.Background(), "node-9", "sessions --json")
	if want := `{"node":"node-9","command":"sessions","ok":true,"sessions":[]}` + "\n"; code != 0 || stdout != want {
		t.Errorf("got %d %q, want 0 %q", code, stdout, want)
	}
	stdout, _, _ = run(t, env.r, context.Background(), "node-9", "console-log --json")
	if want := `{"node":"node-9","command":"console-log","ok":true,"log":""}` + "\n"; stdout != want {
		t.Errorf("got %q, want %q", stdout, want)
	}
}

func TestRunErrors(t *testing.T) {
	badBoot := fmt.Errorf("set boot device: %w", sol.ErrBadBootDevice)
	tests := []struct {
		name, node, line string
		bmcErr           error
		wantCode         int
		wantStderr       []string // substrings
		wantJSONErr      string   // substring of "error" when --json
	}{
		{"bmc refuses credentials", "node-17", "power-on", sol.NewError(sol.FaultCredentials, errors.New("connect to BMC 192.0.2.7:623: rmcp+: session rejected")), ExitFailed,
			[]string{"obmd: power on node-17: the BMC refused obmd's credentials\n"}, ""},
		{"bmc silent json", "node-17", "power-cycle --json", sol.NewError(sol.FaultNoAnswer, errors.New("read udp 192.0.2.7:623: i/o timeout")), ExitFailed,
			[]string{"obmd: power cycle node-17: the BMC did not answer\n"}, "power cycle node-17: the BMC did not answer"},
		{"status unreachable", "node-17", "power-status", sol.NewError(sol.FaultUnreachable, errors.New("read udp 192.0.2.7:623: connection refused")), ExitFailed,
			[]string{"obmd: power status of node-17: the BMC is unreachable\n"}, ""},
		{"completion code json", "node-17", "power-reset --json", &sol.Error{Fault: sol.FaultRejected, Code: 0xd5, Err: errors.New("BMC 192.0.2.7:623 said 0xd5")}, ExitFailed,
			[]string{"obmd: reset node-17: the BMC rejected the request (completion code 0xd5)\n"}, "the BMC rejected the request (completion code 0xd5)"},
		{"unclassified driver error hidden", "node-17", "power-off --json", errors.New("ipmitool said \x1b[31mno\x1b[0m to 192.0.2.7"), ExitFailed,
			[]string{"obmd: power off node-17: the BMC operation failed\n"}, "power off node-17: the BMC operation failed"},
		{"unknown node", "node-404", "power-on", nil, ExitFailed,
			[]string{"obmd: power on node-404: the BMC operation failed"}, ""},
		{"bad boot device from driver", "node-17", "bootdev cdrom --json", badBoot, ExitUsage,
			[]string{"unsupported boot device"}, "unsupported boot device"},
		{"unknown command", "node-17", "foo", nil, ExitUsage,
			[]string{"obmd: unknown command \"foo\"; try \"help\"\nusage: ssh NODE@HOST", "power-cycle [--force]"}, ""},
		{"unknown command json", "node-17", "foo --json", nil, ExitUsage,
			[]string{"unknown command"}, `unknown command "foo"`},
		{"bad flag", "node-17", "power-on --soft", nil, ExitUsage,
			[]string{"obmd: power-on: unknown flag \"--soft\"; try \"help power-on\"\nusage: power-on [--wait-for RE] [--json]\n"}, ""},
		{"bad flag json", "node-17", "bootdev floppy --json", nil, ExitUsage,
			[]string{"usage: bootdev DEVICE [--persistent] [--json]"}, `unknown device "floppy"`},
		{"split error", "node-17", "power-on\t--json", nil, ExitUsage,
			[]string{`non-printable character '\t'`}, ""},
		{"console via Run", "node-17", "console", nil, ExitUsage,
			[]string{"console is interactive"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, Config{})
			env.bmcs["node-17"].(*fakeBMC).err = tt.bmcErr
			stdout, stderr, code := run(t, env.r, context.Background(), tt.node, tt.line)
			if code != tt.wantCode {
				t.Errorf("got exit %d, want %d", code, tt.wantCode)
			}
			for _, w := range tt.wantStderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("got stderr %q, want it to contain %q", stderr, w)
				}
			}
			if strings.Contains(stderr+stdout, "192.0.2.7") || strings.Contains(stderr+stdout, "rmcp+") {
				t.Errorf("got the driver's detail in the output: %q %q", stdout, stderr)
			}
			if strings.ContainsRune(stderr, 0x1b) || strings.ContainsRune(stdout, 0x1b) {
				t.Errorf("got a raw ESC in the output: %q %q", stdout, stderr)
			}
			if tt.wantJSONErr == "" {
				if stdout != "" {
					t.Errorf("got stdout %q, want nothing", stdout)
				}
				return
			}
			var got struct {
				Node, Command, Error string
				OK                   *bool
			}
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("decode %q: %v", stdout, err)
			}
			if got.Node != tt.node || got.OK == nil || *got.OK || !strings.Contains(got.Error, tt.wantJSONErr) {
				t.Errorf("got %+v, want node %s, ok false, error containing %q", got, tt.node, tt.wantJSONErr)
			}
		})
	}
}

func TestDoErrorsAreDetectable(t *testing.T) {
	env := newEnv(t, Config{})
	env.bmcs["node-17"].(*fakeBMC).err = fmt.Errorf("ipmi: %w", sol.ErrBadBootDevice)
	_, err := env.r.Do(context.Background(), req("node-17"), Command{Name: CmdBootdev, Device: "A"})
	if !errors.Is(err, sol.ErrBadBootDevice) {
		t.Errorf("got %v, want it to wrap sol.ErrBadBootDevice", err)
	}
	if got := env.bmcs["node-17"].(*fakeBMC).Calls(); len(got) != 1 || got[0] != "bootdev A persistent=false" {
		t.Errorf("got calls %q, want the driver to judge device A (obmd's mock accepts it)", got)
	}
	// The driver refused it before reaching the BMC: audited as refused,
	// which the audit counts rather than writing a row each.
	if ev := env.audit.Events(); len(ev) != 1 || ev[0].Action != ActionBootdev || ev[0].Result != ResultRefused {
		t.Errorf("audit: got %+v, want one bootdev event, result %s", ev, ResultRefused)
	}
	for _, cmd := range []Command{{Name: "nope"}, {Name: CmdBootdev}, {Name: CmdConsoleLog, Lines: -1}, {Name: CmdConsole}} {
		_, err := env.r.Do(context.Background(), req("node-17"), cmd)
		var ue *UsageError
		if !errors.As(err, &ue) {
			t.Errorf("Do(%+v): got %v, want a *UsageError", cmd, err)
		}
	}
	if _, err := env.r.Do(context.Background(), Request{}, Command{Name: CmdPowerOn}); err == nil || ExitCode(err) != ExitFailed {
		t.Errorf("got %v, want an error for a request without a node", err)
	}
}

func TestNodeLabelEscaped(t *testing.T) {
	env := newEnv(t, Config{})
	evil := "node\x1b]0;pwned\x07\u009b"
	env.bmcs[evil] = &fakeBMC{status: "o\x1bn"}
	for _, line := range []string{"power-status", "power-on", "bootdev pxe"} {
		stdout, stderr, code := run(t, env.r, context.Background(), evil, line)
		if code != ExitOK {
			t.Fatalf("%s: got exit %d (%s), want 0", line, code, stderr)
		}
		if !strings.HasPrefix(stdout, `node\x1b]0;pwned\a\u009b: `) || !printable.IsClean(strings.TrimSuffix(stdout, "\n")) {
			t.Errorf("%s: got %q, want the label escaped", line, stdout)
		}
	}
	stdout, _, _ := run(t, env.r, context.Background(), evil, "power-status --json")
	if strings.ContainsAny(stdout, "\x1b\x07\u009b") {
		t.Errorf("got %q, want JSON with every control character escaped", stdout)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil || m["node"] != evil || m["power"] != "o\x1bn" {
		t.Errorf("got %v %v, want the JSON to decode to the exact label %q", m, err, evil)
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{&UsageError{Msg: "x"}, ExitUsage},
		{fmt.Errorf("parse: %w", &UsageError{Msg: "x"}), ExitUsage},
		{fmt.Errorf("bootdev: %w", sol.ErrBadBootDevice), ExitUsage},
		{fmt.Errorf("power on n: %w", ErrBusy), ExitBusy},
		{ErrTimeout, ExitFailed},
		{context.Canceled, ExitFailed},
		{errors.New("boom"), ExitFailed},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v): got %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\nc\n", 0, "a\nb\nc\n"},
		{"a\nb\nc\n", 1, "c\n"},
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc\n", 3, "a\nb\nc\n"},
		{"a\nb\nc\n", 4, "a\nb\nc\n"},
		{"a\nb\nc", 1, "c"},
		{"a\nb\nc", 2, "b\nc"},
		{"\n\n", 1, "\n"},
		{"partial", 1, "partial"},
	}
	for _, tt := range tests {
		if got := string(lastLines([]byte(tt.in), tt.n)); got != tt.want {
			t.Errorf("lastLines(%q, %d): got %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// TestSessionsOwn: of the sessions listed, only those opened with the
// requester's credential from the requester's host are its own and shown
// in full; the same credential from another host (HIL streaming with the
// token), another credential from the same host, and a requester without
// a credential see none of them in full.
func TestSessionsOwn(t *testing.T) {
	list := []SessionInfo{
		{ID: "1", Kind: "http-console", User: "token", Remote: "127.0.0.2:4000", Started: t0},
		{ID: "2", Kind: "console", User: "token", Remote: "127.0.0.1:5000", Started: t0, Writer: true},
		{ID: "3", Kind: "console", User: "key SHA256:abc", Remote: "127.0.0.1:5001", Started: t0},
		{ID: "4", Kind: "exec", User: "token", Remote: "[::1]:6000", Started: t0},
	}
	tests := []struct {
		name string
		req  Request
		own  string // IDs shown in full
	}{
		{"token from 127.0.0.1", Request{User: "token", Source: "127.0.0.1:7000"}, "2"},
		{"key from 127.0.0.1", Request{User: "key SHA256:abc", Source: "127.0.0.1:7000"}, "3"},
		{"token from 127.0.0.2", Request{User: "token", Source: "127.0.0.2:7000"}, "1"},
		{"token from ::1", Request{User: "token", Source: "[::1]:7000"}, "4"},
		{"other key", Request{User: "key SHA256:xyz", Source: "127.0.0.1:7000"}, ""},
		{"no credential", Request{Source: "127.0.0.1:7000"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var own []string
			for i, s := range tenantView(list, tt.req) {
				if s.Own {
					own = append(own, s.ID)
					if s != (SessionInfo{ID: list[i].ID, Kind: list[i].Kind, User: list[i].User, Remote: list[i].Remote,
						Started: list[i].Started, Writer: list[i].Writer, Own: true}) {
						t.Errorf("own session %s: got %+v, want it in full", s.ID, s)
					}
					continue
				}
				if s != (SessionInfo{ID: list[i].ID, Kind: list[i].Kind, Started: list[i].Started, Writer: list[i].Writer}) {
					t.Errorf("session %s: got %+v, want kind, start and writer only", s.ID, s)
				}
			}
			if got := strings.Join(own, ","); got != tt.own {
				t.Errorf("own: got %q, want %q", got, tt.own)
			}
		})
	}
}

// TestSessionsOfTenancy: a requester is shown the sessions of its own
// tenancy only: a previous tenancy's, even with the same kind of
// credential from the same host (a former tenant's token session), is
// neither shown nor counted as its own, nor is a later one's (shown to a
// session of an ended tenancy that has not been cut yet).
func TestSessionsOfTenancy(t *testing.T) {
	list := []SessionInfo{
		{ID: "1", Kind: "exec", User: "token", Remote: "127.0.0.1:5000", Started: t0, Epoch: 6},
		{ID: "2", Kind: "console", User: "key SHA256:abc", Remote: "127.0.0.1:5001", Started: t0, Epoch: 6},
		{ID: "3", Kind: "console", User: "token", Remote: "127.0.0.1:5002", Started: t0, Epoch: 7},
		{ID: "4", Kind: "exec", User: "token", Remote: "127.0.0.1:5003", Started: t0, Epoch: 8},
	}
	for _, tt := range []struct {
		req   Request
		shown string
		own   string
	}{
		{Request{User: "token", Source: "127.0.0.1:7000", Epoch: 7}, "3", "3"},
		{Request{User: "key SHA256:abc", Source: "127.0.0.1:7000", Epoch: 7}, "3", ""},
		{Request{User: "token", Source: "127.0.0.1:7000", Epoch: 6}, "1,2", "1"},
		{Request{User: "token", Source: "127.0.0.1:7000", Epoch: 9}, "", ""},
	} {
		var shown, own []string
		for _, s := range tenantView(list, tt.req) {
			shown = append(shown, s.ID)
			if s.Own {
				own = append(own, s.ID)
			}
		}
		if got := strings.Join(shown, ","); got != tt.shown {
			t.Errorf("%+v: shown %q, want %q", tt.req, got, tt.shown)
		}
		if got := strings.Join(own, ","); got != tt.own {
			t.Errorf("%+v: own %q, want %q", tt.req, got, tt.own)
		}
	}
}
