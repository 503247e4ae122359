package access

// An administrator ends a session (DELETE /v1/sessions/{id}): the tenant is
// told that an administrator ended it and that its access is unchanged
// (the token still works), and the session's audit row, like that of any
// cut session, says why it was cut.

import (
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestSessionKicked(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("kick1")
	p := obmdtest.SSHPTY(t, o.SSHAddr(), "kick1", tok, nil)
	p.Expect("[obmd: console of kick1; you are writing")
	obmdtest.WaitUntil(t, "the console session listed", func() bool { return len(o.Sessions("kick1")) == 1 })
	o.MustAPI(200, "DELETE", "/v1/sessions/"+o.Sessions("kick1")[0].ID, nil)
	p.Expect("obmd: your session on kick1 was ended by an administrator; your access is unchanged")
	if code := p.Exit(); code != 3 {
		t.Errorf("exit status after the kick: got %d, want 3", code)
	}
	if s := p.Out.String(); strings.Contains(s, "revoked") {
		t.Errorf("kicked session's screen: got %q, want no word of a revocation", obmdtest.Tail(s, 300))
	}
	// Access is unchanged: the same token opens the node.
	if res := o.OpenSSH("kick1", tok, nil, "power-status"); res.Code != 0 || res.Stdout != "kick1: power on\n" {
		t.Errorf("power-status with the same token after the kick: got %v, want exit 0", res)
	}

	// A cut's audit row says why: the kick, then a token rotation.
	g := o.GoConsole(t, "kick1", tok, obmdtest.SessionOpts{PTY: true})
	g.Notice("console of kick1")
	o.Rotate("kick1")
	g.Notice("obmd: access to kick1 was revoked (token rotated)")
	var cuts []string
	obmdtest.WaitUntil(t, "two cut sessions audited", func() bool {
		cuts = nil
		for _, e := range o.Audit("kick1") {
			if e.Action == "session.end" && e.Result == "cut" {
				cuts = append(cuts, e.Detail)
			}
		}
		return len(cuts) == 2
	})
	for i, why := range []string{"; cut: kicked by admin", "; cut: token rotated"} {
		if !strings.HasPrefix(cuts[i], "console exit 3 after ") || !strings.HasSuffix(cuts[i], why) {
			t.Errorf("audit of cut session %d: got %q, want console exit 3 after ...%s", i, cuts[i], why)
		}
	}
}
