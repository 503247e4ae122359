package certs

// Revocations as an administrator manages them (issue 22): an expiry past
// what can be written is refused, a row an older obmd stored with one
// lists, and a revocation can be deleted.

import (
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

// TestCertRevocationLifecycle: over real HTTP and OpenSSH, on both
// engines: POST /v1/cas/revoked with an expiry after year 9999 is 400
// naming "expires" and stores nothing; rows an older obmd stored with one
// (year 10000, the largest BIGINT) leave GET /v1/cas/revoked answering,
// at the bound, and still refuse their certificates; DELETE
// /v1/cas/revoked/serial/N?ca=hil lets the revoked certificate in again,
// once (again: "removed": false), audited as cert.unrevoke.
func TestCertRevocationLifecycle(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, _ := certObmd(t, dsn)
		o.AddSimNode("rv")
		if got := string(o.MustAPI(400, "POST", "/v1/cas/revoked", map[string]any{"serial": 5, "expires": 253402300800})); !strings.Contains(got, `\"expires\" must be at most 9999-12-31T23:59:59Z`) {
			t.Errorf("POST with expires in year 10000: got %s, want 400 naming \"expires\"", got)
		}
		if got := string(o.MustAPI(200, "GET", "/v1/cas/revoked", nil)); got != `{"revoked":[]}`+"\n" {
			t.Errorf("after the refused POST: got %s, want no revocation", got)
		}
		storeRaw(t, dsn, `INSERT INTO cert_revocations (kind, ca, serial, key_id, expires_at, created_at)
			VALUES ('serial', '', 61, '', 253402300800000, 1), ('key_id', '', 0, 'mallory', 9223372036854775807, 2)`)
		got := string(o.MustAPI(200, "GET", "/v1/cas/revoked", nil))
		if strings.Count(got, `"expires_at":"9999-12-31T23:59:59Z"`) != 2 {
			t.Errorf("GET with rows of an older obmd: got %s, want both at the bound", got)
		}
		certRefused(o, k, "rv", k.sign("-I", "alice", "-n", "rv", "-V", "+1s:+1h", "-z", "61"), "serial 61, revoked until year 10000")
		certRefused(o, k, "rv", k.sign("-I", "mallory", "-n", "rv", "-V", "+1s:+1h", "-z", "62"), "mallory, revoked for ever and more")

		cert := k.sign("-I", "bob", "-n", "rv", "-V", "+1s:+1h", "-z", "77")
		o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"serial": 77, "ca": "hil"})
		certRefused(o, k, "rv", cert, "serial 77 revoked")
		if got := string(o.MustAPI(200, "DELETE", "/v1/cas/revoked/serial/77?ca=hil", nil)); got != `{"removed":true}`+"\n" {
			t.Errorf("DELETE: got %s, want removed", got)
		}
		certOpens(o, k, "rv", cert, "serial 77 once its revocation is deleted")
		if got := string(o.MustAPI(200, "DELETE", "/v1/cas/revoked/serial/77?ca=hil", nil)); got != `{"removed":false}`+"\n" {
			t.Errorf("DELETE again: got %s, want not removed", got)
		}
		var audited int
		for _, e := range o.Audit("") {
			if e.Action == "cert.unrevoke" && e.Result == "ok" && strings.Contains(e.Detail, "serial 77 of hil") {
				audited++
			}
		}
		if audited != 1 {
			t.Errorf("cert.unrevoke audited %d times, want once", audited)
		}
	})
}
