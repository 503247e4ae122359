package access

// Secrets end to end: a daemon logging at debug goes through every flow
// with real secrets (node tokens, old and new; the admin token; a BMC
// password; an SSH private key), and none of them shows up in its logs,
// its audit rows, its API responses (but the one answer that issues a
// token), or the argument lists of its child processes (ipmitool).

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// recorder keeps every text obmd showed: API bodies, SSH output.
type recorder struct {
	t    *testing.T
	o    *obmdtest.Daemon
	mu   sync.Mutex
	seen []shownText
}

type shownText struct {
	where string
	text  string
	allow string // a secret this text may hold (a token it issues)
}

func (r *recorder) add(where, text, allow string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, shownText{where, text, allow})
}

// api sends an admin request and records the answer.
func (r *recorder) api(method, path string, body any) (int, []byte) {
	r.t.Helper()
	status, data := r.o.API(method, path, body)
	r.add(method+" "+path, string(data), "")
	return status, data
}

// request is api with other credentials (user "" sends none).
func (r *recorder) request(method, path string, body any, user, pass string) (int, []byte) {
	r.t.Helper()
	status, data := r.o.Request(method, path, body, user, pass)
	r.add(method+" "+path, string(data), "")
	return status, data
}

// rotate issues a token; its answer is the one place the token may show.
func (r *recorder) rotate(label string) string {
	r.t.Helper()
	status, data := r.o.API("POST", "/node/"+label+"/token", nil)
	var out struct{ Token string }
	if status != 200 || json.Unmarshal(data, &out) != nil || out.Token == "" {
		r.t.Fatalf("rotate %s: got %d %s", label, status, data)
	}
	r.add("POST /node/"+label+"/token", string(data), out.Token)
	return out.Token
}

// exec runs line over SSH and records the output, or the error (exit -1)
// when the login (or the session) failed.
func (r *recorder) exec(user string, auth gossh.AuthMethod, line string) obmdtest.Result {
	r.t.Helper()
	res, err := obmdtest.ExecSSH(r.o.SSHAddr(), user, line, auth)
	if err != nil {
		res = obmdtest.Result{Code: -1, Stderr: err.Error()}
	}
	r.add("ssh "+user+" "+line, res.Stdout+res.Stderr, "")
	return res
}

// children watches the argument lists of this process's children (the
// daemon runs in it) until stop is closed. ssh and sshpass are the tests'
// own clients, not obmd's children.
type children struct {
	mu    sync.Mutex
	seen  map[string]string // pid -> "comm: argv"
	stop  chan struct{}
	ended chan struct{}
}

func watchChildren() *children {
	c := &children{seen: map[string]string{}, stop: make(chan struct{}), ended: make(chan struct{})}
	self := strconv.Itoa(os.Getpid())
	go func() { // ends when stop is closed; closes ended
		defer close(c.ended)
		t := time.NewTicker(3 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
			}
			entries, _ := os.ReadDir("/proc")
			for _, e := range entries {
				pid := e.Name()
				if pid[0] < '0' || pid[0] > '9' {
					continue
				}
				stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
				if err != nil {
					continue
				}
				// pid (comm) state ppid ...: comm may hold spaces.
				i := strings.LastIndexByte(string(stat), ')')
				if i < 0 {
					continue
				}
				f := strings.Fields(string(stat[i+1:]))
				if len(f) < 2 || f[1] != self {
					continue
				}
				comm := string(stat[strings.IndexByte(string(stat), '(')+1 : i])
				if comm == "ssh" || comm == "sshpass" {
					continue
				}
				argv, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
				if err != nil || len(argv) == 0 {
					continue
				}
				c.mu.Lock()
				c.seen[pid] = comm + ": " + strings.ReplaceAll(string(argv), "\x00", " ")
				c.mu.Unlock()
			}
		}
	}()
	return c
}

