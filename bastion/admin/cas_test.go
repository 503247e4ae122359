package admin

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys/sshcert"
)

// certLine is an authorized-keys line of a user certificate signed by its
// own key (a certificate is never a CA, however signed).
func certLine(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	c := &gossh.Certificate{Key: signer.PublicKey(), CertType: gossh.UserCert, KeyId: "x", ValidPrincipals: []string{"n1"},
		ValidBefore: gossh.CertTimeInfinity}
	if err := c.SignCert(rand.Reader, signer); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(c)))
}

// answer is an answer's error message, or its body if it has none.
func answer(r resp) string {
	var e struct{ Error string }
	if json.Unmarshal([]byte(r.body), &e) == nil && e.Error != "" {
		return e.Error
	}
	return r.body
}

// apiCase is one request of a table test and the answer it wants: the
// status, and a substring of the error message (or of the body).
type apiCase struct {
	name, path, body string
	code             int
	want             string
}

// run sends each case with method (to path, unless the case has its own).
func (e *env) run(t *testing.T, method, path string, cases []apiCase) {
	for _, tt := range cases {
		if tt.path == "" {
			tt.path = path
		}
		t.Run(tt.name, func(t *testing.T) {
			if r := e.admin(method, tt.path, tt.body); r.code != tt.code || !strings.Contains(answer(r), tt.want) {
				t.Errorf("got %d %q, want %d ~%q", r.code, r.body, tt.code, tt.want)
			}
		})
	}
}

// TestV1CAs: adding a CA (201, 200 again, 409 for a clash, 400 for a bad
// name or key), listing, removing (a credential change only when it was
// trusted), each audited.
func TestV1CAs(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		ca, fp := testKey(t, 1, "/", "hil-ca")
		other, _ := testKey(t, 2, "", "")
		small, err := rsa.GenerateKey(rand.Reader, 1024)
		if err != nil {
			t.Fatal(err)
		}
		smallPub, _ := gossh.NewPublicKey(&small.PublicKey)
		smallLine := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(smallPub)))
		e.run(t, "POST", "/v1/cas", []apiCase{
			{"add", "", `{"key":"` + ca + `","name":"hil"}`, 201, `"fingerprint":"` + fp + `"`},
			{"again", "", `{"key":"` + ca + `","name":"hil"}`, 200, `"name":"hil"`},
			{"same key, other name", "", `{"key":"` + ca + `","name":"other"}`, 409, "is not added"},
			{"same name, other key", "", `{"key":"` + other + `","name":"hil"}`, 409, "is not added"},
			{"bad name", "", `{"key":"` + other + `","name":"hil ca"}`, 400, "only ASCII letters"},
			{"no name", "", `{"key":"` + other + `"}`, 400, "CA name"},
			{"certificate", "", `{"key":"` + certLine(t) + `","name":"c"}`, 400, "a certificate cannot be a CA"},
			{"small RSA", "", `{"key":"` + smallLine + `","name":"r"}`, 400, "fewer than 2048 bits"},
			{"malformed", "", `{"key":"ssh-ed25519 nope","name":"m"}`, 400, "CA key"},
			{"unknown field", "", `{"key":"` + other + `","name":"x","y":1}`, 400, `unknown field "y"`},
		})
		r := e.admin("GET", "/v1/cas", "")
		var list struct {
			CAs []struct{ Fingerprint, Name, Key string }
		}
		if r.code != 200 || json.Unmarshal([]byte(r.body), &list) != nil || len(list.CAs) != 1 ||
			list.CAs[0].Fingerprint != fp || list.CAs[0].Name != "hil" || list.CAs[0].Key != ca {
			t.Fatalf("list: got %d %q, want the one CA", r.code, r.body)
		}
		e.rev.take()
		if r := e.admin("DELETE", "/v1/cas/SHA256:%00", ""); r.code != 400 {
			t.Errorf("bad fingerprint: got %d %q, want 400", r.code, r.body)
		}
		if r := e.admin("DELETE", "/v1/cas/"+url.PathEscape(fp), ""); r.code != 200 || r.body != `{"removed":true}`+"\n" {
			t.Errorf("remove: got %d %q", r.code, r.body)
		}
		if r := e.admin("DELETE", "/v1/cas/"+url.PathEscape(fp), ""); r.code != 200 || r.body != `{"removed":false}`+"\n" {
			t.Errorf("remove again: got %d %q", r.code, r.body)
		}
		if calls := e.rev.take(); len(calls) != 1 || calls[0].Label != "" || calls[0].Why != WhyCARemoved || calls[0].Epoch <= 0 {
			t.Errorf("credential changes: got %+v, want one CA removal", calls)
		}
		evs := e.auditEvents("")
		if !hasAudit(evs, "admin", "ca.add", "ok") || !hasAudit(evs, "admin", "ca.remove", "ok") {
			t.Errorf("audit: want ca.add and ca.remove, got %+v", evs)
		}
	})
}

