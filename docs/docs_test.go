// Package docs holds no code: its tests run every shell example of README.md
// and docs/*.md against a real obmd.
//
// So a page that drifts from the code fails.
//
// How an example is written so that it runs:
//
//   - ```sh: each command (a trailing backslash or a here-document
//     continues it) is typed into a terminal and must exit 0; its output
//     is not compared.
//   - ```console: a transcript. "$ " starts a command; the lines after it
//     are what the terminal shows, compared after normalising (volatile
//     values such as tokens, fingerprints, times, client ports and session
//     IDs; runs of spaces; blank lines). "..." stands for any text in a
//     line, and a line "..." for any lines. «...» at the end of a line is
//     what the reader types once the line so far has appeared: «Enter»,
//     keys such as «Ctrl-E c .», «the token» (the last token the page
//     showed), or text followed by Enter. A transcript that starts without
//     "$ " continues the command still running in its terminal.
//   - In the info string: term=N (another terminal; default 1),
//     timeout=D (per command, default 30s), and "no-test: reason" for the
//     rare example that cannot run here; the test prints the reason.
//
// Each terminal is an interactive bash on a pty, so ssh prompts, consoles
// and escapes behave as for a reader. README.md runs first, from an empty
// $HOME in a fresh directory holding bin/obmd and bin/obmctl as `make
// build` leaves them; "make run" there runs what the Makefile's run target
// runs after its build (checked against the Makefile), so obmd listens on
// its defaults, 127.0.0.1:2222 and 127.0.0.1:8080. The docs/ pages then
// run in turn against one obmd on the same defaults (started as `obmd
// serve`), each from a fresh $HOME and directory, with the setup the
// pages describe: ~/.ssh/config from docs/tenant.md's ssh-config block,
// obmd's host key in ~/.ssh/known_hosts, a key ~/.ssh/id_ed25519
// registered on node-17 (the simulator) and node-42 (ipmi_sim on
// 127.0.0.1:9623, user admin), $TOKEN holding node-17's token, obmctl on
// PATH and ./obmd-state the obmd's state directory.
//
// The examples name obmd's default ports, and ipmi_sim's 9623, as a
// reader's machine has them, so the whole run happens in a network
// namespace of its own (see netns_test.go): its ports are free whatever
// else runs on the machine, and nothing of it is reachable from outside.
package docs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// pendingFix lists the examples that fail until a known defect is fixed:
// they are reported, not run. Remove an entry when its fix merges.
var pendingFix = map[string]string{}

// The ports the examples name: obmd's defaults and the example BMC's.
const (
	sshAddr   = "127.0.0.1:2222"
	adminAddr = "127.0.0.1:8080"
	webAddr   = "127.0.0.1:8081" // the web console's, as --demo and docs/operator.md set it
	bmcPort   = 9623
)

// docFiles lists README.md and docs/*.md, relative to the repository.
func docFiles(t *testing.T) map[string][]block {
	t.Helper()
	names, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]block{}
	for _, name := range append([]string{"../README.md"}, names...) {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(name, "../")
		if rel == name {
			rel = "docs/" + name
		}
		blocks, err := parseBlocks(rel, string(data))
		if err != nil {
			t.Fatal(err)
		}
		files[rel] = blocks
	}
	return files
}

// TestDocExamplesWellFormed: every example parses, every pendingFix entry
// names an example that exists, and every page the docs link to exists.
// It needs nothing but the files, so it runs in -short too.
func TestDocExamplesWellFormed(t *testing.T) {
	files := docFiles(t)
	ids := map[string]bool{}
	for _, blocks := range files {
		for _, b := range blocks {
			ids[b.id] = true
			for _, c := range b.commands() {
				for _, s := range segments(c.expect) {
					if s.hasIn {
						if _, err := keys(s.input, func(string) (string, bool) { return "x", true }); err != nil {
							t.Errorf("%s: %v", b.where(), err)
						}
					}
				}
			}
		}
	}
	for id := range pendingFix {
		if !ids[id] {
			t.Errorf("pendingFix names %q, which is no example (fixed or reworded: remove it)", id)
		}
	}
	link := regexp.MustCompile(`\]\(([^)#:]*)(#[^)]*)?\)`)
	for file := range files {
		data, _ := os.ReadFile(filepath.Join("..", file))
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := file // a link to "#anchor" is to the page itself
			if m[1] != "" {
				target = filepath.Join(filepath.Dir(file), m[1])
			}
			page, err := os.ReadFile(filepath.Join("..", target))
			switch {
			case err != nil:
				t.Errorf("%s links to %s, which does not exist", file, m[1])
			case m[2] != "" && strings.HasSuffix(target, ".md") && !anchors(string(page))[m[2][1:]]:
				t.Errorf("%s links to %s%s, which has no heading %s", file, m[1], m[2], m[2])
			}
		}
	}
}