func (c *children) finish() map[string]string {
	close(c.stop)
	<-c.ended
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

func TestSecretsNeverLeak(t *testing.T) {
	ipmisim.Require(t, "ipmitool", "ssh", "sshpass")
	s := ipmisim.Start(t)
	o := obmdtest.Start(t)
	children := watchChildren()
	rec := &recorder{t: t, o: o}
	var tokens []string
	signer, keyPath := obmdtest.NewKey(t)
	keyFile, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}

	// Register: the ipmitool driver (child processes) and the native one,
	// through both APIs, plus refused and conflicting registrations that
	// carry the password.
	info := s.Info()
	bmc := map[string]any{"addr": info.Addr, "port": info.Port, "user": info.User, "pass": info.Pass, "cipher": 3}
	for _, req := range []struct {
		method, path string
		body         any
		status       int
	}{
		{"PUT", "/node/tool", map[string]any{"type": "ipmitool", "info": bmc}, 200},
		{"PUT", "/node/tool", map[string]any{"type": "ipmitool", "info": bmc}, 200},
		{"PUT", "/v1/nodes/native", map[string]any{"type": "ipmi", "info": bmc}, 409}, // tool's BMC: the answer names it
		{"PUT", "/v1/nodes/native?allow_shared_bmc=1", map[string]any{"type": "ipmi", "info": bmc}, 201},
		{"PUT", "/node/tool", map[string]any{"type": "ipmi", "info": bmc}, 409},
		{"PUT", "/node/bad", map[string]any{"type": "ipmi", "info": map[string]any{"addr": "h", "user": "u", "pass": info.Pass + "\x01"}}, 400},
		{"PUT", "/node/bad", map[string]any{"type": "ipmi", "info": map[string]any{"addr": "h", "user": "u", "pass": info.Pass, "port": 99999}}, 400},
		{"PUT", "/v1/nodes/bad", map[string]any{"type": "mock", "info": map[string]any{"addr": "h", "pass": info.Pass}}, 400},
		{"PUT", "/node/bad", `{"type":"ipmi","info":{"addr":"h","user":"u","pass":"` + info.Pass + `"`, 400},
		{"PUT", "/v1/nodes/native", map[string]any{"type": "ipmi", "info": bmc}, 200},
	} {
		if status, body := rec.api(req.method, req.path, req.body); status != req.status {
			t.Errorf("%s %s: got %d %s, want %d", req.method, req.path, status, body, req.status)
		}
	}

	// Grant: rotate a few times (every token ever issued is a secret),
	// keys added and removed, a revocation.
	for i := 0; i < 3; i++ {
		tokens = append(tokens, rec.rotate("tool"))
	}
	rec.api("DELETE", "/node/native/token", nil)
	tokens = append(tokens, rec.rotate("native"))
	tool, native := tokens[2], tokens[3]
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	rec.api("POST", "/v1/nodes/tool/keys", map[string]string{"key": line + " tenant@laptop"})
	other, _ := obmdtest.NewKey(t)
	fpOther := rec.o.AddKey("native", other.PublicKey())
	rec.api("DELETE", "/v1/nodes/native/keys/"+url.PathEscape(fpOther), nil)
	rec.api("GET", "/v1/nodes", nil)
	rec.api("GET", "/v1/nodes/tool", nil)
	rec.api("GET", "/v1/nodes/tool/keys", nil)

	// Use: SSH with the token (password and keyboard-interactive) and the
	// key, power operations on both drivers, a console and an HTTP console
	// on the ipmitool driver (a long-lived ipmitool child).
	for _, c := range []struct {
		user string
		auth gossh.AuthMethod
		line string
	}{
		{"tool", gossh.Password(tool), "power-status"},
		{"tool", gossh.PublicKeys(signer), "power-cycle --force"},
		{"tool", gossh.Password(tool), "bootdev pxe --json"},
		{"tool", gossh.Password(tool), "sessions"},
		{"native", gossh.KeyboardInteractive(func(_, _ string, q []string, _ []bool) ([]string, error) {
			return []string{native}, nil
		}), "power-on"},
		{"native", gossh.Password(native), "power-status --json"},
	} {
		if res := rec.exec(c.user, c.auth, c.line); res.Code != 0 {
			t.Errorf("%s %q: got %v, want exit 0", c.user, c.line, res)
		}
	}
	con := o.GoConsole(t, "tool", tool, obmdtest.SessionOpts{})
	con.Stderr.Wait(t, "console banner", 0, "console of tool")
	web := o.ConsoleHTTP(t, "tool", tool)
	obmdtest.PrintUntilSeen(t, s.WriteSerial, "boot-line", obmdtest.Shows(con.Out))
	obmdtest.PrintUntilSeen(t, s.WriteSerial, "boot-line", obmdtest.Shows(web.Out))
	rec.add("console", con.Out.String()+con.Stderr.String(), "")
	rec.add("HTTP console", web.Out.String(), "")
	res := o.OpenSSH("tool", tool, nil, "power-status") // the real client, password via sshpass
	rec.add("openssh", res.Stdout+res.Stderr, "")
	for _, p := range []string{"/node/tool/power_status?token=" + tool, "/node/native/power_status?token=" + native} {
		rec.request("GET", p, nil, "", "")
	}
	rec.request("POST", "/node/tool/power_cycle?token="+tool, `{"force":false}`, "", "")

	// Bad logins carrying secrets where they do not belong: old tokens, the
	// admin token, the BMC password, a token of another node; and the same
	// on the HTTP side.
	for _, c := range []struct{ user, pass string }{
		{"tool", tokens[0]}, {"tool", o.AdminToken()}, {"tool", info.Pass}, {"native", tool},
		{"ghost", tool}, {"tool", tool + "x"},
	} {
		rec.exec(c.user, gossh.Password(c.pass), "power-status")
	}
	rec.request("GET", "/v1/nodes", nil, "admin", tokens[0])
	rec.request("GET", "/v1/nodes", nil, "admin", o.AdminToken()+"x")
	rec.request("GET", "/v1/nodes", nil, o.AdminToken(), o.AdminToken())
	rec.request("GET", "/node/tool/power_status?token="+tokens[0], nil, "", "")
	rec.request("GET", "/node/tool/console?token="+info.Pass, nil, "", "")
	rec.request("POST", "/node/native/power_on?token="+tool, nil, "", "")

	// Revocation with the sessions still up, then the audit log.
	tokens = append(tokens, rec.rotate("tool"))
	con.End.Wait(t, "console")
	web.End.Wait(t, "HTTP console")
	rec.add("cut console", con.Out.String()+con.Stderr.String(), "")
	seenChildren := children.finish()
	_, audit := rec.api("GET", "/v1/audit?limit=1000", nil)
	var events struct{ Events []map[string]any }
	if err := json.Unmarshal(audit, &events); err != nil || len(events.Events) < 20 {
		t.Fatalf("audit: got %d rows (%v), want the whole story", len(events.Events), err)
	}

	// The secrets, and where to look.
	secrets := map[string]string{"admin token": o.AdminToken(), "BMC password": info.Pass}
	for i, tok := range tokens {
		secrets[fmt.Sprintf("token #%d", i+1)] = tok
	}
	block, _ := pem.Decode(keyFile)
	if block == nil {
		t.Fatal("private key file is not PEM")
	}
	for i, l := range strings.Split(strings.TrimSpace(string(pem.EncodeToMemory(block))), "\n") {
		if len(l) >= 40 && !strings.HasPrefix(l, "-----") {
			secrets[fmt.Sprintf("private key line %d", i)] = l
		}
	}
	for name, secret := range secrets {
		if i := strings.Index(o.Logs.String(), secret); i >= 0 {
			t.Errorf("the log holds the %s: ...%s...", name, o.Logs.String()[max(0, i-200):i])
		}
		for _, e := range events.Events {
			if b, _ := json.Marshal(e); strings.Contains(string(b), secret) {
				t.Errorf("audit row %s holds the %s", b, name)
			}
		}
		for _, txt := range rec.seen {
			if strings.Contains(txt.text, secret) && txt.allow != secret {
				t.Errorf("%s answered with the %s: %s", txt.where, name, obmdtest.Tail(txt.text, 300))
			}
		}
		for pid, argv := range seenChildren {
			if strings.Contains(argv, secret) {
				t.Errorf("child %s has the %s in its arguments: %s", pid, name, argv)
			}
		}
	}
	// The watch did see obmd's children: ipmitool's SOL session at least.
	sol := 0
	for _, argv := range seenChildren {
		if strings.HasPrefix(argv, "ipmitool:") && strings.Contains(argv, "sol activate") {
			sol++
		}
	}
	if sol == 0 {
		t.Errorf("saw no ipmitool SOL child among %d children: the argument check checked nothing", len(seenChildren))
	}
	t.Logf("checked %d secrets in %d log bytes, %d audit rows, %d answers, %d child argument lists",
		len(secrets), len(o.Logs.String()), len(events.Events), len(rec.seen), len(seenChildren))
}