// mustCA trusts a new CA key as name and returns its fingerprint.
func (e *env) mustCA(name string) string {
	e.t.Helper()
	ca, fp := testKey(e.t, 1, "", "")
	if r := e.admin("POST", "/v1/cas", `{"key":"`+ca+`","name":"`+name+`"}`); r.code != 201 {
		e.t.Fatalf("add CA: %d %q", r.code, r.body)
	}
	return fp
}

// TestV1Revoke: a revocation names exactly one of a serial and a key id,
// a CA by fingerprint or trusted name (404 for an unknown name), an
// optional expiry; each is a credential change, listed and audited.
func TestV1Revoke(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		fp := e.mustCA("hil")
		e.rev.take()
		e.run(t, "POST", "/v1/cas/revoked", []apiCase{
			{"serial", "", `{"serial":42}`, 200, `"serial":42`},
			{"key id of a CA by name", "", `{"key_id":"alice","ca":"hil","expires":"2030-01-02T03:04:05Z"}`, 200, `"ca":"` + fp + `"`},
			{"serial of a CA by fingerprint", "", `{"serial":7,"ca":"` + fp + `","expires":1893553445}`, 200, `"expires_at":"2030-01-02T03:04:05Z"`},
			{"both", "", `{"serial":1,"key_id":"a"}`, 400, `exactly one of "serial" and "key_id"`},
			{"neither", "", `{}`, 400, `exactly one of "serial" and "key_id"`},
			{"empty key id", "", `{"key_id":""}`, 400, `"key_id" must be 1 to`},
			{"key id too long", "", `{"key_id":"` + strings.Repeat("k", sshcert.MaxKeyIDLen+1) + `"}`, 400, `"key_id" must be 1 to`},
			{"CA name too long", "", `{"serial":1,"ca":"` + strings.Repeat("n", sshcert.MaxNameLen+1) + `"}`, 400, `"ca" must be`},
			{"unknown CA name", "", `{"serial":1,"ca":"nope"}`, 404, `no trusted CA is named "nope"`},
			{"bad CA fingerprint", "", `{"serial":1,"ca":"SHA256:a b"}`, 400, "is not valid"},
			{"bad expiry", "", `{"serial":1,"expires":"tomorrow"}`, 400, `"expires" must be`},
			{"negative serial", "", `{"serial":-1}`, 400, "serial"},
		})
		calls := e.rev.take()
		if len(calls) != 3 {
			t.Fatalf("credential changes: got %+v, want 3", calls)
		}
		for _, c := range calls {
			if c.Label != "" || c.Why != WhyCertRevoked || c.Epoch <= 0 {
				t.Errorf("credential change: got %+v, want a revocation", c)
			}
		}
		r := e.admin("GET", "/v1/cas/revoked", "")
		if r.code != 200 || strings.Count(r.body, `"kind"`) != 3 || !strings.Contains(r.body, `"key_id":"alice"`) {
			t.Errorf("list: got %d %q, want the three", r.code, r.body)
		}
		var n int
		for _, ev := range e.auditEvents("") {
			if ev.Action == "cert.revoke" && ev.Result == "ok" {
				n++
			}
		}
		if n != 3 {
			t.Errorf("cert.revoke audited %d times, want 3", n)
		}
	})
}

