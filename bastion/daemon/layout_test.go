package daemon_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The layout's rules: which packages may not import what (their code, not
// their tests). docs/contributing.md's Layout section is the map; this
// keeps the code to it.
const mod = "github.com/obmd/obmd/"

// layoutRule forbids the packages matching from importing anything
// matching forbidden: directly, or (deps) through any chain of imports.
type layoutRule struct {
	why       string
	from      []string // package patterns (a trailing "/..." includes sub-packages)
	except    []string // packages of from that the rule does not bind
	forbidden []string // import patterns
	allowed   []string // imports of forbidden that the rule allows (their own imports still count)
	deps      bool     // transitive, not only direct imports
}

var layoutRules = []layoutRule{
	{why: "the BMC side, the commands and the database know nothing of the doors",
		from:      []string{mod + "sol/...", mod + "commands/...", mod + "db/...", mod + "keys", mod + "migrations"},
		forbidden: []string{mod + "bastion/...", mod + "cmd/...", "github.com/gliderlabs/ssh/..."}, deps: true},
	{why: "the BMC side and the commands know nothing of SSH, but for obmd's client to the BMCs' own SSH services " +
		"(sol/sshconsole), its test BMC, and the console transports that reach it (sol/transport)",
		from:      []string{mod + "sol/...", mod + "commands/..."},
		except:    []string{mod + "sol/sshconsole", mod + "sol/soltest/sshbmc", mod + "sol/transport"},
		forbidden: []string{"golang.org/x/crypto/ssh/..."}, deps: true},
	{why: "the console transports speak SSH through sol/sshconsole alone",
		from:      []string{mod + "sol/transport"},
		forbidden: []string{"golang.org/x/crypto/ssh/..."}},
	{why: "the database knows nothing of SSH (keys, which parses SSH keys, is its only path to x/crypto/ssh)",
		from:      []string{mod + "db/..."},
		forbidden: []string{"golang.org/x/crypto/ssh/..."}},
	{why: "the commands know nothing of SQL",
		from:      []string{mod + "commands/..."},
		forbidden: []string{"database/sql/...", mod + "db/..."}, deps: true},
	{why: "keys knows nothing of the database",
		from:      []string{mod + "keys"},
		forbidden: []string{"database/sql/...", mod + "db/..."}, deps: true},
	{why: "the console hub knows no driver (its console history and its screens' emulator are none)",
		from:      []string{mod + "sol"},
		forbidden: []string{mod + "sol/..."}, allowed: []string{mod + "sol/history", mod + "sol/screen"}, deps: true},
	{why: "access changes, the guessing limits and the session registry know nothing of SSH or HTTP",
		from:      []string{mod + "bastion/access/..."},
		forbidden: []string{"github.com/gliderlabs/ssh/...", "golang.org/x/crypto/ssh/...", "net/http"}},
	{why: "the SSH door knows nothing of the admin door",
		from:      []string{mod + "bastion/sshdoor/..."},
		forbidden: []string{mod + "bastion/admin/..."}, deps: true},
	{why: "the admin door knows nothing of the SSH door",
		from:      []string{mod + "bastion/admin/..."},
		forbidden: []string{mod + "bastion/sshdoor/..."}, deps: true},
	{why: "the cluster knows nothing of the doors",
		from:      []string{mod + "bastion/cluster/..."},
		forbidden: []string{mod + "bastion/sshdoor/...", mod + "bastion/admin/..."}, deps: true},
	{why: "access policy and the node table know nothing of the doors, the cluster or the composition root (the admin API's types aside)",
		from: []string{mod + "bastion/access/...", mod + "bastion/nodes/..."},
		forbidden: []string{mod + "bastion/sshdoor/...", mod + "bastion/admin/...", mod + "bastion/cluster/...",
			mod + "bastion/daemon/..."},
		allowed: []string{mod + "bastion/admin/api"}, deps: true},
	{why: "bastion/internal is plumbing: it knows nothing of the rest of bastion",
		from:      []string{mod + "bastion/internal/..."},
		forbidden: []string{mod + "bastion/..."}, allowed: []string{mod + "bastion/internal/..."}, deps: true},
	{why: "only the composition root (bastion/daemon) knows the drivers: the node types are its table " +
		"(the e2e tests' harness, which builds labs of them, aside)",
		from:   []string{mod + "bastion/...", mod + "commands/..."},
		except: []string{mod + "bastion/daemon", mod + "bastion/e2e/..."},
		forbidden: []string{mod + "sol/ipmi", mod + "sol/ipmitool", mod + "sol/redfish", mod + "sol/sim",
			"github.com/bougou/go-ipmi/...", "github.com/creack/pty", "github.com/stmcginnis/gofish/..."}, deps: true},
	{why: "the admin API's types are shared with obmctl: they import the standard library alone",
		from:      []string{mod + "bastion/admin/api"},
		forbidden: []string{strings.TrimSuffix(mod, "/") + "/...", "github.com/...", "golang.org/...", "gopkg.in/..."}},
	{why: "obmctl talks to obmd over HTTP: of the server it links the API's types alone",
		from:      []string{mod + "cmd/obmctl"},
		forbidden: []string{mod + "bastion/...", mod + "sol/...", mod + "db/...", mod + "commands/...", mod + "keys/..."},
		allowed:   []string{mod + "bastion/admin/api"}, deps: true},
	{why: "test helpers stay out of obmd's binaries",
		from: []string{mod + "cmd/...", mod + "bastion/...", mod + "commands/...", mod + "db", mod + "keys", mod + "sol",
			mod + "sol/ipmi", mod + "sol/ipmitool", mod + "sol/redfish", mod + "sol/sim"},
		except: []string{mod + "bastion/e2e/..."},
		forbidden: []string{mod + "sol/soltest/...", mod + "sol/redfish/redfishtest", mod + "db/dbtest", mod + "sol/screen/screentest",
			mod + "bastion/e2e/...", mod + "internal/testenv"},
		deps: true},
}

