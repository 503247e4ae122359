package sshconsole_test

import (
	"strings"
	"testing"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/sshbmc"
)

// names lists the checks' names and results, for messages.
func names(checks []sol.Check) string {
	var b strings.Builder
	for _, c := range checks {
		mark := "ok"
		if !c.OK {
			mark = "FAIL"
		}
		b.WriteString(c.Name + " " + mark + ": " + c.Detail + "\n")
	}
	return b.String()
}

// TestDiagnose: doctor's SSH steps, in order, name the failing one: the
// port, the host key (changed), the login, the console command (held by
// another session); a key not pinned yet is shown and not pinned; a
// console obmd holds is not attached again; a passing run leaves the
// console free, and tenants' texts never name the BMC's address.
func TestDiagnose(t *testing.T) {
	all := []string{sol.CheckSSHAddress, sol.CheckSSHHostKey, sol.CheckSSHAuth, sol.CheckSSHCommand, sol.CheckSSHConsole}
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "ilo"})
	keys := sshbmc.NewKeys()
	c := newClient(t, keys, nil)
	tg := target(t, "n1", b)
	check := func(name string, held bool, want int, wantIn string) []sol.Check {
		t.Helper()
		checks := c.Diagnose(ctxWait(t), tg, held)
		last := checks[len(checks)-1]
		if len(checks) != want || checks[len(checks)-1].Name != all[want-1] || last.OK != (want == len(all) && wantIn == "") {
			t.Fatalf("%s: got\n%s want %d steps, the last %s", name, names(checks), want, all[want-1])
		}
		if wantIn != "" && !strings.Contains(last.Detail+last.Tenant, wantIn) {
			t.Errorf("%s: last step %+v, want it to say %q", name, last, wantIn)
		}
		for _, ch := range checks {
			if strings.Contains(ch.Tenant+ch.Hint, "127.0.0.1") {
				t.Errorf("%s: step %s tells tenants the address: %q", name, ch.Name, ch.Tenant)
			}
		}
		return checks
	}
	checks := check("fresh", false, 5, "")
	if !strings.Contains(checks[1].Tenant, "not pinned yet") {
		t.Errorf("host key step: got %q, want the key shown as not pinned yet", checks[1].Tenant)
	}
	if _, ok, _ := keys.PinnedHostKey(ctxWait(t), "n1"); ok {
		t.Errorf("a diagnosis pinned the key")
	}
	if s := b.Stats(); s.Held || s.Attaches != 1 || s.Escapes != 1 {
		t.Errorf("after the diagnosis: %+v, want the console attached once and left", s)
	}

	con, err := c.Open(ctxWait(t), tg) // pins, and holds the console
	if err != nil {
		t.Fatal(err)
	}
	check("held by obmd", true, 5, "")
	check("held by another", false, 4, "in use")
	con.Close()

	bad := tg
	bad.Pass = "wrong"
	tg, bad = bad, tg
	check("wrong password", false, 3, "unable to authenticate")
	tg = bad
	b.RotateHostKey(t)
	check("changed key", false, 2, "changed")
	tg.Port = 1
	check("closed port", false, 1, "127.0.0.1:1")
}