// TestV1RevokeExpiryBound: an "expires" after 9999-12-31T23:59:59Z (the
// last time RFC 3339 writes) is refused with 400 naming the field, and
// nothing is stored or cut; the bound itself is accepted and listed.
func TestV1RevokeExpiryBound(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.run(t, "POST", "/v1/cas/revoked", []apiCase{
			{"year 10000", "", `{"serial":1,"expires":253402300800}`, 400, `"expires" must be at most 9999-12-31T23:59:59Z`},
			{"far future", "", `{"key_id":"a","expires":"9223372036854775807"}`, 400, `"expires" must be at most`},
			{"the bound", "", `{"serial":2,"expires":"9999-12-31T23:59:59Z"}`, 200, `"expires_at":"9999-12-31T23:59:59Z"`},
		})
		if calls := e.rev.take(); len(calls) != 1 {
			t.Errorf("credential changes: got %+v, want the one accepted", calls)
		}
		if r := e.admin("GET", "/v1/cas/revoked", ""); r.code != 200 || strings.Count(r.body, `"kind"`) != 1 ||
			!strings.Contains(r.body, `"serial":2,"expires_at":"9999-12-31T23:59:59Z"`) {
			t.Errorf("list: got %d %q, want the one at the bound", r.code, r.body)
		}
	})
}

// TestV1DeleteRevocation: DELETE /v1/cas/revoked/serial/N and
// /v1/cas/revoked/key_id/ID (?ca= a name or fingerprint; absent: every
// CA) delete the revocation named as it was made, and that one only; 200
// {"removed":false} when there is none (idempotent); audited when one is
// deleted; no credential change (nothing is cut); 400 for a bad kind,
// serial or key id, 404 for an unknown CA name.
func TestV1DeleteRevocation(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		fp := e.mustCA("hil")
		for _, body := range []string{`{"serial":42}`, `{"serial":42,"ca":"hil"}`, `{"serial":18446744073709551615,"ca":"hil"}`,
			`{"key_id":"alice smith/ops"}`, `{"key_id":"alice smith/ops","ca":"hil"}`} {
			if r := e.admin("POST", "/v1/cas/revoked", body); r.code != 200 {
				t.Fatalf("revoke %s: %d %q", body, r.code, r.body)
			}
		}
		e.rev.take()
		removed, none := `{"removed":true}`+"\n", `{"removed":false}`+"\n"
		e.run(t, "DELETE", "", []apiCase{
			{"serial of a CA by name", "/v1/cas/revoked/serial/42?ca=hil", "", 200, removed},
			{"again", "/v1/cas/revoked/serial/42?ca=hil", "", 200, none},
			{"largest serial by fingerprint", "/v1/cas/revoked/serial/18446744073709551615?ca=" + url.QueryEscape(fp), "", 200, removed},
			{"key id of every CA", "/v1/cas/revoked/key_id/" + url.PathEscape("alice smith/ops"), "", 200, removed},
			{"key id of every CA again", "/v1/cas/revoked/key_id/" + url.PathEscape("alice smith/ops"), "", 200, none},
			{"never revoked", "/v1/cas/revoked/serial/7", "", 200, none},
			{"bad kind", "/v1/cas/revoked/fingerprint/x", "", 400, "serial/N or"},
			{"bad serial", "/v1/cas/revoked/serial/-1", "", 400, `serial "-1" is not`},
			{"serial too large", "/v1/cas/revoked/serial/18446744073709551616", "", 400, "is not an unsigned 64-bit"},
			{"empty key id", "/v1/cas/revoked/key_id/", "", 400, `"key_id" must be 1 to`},
			{"key id too long", "/v1/cas/revoked/key_id/" + strings.Repeat("k", sshcert.MaxKeyIDLen+1), "", 400, `"key_id" must be 1 to`},
			{"unknown CA name", "/v1/cas/revoked/serial/42?ca=nope", "", 404, `no trusted CA is named "nope"`},
			{"bad CA fingerprint", "/v1/cas/revoked/serial/42?ca=SHA256:a%20b", "", 400, "is not valid"},
		})
		if calls := e.rev.take(); len(calls) != 0 {
			t.Errorf("credential changes: got %+v, want none", calls)
		}
		r := e.admin("GET", "/v1/cas/revoked", "")
		var list struct {
			Revoked []struct {
				Serial *uint64
				KeyID  *string `json:"key_id"`
				CA     string
			}
		}
		if r.code != 200 || json.Unmarshal([]byte(r.body), &list) != nil || len(list.Revoked) != 2 {
			t.Fatalf("list: got %d %q, want two left", r.code, r.body)
		}
		for _, v := range list.Revoked {
			if v.Serial != nil && (*v.Serial != 42 || v.CA != "") || v.KeyID != nil && (*v.KeyID != "alice smith/ops" || v.CA != fp) {
				t.Errorf("left: got %+v, want serial 42 of every CA and the key id of hil", v)
			}
		}
		var n int
		for _, ev := range e.auditEvents("") {
			if ev.Action == "cert.unrevoke" && ev.Result == "ok" && ev.Actor == "admin" {
				n++
			}
		}
		if n != 3 {
			t.Errorf("cert.unrevoke audited %d times, want 3", n)
		}
	})
}