// TestDocExamples runs every example against a real obmd (see the
// package comment). The test re-executes itself in a network namespace of
// its own (runInNetNS), where runExamples does the work.
func TestDocExamples(t *testing.T) {
	files := docFiles(t)
	if testing.Short() {
		t.Skip("the examples need a real obmd, OpenSSH and ipmi_sim (not in -short)")
	}
	ipmisim.Require(t, "bash", "ssh", "ssh-keygen", "sshpass", "curl", "ipmitool", "ipmi_sim", "socat")
	nssWrapper(t)
	bin, inside := os.LookupEnv(netnsEnv)
	if !inside {
		runInNetNS(t, buildBinaries(t, t.TempDir()))
		return
	}
	if err := soltest.LoopbackUp(); err != nil {
		t.Fatal(err)
	}
	runExamples(t, files, bin)
}

// runExamples runs README.md, then the docs/ pages, with obmd and obmctl
// from bin, in this process's network namespace.
func runExamples(t *testing.T, files map[string][]block, bin string) {
	scratch := t.TempDir()
	t.Run("README.md", func(t *testing.T) {
		checkout := filepath.Join(scratch, "checkout")
		home := filepath.Join(scratch, "readme-home")
		if err := os.MkdirAll(filepath.Join(checkout, "bin"), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{"obmd", "obmctl"} {
			if err := os.Symlink(filepath.Join(bin, b), filepath.Join(checkout, "bin", b)); err != nil {
				t.Fatal(err)
			}
		}
		p := &page{t: t, dir: checkout, scratch: scratch, env: termEnv(t, scratch, home, ""),
			rcExtra: makeRun(t), pending: pendingFix}
		defer p.close()
		p.run(files["README.md"])
	})
	waitFree(t, sshAddr, adminAddr, webAddr)

	sim := ipmisim.StartAt(t, bmcPort)
	d := startObmd(t, bin, filepath.Join(scratch, "docs-obmd"))
	sshConfig := tenantSSHConfig(t)
	var pages []string
	for f := range files {
		if f != "README.md" {
			pages = append(pages, f)
		}
	}
	slices.Sort(pages)
	for _, f := range pages {
		t.Run(f, func(t *testing.T) {
			dir := filepath.Join(scratch, strings.TrimSuffix(filepath.Base(f), ".md"))
			home := filepath.Join(dir, "home")
			cwd := filepath.Join(dir, "cwd")
			env := termEnv(t, dir, home, bin)
			token := d.setUp(t, f, home, sshConfig, sim)
			if err := os.MkdirAll(cwd, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(d.state, filepath.Join(cwd, "obmd-state")); err != nil {
				t.Fatal(err)
			}
			if f == "docs/contributing.md" { // its examples run in the repository
				repo, err := filepath.Abs("..")
				if err != nil {
					t.Fatal(err)
				}
				cwd = repo
			}
			p := &page{t: t, dir: cwd, scratch: dir, env: append(env, "TOKEN="+token), token: token, pending: pendingFix}
			defer p.close()
			p.run(files[f])
		})
	}
}

// termEnv is a terminal's environment: nothing of the test's own (no
// OBMD_*, no SSH agent), obmctl on PATH when bin is set, and home as the
// user's home. OpenSSH takes ~ from the password database, not $HOME, so
// nss_wrapper (preloaded) answers it from a passwd file of the test's.
func termEnv(t *testing.T, scratch, home, bin string) []string {
	t.Helper()
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	passwd, group := filepath.Join(scratch, "passwd"), filepath.Join(scratch, "group")
	files := map[string]string{
		passwd: fmt.Sprintf("%s:x:%s:%s:%s:%s:/bin/bash\n", u.Username, u.Uid, u.Gid, u.Username, home),
		group:  fmt.Sprintf("%s:x:%s:\n", u.Username, u.Gid),
	}
	for name, body := range files {
		if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := os.Getenv("PATH")
	if bin != "" {
		path = bin + ":" + path
	}
	env := []string{"HOME=" + home, "PATH=" + path, "TERM=xterm", "LANG=C.UTF-8", "TZ=UTC",
		"USER=" + u.Username, "LOGNAME=" + u.Username,
		"LD_PRELOAD=" + nssWrapper(t), "NSS_WRAPPER_PASSWD=" + passwd, "NSS_WRAPPER_GROUP=" + group}
	return append(env, goEnv(t)...)
}

// goEnv is a contributor's Go setup for the terminals, where `go env`
// would look in the fresh home: the caches (a fresh home must not mean
// downloading every module again) and the proxy.
func goEnv(t *testing.T) []string {
	t.Helper()
	keys := []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOPROXY", "GOFLAGS", "GOTOOLCHAIN"}
	out, err := exec.Command("go", append([]string{"env"}, keys...)...).Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	var env []string
	for i, v := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if i < len(keys) && v != "" {
			env = append(env, keys[i]+"="+v)
		}
	}
	return env
}

// nssWrapper finds libnss_wrapper (Debian's libnss-wrapper).
func nssWrapper(t *testing.T) string {
	t.Helper()
	for _, pattern := range []string{"/usr/lib/*/libnss_wrapper.so", "/usr/lib*/libnss_wrapper.so"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	soltest.Missing(t, "missing libnss_wrapper.so (apt-get install -y libnss-wrapper): the examples need a fresh home for OpenSSH")
	return ""
}

// makeRun defines "make run" in the README's terminals as what the
// Makefile's run target runs once its build is done; the test fails if
// the Makefile says otherwise.
func makeRun(t *testing.T) string {
	data, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(data)
	for _, want := range []string{"\nBIN      := bin\n", "\nrun: build\n\t$(BIN)/obmd serve --demo\n", "-o $(BIN)/ ./cmd/...\n"} {
		if !strings.Contains(mk, want) {
			t.Fatalf("the Makefile no longer has %q: the README's make run is run as bin/obmd serve --demo", want)
		}
	}
	return `make() { if [ "$*" = run ]; then bin/obmd serve --demo; else command make "$@"; fi; }
`
}

// waitFree waits until nothing listens on the TCP addresses (an obmd
// being stopped), or fails.
func waitFree(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		deadline := time.Now().Add(20 * time.Second)
		for {
			l, err := net.Listen("tcp", a)
			if err == nil {
				l.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is in use: the examples need obmd's default ports free (%v)", a, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// buildBinaries builds obmd and obmctl once into dir/bin, as make build
// does (with -race when the test runs with it).
func buildBinaries(t *testing.T, dir string) string {
	bin := filepath.Join(dir, "bin")
	args := []string{"build", "-o", bin + "/", "-ldflags", "-X main.version=v0.0.0-docs"}
	if raceEnabled {
		args = append(args, "-race")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	cmd := exec.Command(goTool, append(args, "./cmd/obmd", "./cmd/obmctl")...)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// tenantSSHConfig is the ~/.ssh/config docs/tenant.md tells a reader to
// write: its first ssh-config block.
func tenantSSHConfig(t *testing.T) string {
	data, err := os.ReadFile("tenant.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "```ssh-config\n")
	if !ok {
		t.Fatal("docs/tenant.md has no ```ssh-config block")
	}
	cfg, _, _ := strings.Cut(rest, "```")
	return cfg
}

// docsObmd is the obmd the docs/ pages run against.
type docsObmd struct {
	state string // its state directory
	admin string // its admin token
	http  *http.Client
}

// startObmd runs `obmd serve` in dir (state in dir/obmd-state, default
// ports, the web console on as docs/operator.md shows it) until the test
// ends.
func startObmd(t *testing.T, bin, dir string) *docsObmd {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "obmd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "obmd"), "serve")
	cmd.Dir, cmd.Env = dir, append(termEnv(t, dir, filepath.Join(dir, "home"), ""), "OBMD_WEB_ADDR="+webAddr)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); log.Close() }() // owned by the cleanup below, which waits for it
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	d := &docsObmd{state: filepath.Join(dir, "obmd-state"), http: &http.Client{Timeout: 30 * time.Second}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := d.http.Get("http://" + adminAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			exited <- err
			out, _ := os.ReadFile(filepath.Join(dir, "obmd.log"))
			t.Fatalf("obmd exited at start (%v):\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("obmd was not ready within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	tok, err := os.ReadFile(filepath.Join(d.state, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	d.admin = strings.TrimSpace(string(tok))
	return d
}

// api calls the admin API; a status other than want fails t.
func (d *docsObmd) api(t *testing.T, method, path string, body any, want ...int) []byte {
	t.Helper()
	var r io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, "http://"+adminAddr+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", d.admin)
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if !slices.Contains(want, resp.StatusCode) {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, data)
	}
	return data
}

// setUp gives a page what its examples assume (see the package comment)
// and returns node-17's token. operator.md registers node-42 itself.
func (d *docsObmd) setUp(t *testing.T, file, home, sshConfig string, sim *ipmisim.Sim) string {
	dotSSH := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(dotSSH, 0o700); err != nil {
		t.Fatal(err)
	}
	hostKey, err := os.ReadFile(filepath.Join(d.state, "ssh_host_ed25519_key"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(hostKey)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"config":      sshConfig,
		"known_hosts": "[127.0.0.1]:2222 " + string(gossh.MarshalAuthorizedKey(signer.PublicKey())),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dotSSH, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	key := filepath.Join(dotSSH, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "you@laptop", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	d.api(t, "PUT", "/v1/nodes/node-17", map[string]any{"type": "sim", "info": map[string]any{"addr": "simulator"}}, 200, 201)
	d.api(t, "PUT", "/v1/nodes/node-17/capture", map[string]any{"capture": ""}, 200)
	d.api(t, "POST", "/v1/nodes/node-17/keys", map[string]string{"key": strings.TrimSpace(string(pub))}, 201)
	// A fresh boot, so that the simulator's console is at its login
	// prompt; then a new tenancy, so that the page's history starts empty.
	d.powerCycle(t, "node-17", d.rotate(t, "node-17"))
	token := d.rotate(t, "node-17")
	if file == "docs/operator.md" {
		d.api(t, "DELETE", "/v1/nodes/node-42", nil, 200, 204)
		return token
	}
	info := sim.Info()
	d.api(t, "PUT", "/v1/nodes/node-42", map[string]any{"type": "ipmi", "info": map[string]any{
		"addr": info.Addr, "port": info.Port, "user": info.User, "pass": info.Pass}}, 200, 201)
	d.api(t, "PUT", "/v1/nodes/node-42/capture", map[string]any{"capture": ""}, 200)
	d.api(t, "POST", "/v1/nodes/node-42/keys", map[string]string{"key": strings.TrimSpace(string(pub))}, 201)
	return token
}

// rotate gives label a new token.
func (d *docsObmd) rotate(t *testing.T, label string) string {
	t.Helper()
	var tok struct{ Token string }
	if err := json.Unmarshal(d.api(t, "POST", "/v1/nodes/"+label+"/token", nil, 200), &tok); err != nil || tok.Token == "" {
		t.Fatalf("token of %s: %v", label, err)
	}
	return tok.Token
}

// powerCycle power-cycles label through its node-token route.
func (d *docsObmd) powerCycle(t *testing.T, label, token string) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+adminAddr+"/node/"+label+"/power_cycle?token="+token, strings.NewReader(`{"force":false}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatalf("power-cycle %s: %v", label, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("power-cycle %s: %s", label, resp.Status)
	}
}