func matches(pkg string, patterns []string) bool {
	for _, p := range patterns {
		if base, ok := strings.CutSuffix(p, "/..."); ok && (pkg == base || strings.HasPrefix(pkg, base+"/")) || pkg == p {
			return true
		}
	}
	return false
}

// matchesSome reports whether pattern matches a package of graph: a rule
// naming a package that moved would otherwise bind nothing and pass.
func matchesSome(graph map[string][]string, pattern string) bool {
	for pkg := range graph {
		if matches(pkg, []string{pattern}) {
			return true
		}
	}
	return false
}

// goList runs go list with args and returns its output's lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goBin, append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// importGraph is every package of the module and everything they import,
// each with its direct imports (go list, without tests).
func importGraph(t *testing.T) map[string][]string {
	graph := map[string][]string{}
	for _, line := range goList(t, "-deps", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}", mod+"...") {
		pkg, imports, _ := strings.Cut(line, "|")
		graph[pkg] = strings.Fields(imports)
	}
	return graph
}

// TestLayout: no package imports what the layout forbids it. A failure
// names the chain of imports that breaks the rule.
func TestLayout(t *testing.T) {
	graph := importGraph(t)
	if len(graph[mod+"bastion/daemon"]) == 0 {
		t.Fatal("go list did not list the module")
	}
	for _, r := range layoutRules {
		for _, p := range slices.Concat(r.from, r.except, r.forbidden, r.allowed) {
			if strings.HasPrefix(p, mod) && !matchesSome(graph, p) {
				t.Errorf("rule %q names %s, which matches no package: update the rule to the package's new path", r.why, p)
			}
		}
		for pkg := range graph {
			if !strings.HasPrefix(pkg, mod) || !matches(pkg, r.from) || matches(pkg, r.except) {
				continue
			}
			if chain := forbiddenChain(graph, pkg, r); chain != nil {
				t.Errorf("%s imports %s (%s)", pkg, strings.Join(chain, " -> "), r.why)
			}
		}
	}
}

// forbiddenChain returns a chain of imports from pkg to a package r forbids
// it, or nil.
func forbiddenChain(graph map[string][]string, pkg string, r layoutRule) []string {
	seen := map[string]bool{pkg: true}
	var walk func(p string) []string
	walk = func(p string) []string {
		for _, imp := range graph[p] {
			if matches(imp, r.forbidden) && !matches(imp, r.allowed) {
				return []string{imp}
			}
			if r.deps && !seen[imp] {
				seen[imp] = true
				if chain := walk(imp); chain != nil {
					return append([]string{imp}, chain...)
				}
			}
		}
		return nil
	}
	return walk(pkg)
}