// TestV1Principals: PUT /v1/nodes/{label} with only "principals" sets
// them (404 for an unknown node, 400 for a bad one); with type and info
// too, once the node is stored. Removing one is an access change of the
// node (its sessions cut); adding one is not.
func TestV1Principals(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		e.rev.take()
		e.run(t, "PUT", "", []apiCase{
			{"set", "/v1/nodes/n1", `{"principals":["project-x","rack-4"]}`, 200, `"principals":["project-x","rack-4"]`},
			{"unknown node", "/v1/nodes/nope", `{"principals":["p"]}`, 404, `node "nope" not found`},
			{"bad principal", "/v1/nodes/n1", `{"principals":["a b"]}`, 400, "principals:"},
			{"with a new node", "/v1/nodes/n2", `{"type":"ipmi","info":{"addr":"10.0.0.9","user":"root","pass":"` + testPass + `"},"principals":["p"]}`, 201, `"principals":["p"]`},
			{"with capture", "/v1/nodes/n3", `{"type":"ipmi","info":{"addr":"10.0.0.8","user":"root","pass":"` + testPass + `"},"capture":"always","principals":["q"]}`, 201, `"principals":["q"]`},
			{"capture is no principals-only body", "/v1/nodes/n1", `{"capture":"always","principals":["p"]}`, 400, "type"},
		})
		if calls := e.rev.take(); len(calls) != 0 {
			t.Errorf("adding principals: got changes %+v, want none", calls)
		}
		if r := e.admin("GET", "/v1/nodes/n1", ""); !strings.Contains(r.body, `"principals":["project-x","rack-4"]`) {
			t.Errorf("GET: got %q, want the principals", r.body)
		}
		epoch := e.epoch("n1")
		if r := e.admin("PUT", "/v1/nodes/n1", `{"principals":["rack-4"]}`); r.code != 200 {
			t.Fatalf("remove one: got %d %q", r.code, r.body)
		}
		calls := e.rev.take()
		if len(calls) != 1 || calls[0].Label != "n1" || calls[0].Why != WhyPrincipals || calls[0].Epoch <= epoch {
			t.Errorf("removing a principal: got changes %+v, want one of n1 past epoch %d", calls, epoch)
		}
		if !hasAudit(e.auditEvents("n1"), "admin", "node.principals", "ok") {
			t.Errorf("audit: want node.principals")
		}
	})
}
