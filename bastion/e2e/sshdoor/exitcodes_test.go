package sshdoor

// What a script sees from the client side before obmd runs anything, as
// the tenant guide's "Exit codes" table says: sshpass exits 5 for a wrong
// token and 6 for a host key it does not know, ssh exits 255 when it
// cannot log in; none prints anything on stdout. A registered key with
// BatchMode, what the guide recommends for automation, gets obmd's own
// codes.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

func TestClientExitCodes(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass")
	o := obmdtest.Start(t)
	tok := o.AddSimNode("xc")
	signer, keyPath := obmdtest.NewKey(t)
	o.AddKey("xc", signer.PublicKey())
	batch := []string{"-o", "BatchMode=yes"}

	documented := docExitCodes(t)
	for _, c := range []struct {
		name   string
		token  string
		extra  []string
		code   int    // as documented: the row of the guide's table
		stdout string // as documented
		stderr string
	}{
		{"sshpass, wrong token", "not-the-token", nil, documented("sshpass", "password was refused"), "", ""},
		{"ssh BatchMode, no key", "", batch, documented("ssh", "login refused"), "", "Permission denied"},
		{"ssh BatchMode, registered key", "", append([]string{"-i", keyPath}, batch...), documented("obmd", "done"), "xc: power on\n", ""},
		{"sshpass, right token", tok, nil, 0, "xc: power on\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := o.OpenSSH("xc", c.token, c.extra, "power-status")
			if res.Code != c.code || res.Stdout != c.stdout || !strings.Contains(res.Stderr, c.stderr) {
				t.Errorf("got %v, want exit %d, stdout %q, stderr with %q", res, c.code, c.stdout, c.stderr)
			}
		})
	}
	// obmd's own codes follow a login: 2 for a usage error.
	if res := o.OpenSSH("xc", "", []string{"-i", keyPath, "-o", "BatchMode=yes"}, "power-status", "--now"); res.Code != 2 {
		t.Errorf("a usage error with a key: got %v, want exit 2", res)
	}

	t.Run("sshpass, unknown host key", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(o.SSHAddr())
		res := runInHome(t, freshHome(t), fmt.Sprintf("sshpass -p %s ssh -p %s xc@%s power-status", tok, port, host))
		if want := documented("sshpass", "host key is not in `known_hosts`"); res.Code != want || res.Stdout != "" {
			t.Errorf("got %v, want exit %d and nothing on stdout", res, want)
		}
	})
}

// docExitCodes reads the tenant guide's table of exit codes and returns a
// lookup: the code of the row from that program whose meaning holds what.
func docExitCodes(t *testing.T) func(from, what string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "tenant.md"))
	if err != nil {
		t.Fatalf("the tenant guide: %v", err)
	}
	_, section, _ := strings.Cut(string(data), "\n## Exit codes\n")
	section, _, _ = strings.Cut(section, "\n## ")
	type row struct {
		code       int
		from, text string
	}
	var rows []row
	for _, l := range strings.Split(section, "\n") {
		f := strings.Split(l, "|")
		if len(f) != 5 {
			continue
		}
		code, err := strconv.Atoi(strings.TrimSpace(f[1]))
		if err != nil {
			continue
		}
		rows = append(rows, row{code, strings.TrimSpace(f[2]), f[3]})
	}
	return func(from, what string) int {
		t.Helper()
		for _, r := range rows {
			if r.from == from && strings.Contains(r.text, what) {
				return r.code
			}
		}
		t.Fatalf("the tenant guide's exit codes have no row from %s saying %q (rows: %v)", from, what, rows)
		return -1
	}
}
