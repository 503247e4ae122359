package access

// What `sessions` shows a tenant: its own sessions (the same credential
// from the same host) in full; anyone else's (HIL's HTTP console stream,
// another key holder) without user or address. The admin API keeps it all.

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"
)

// streamFrom opens label's HTTP console from the local address src; it
// returns once the stream has begun, and ends it when t ends.
func streamFrom(t *testing.T, o *obmdtest.Daemon, src, label, token string) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+o.AdminAddr()+"/node/"+label+"/console?token="+url.QueryEscape(token), nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		cancel()
		t.Fatalf("HTTP console from %s: %v %v", src, resp, err)
	}
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		client.CloseIdleConnections()
	})
}

func TestSessionsShowOthersNoAddress(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("sv1")
	signer, _ := obmdtest.NewKey(t)
	fp := o.AddKey("sv1", signer.PublicKey())

	streamFrom(t, o, "127.0.0.2", "sv1", tok) // HIL, streaming with the token
	other := obmdtest.StartGoSession(t, o.SSHAddr(), "sv1", gossh.PublicKeys(signer), obmdtest.SessionOpts{PTY: true})
	other.Notice("console of sv1") // another party: a key holder on 127.0.0.1
	mine := o.GoConsole(t, "sv1", tok, obmdtest.SessionOpts{PTY: true})
	mine.Notice("2 other(s): http, #")
	obmdtest.WaitUntil(t, "three sessions", func() bool { return len(o.Sessions("sv1")) == 3 })

	// The banner names the others by session ID only.
	if b := mine.Stderr.String(); strings.Contains(b, "127.0.0") || strings.Contains(b, "key") || strings.Contains(b, "token") {
		t.Errorf("banner: got %q, want no address or credential of the others", b)
	}

	text := o.OpenSSH("sv1", tok, nil, "sessions")
	js := o.OpenSSH("sv1", tok, nil, "sessions", "--json")
	for _, res := range []obmdtest.Result{text, js} {
		if res.Code != 0 {
			t.Fatalf("sessions: got %v, want exit 0", res)
		}
		for _, secret := range []string{"127.0.0.2", fp, "SHA256:", "key"} {
			if strings.Contains(res.Stdout+res.Stderr, secret) {
				t.Errorf("sessions: got %q, holds %q (another party's)", res.Stdout, secret)
			}
		}
	}
	rows := strings.Split(strings.TrimSpace(text.Stdout), "\n")[1:]
	if len(rows) != 4 {
		t.Fatalf("sessions: got %q, want four rows", text.Stdout)
	}
	for _, row := range rows {
		f := strings.Fields(row)
		own := f[1] == "console" && f[2] == "token" || f[1] == "exec"
		switch {
		case own && (f[2] != "token" || !strings.HasPrefix(f[3], "127.0.0.1:")):
			t.Errorf("own session: got row %q, want user token and remote 127.0.0.1:PORT", row)
		case !own && (f[2] != "-" || f[3] != "-"):
			t.Errorf("another party's session: got row %q, want user and remote hidden", row)
		}
	}

	var out struct {
		Sessions []map[string]any
	}
	if err := json.Unmarshal([]byte(js.Stdout), &out); err != nil {
		t.Fatalf("decode %q: %v", js.Stdout, err)
	}
	kinds := map[string]int{}
	for _, s := range out.Sessions {
		own := s["own"] == true
		if own {
			if s["user"] != "token" || !strings.HasPrefix(s["remote"].(string), "127.0.0.1:") {
				t.Errorf("own session: got %v, want user token and remote 127.0.0.1:PORT", s)
			}
			kinds["own "+s["kind"].(string)]++
			continue
		}
		if _, ok := s["user"]; ok {
			t.Errorf("another party's session: got %v, want no user", s)
		}
		if _, ok := s["remote"]; ok {
			t.Errorf("another party's session: got %v, want no remote", s)
		}
		if s["id"] == "" || s["kind"] == "" || s["started"] == "" {
			t.Errorf("another party's session: got %v, want id, kind and started", s)
		}
		kinds[s["kind"].(string)]++
	}
	if want := map[string]int{"http-console": 1, "console": 1, "own console": 1, "own exec": 1}; len(kinds) != len(want) ||
		kinds["http-console"] != 1 || kinds["console"] != 1 || kinds["own console"] != 1 || kinds["own exec"] != 1 {
		t.Errorf("sessions --json: got %v, want %v", kinds, want)
	}

	// The admin API keeps every detail.
	var all struct {
		Sessions []struct{ Kind, User, Remote string }
	}
	if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/sessions?node=sv1", nil), &all); err != nil {
		t.Fatal(err)
	}
	var sawHIL, sawKey bool
	for _, s := range all.Sessions {
		sawHIL = sawHIL || s.Kind == "http-console" && strings.HasPrefix(s.Remote, "127.0.0.2:")
		sawKey = sawKey || s.User == "key "+fp
	}
	if !sawHIL || !sawKey {
		t.Errorf("/v1/sessions: got %+v, want HIL's stream from 127.0.0.2 and the key holder's fingerprint", all.Sessions)
	}
}
