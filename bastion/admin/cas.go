package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys/sshcert"
)

// The certificate authorities obmd trusts for certificate logins, and the
// certificates revoked (/v1/cas). Removing a CA or revoking a certificate
// is a credential change: it ends, on every replica, the sessions that
// logged in with a certificate it names (Revoker.ChangeCred).

// addCA is POST /v1/cas {"key": "<CA public key line>", "name": "hil"}:
// 201 when the CA is new, 200 when it is trusted already under that name,
// 409 when the name or the key is taken.
func (a *API) addCA(w http.ResponseWriter, r *http.Request) {
	var body api.AddCA
	if !a.readJSON(w, r, &body, true, false) {
		return
	}
	ca, err := sshcert.ParseAuthority(body.Name, body.Key)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error()) // fixed texts, the name quoted
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.cfg.ChangeTimeout)
	defer cancel()
	created, err := a.store.AddCA(ctx, db.CA{Fingerprint: ca.Fingerprint, Name: ca.Name, Line: ca.Line})
	switch {
	case errors.Is(err, db.ErrExists):
		writeError(w, http.StatusConflict, "CA "+ca.Fingerprint+" "+quote(ca.Name)+" is not added: "+conflict(err))
		return
	case err != nil && ctx.Err() != nil:
		a.log.WithError(err).Error("ca_add_timed_out")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the database did not answer within %v; "+
			"the CA may be trusted or not: repeat the call (it is safe) or remove the CA", a.cfg.ChangeTimeout))
		return
	case err != nil:
		a.storeError(w, r, "add CA", err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		a.auditEvent(r, db.AuditEvent{Actor: "admin", Action: "ca.add", Result: "ok", Detail: ca.Name + " " + ca.Fingerprint})
	}
	writeJSON(w, status, api.CA{Fingerprint: ca.Fingerprint, Name: ca.Name, Key: ca.Line})
}

// conflict is the store's account of a clash (db.ErrExists): which name
// or key is taken. Names are validated ASCII, so it is safe to show.
func conflict(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, db.ErrExists.Error()+": "); i >= 0 {
		return msg[i+len(db.ErrExists.Error())+2:]
	}
	return "it clashes with a trusted CA"
}

// listCAs is GET /v1/cas.
func (a *API) listCAs(w http.ResponseWriter, r *http.Request) {
	cas, err := a.store.CAs(r.Context())
	if err != nil {
		a.storeError(w, r, "list CAs", err)
		return
	}
	out := api.CAs{CAs: make([]api.CA, 0, len(cas))}
	for _, ca := range cas {
		at := ca.CreatedAt.UTC()
		out.CAs = append(out.CAs, api.CA{Fingerprint: ca.Fingerprint, Name: ca.Name, Key: ca.Line, CreatedAt: &at})
	}
	writeJSON(w, http.StatusOK, out)
}

// validFingerprint says what is wrong with a CA fingerprint from a client,
// or "".
func validFingerprint(fp string) string {
	if !strings.HasPrefix(fp, "SHA256:") || len(fp) > db.MaxFingerprintLen ||
		strings.IndexFunc(fp, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) }) >= 0 {
		return "fingerprint " + quote(fp) + " is not valid (want SHA256:..., with \"/\" escaped as %2F)"
	}
	return ""
}

// deleteCA is DELETE /v1/cas/{fingerprint...}: the CA is no longer
// trusted, and every session that logged in with one of its certificates
// ends, on every replica, before the answer. Removing a CA that is not
// trusted is done already: 200 too ({"removed": false}).
func (a *API) deleteCA(w http.ResponseWriter, r *http.Request) {
	fp := r.PathValue("fingerprint")
	if msg := validFingerprint(fp); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	var removed bool
	err := a.credChange(r, access.CredChange{Cred: db.CredChange{Kind: db.CredCA, CA: fp}, Why: WhyCARemoved,
		Do: func(ctx context.Context) (int64, error) {
			epoch, existed, err := a.store.DeleteCA(ctx, fp)
			removed = existed
			return epoch, err
		}}, "ca.remove", fp, func() bool { return removed })
	if err != nil {
		a.changeFailed(w, r, "remove CA", err)
		return
	}
	writeJSON(w, http.StatusOK, api.Removed{Removed: removed})
}

// credChange runs c through the Revoker and audits it as action (detail
// what it names) if it changed anything (changed, asked after it ran) or
// may have.
func (a *API) credChange(r *http.Request, c access.CredChange, action, detail string, changed func() bool) error {
	err := a.revoker.ChangeCred(r.Context(), c)
	e := db.AuditEvent{Actor: "admin", Action: action, Source: r.RemoteAddr, Result: "ok", Detail: detail}
	switch {
	case err == nil && !changed():
		return nil
	case errors.Is(err, access.ErrNotConfirmed):
		e.Detail += " (not confirmed by every replica in time)"
	case errors.Is(err, access.ErrOutcomeUnknown):
		e.Result, e.Detail = "error", e.Detail+" (timed out; outcome unknown)"
	case err != nil:
		return err
	}
	a.auditEvent(r, e)
	return err
}

// viewRevocation is v as /v1/cas/revoked shows it.
func viewRevocation(v db.Revocation) api.Revocation {
	out := api.Revocation{Kind: v.Kind, CA: v.CA, CreatedAt: v.CreatedAt.UTC()}
	if v.Kind == db.CredKeyID {
		out.KeyID = &v.KeyID
	} else {
		out.Serial = &v.Serial
	}
	if !v.ExpiresAt.IsZero() {
		at := v.ExpiresAt.UTC()
		out.ExpiresAt = &at
	}
	return out
}

// revoke is POST /v1/cas/revoked {"serial": 42} or {"key_id": "alice"},
// with "ca" (a fingerprint or a name; default every CA) and "expires"
// optional: the certificates it names are refused from now on, and every
// session that logged in with one ends, on every replica, before the
// answer.
func (a *API) revoke(w http.ResponseWriter, r *http.Request) {
	var body api.Revoke
	if !a.readJSON(w, r, &body, true, false) {
		return
	}
	rev, shown, ok := a.revocation(w, r, body)
	if !ok {
		return
	}
	detail := describe(rev, shown)
	err := a.credChange(r, access.CredChange{Cred: db.CredChange{Kind: rev.Kind, CA: rev.CA, Serial: rev.Serial, KeyID: rev.KeyID},
		Why: WhyCertRevoked, Do: func(ctx context.Context) (int64, error) { return a.store.Revoke(ctx, rev) }},
		"cert.revoke", detail, func() bool { return true })
	if err != nil {
		a.changeFailed(w, r, "revoke", err)
		return
	}
	rev.CreatedAt = a.cfg.Now()
	writeJSON(w, http.StatusOK, viewRevocation(rev))
}

// revocation checks body and resolves its CA (revoke, deleteRevocation):
// the revocation, how the audit names its CA, and ok; or, answered
// already (400, 404, 500), not ok.
func (a *API) revocation(w http.ResponseWriter, r *http.Request, body api.Revoke) (db.Revocation, string, bool) {
	rev, msg := parseRevocation(body)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return rev, "", false
	}
	shown, err := a.resolveCA(r.Context(), &rev)
	switch {
	case errors.Is(err, db.ErrNotFound):
		writeError(w, http.StatusNotFound, "no trusted CA is named "+quote(body.CA))
		return rev, "", false
	case err != nil:
		a.storeError(w, r, "read CAs", err)
		return rev, "", false
	}
	return rev, shown, true
}

// deleteRevocation is DELETE /v1/cas/revoked/serial/{N} or
// /v1/cas/revoked/key_id/{ID} (escaped: "/" as %2F), with ?ca= a
// fingerprint or a name (absent: the revocation of every CA), naming the
// revocation as it was made and as GET lists it: the certificates it
// refused are accepted again. No session is cut (there is none of a
// revoked certificate). Deleting one that is not there is done already:
// 200 too ({"removed": false}).
func (a *API) deleteRevocation(w http.ResponseWriter, r *http.Request) {
	value := r.PathValue("value")
	body := api.Revoke{CA: r.URL.Query().Get("ca")}
	switch r.PathValue("kind") {
	case db.CredSerial:
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "serial "+quote(value)+" is not an unsigned 64-bit number")
			return
		}
		body.Serial = &n
	case db.CredKeyID:
		body.KeyID = &value
	default:
		writeError(w, http.StatusBadRequest, `want /v1/cas/revoked/serial/N or /v1/cas/revoked/key_id/ID`)
		return
	}
	rev, shown, ok := a.revocation(w, r, body)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.cfg.ChangeTimeout)
	defer cancel()
	removed, err := a.store.DeleteRevocation(ctx, rev)
	switch {
	case err != nil && ctx.Err() != nil:
		a.log.WithError(err).Error("revocation_delete_timed_out")
		a.auditEvent(r, db.AuditEvent{Actor: "admin", Action: "cert.unrevoke", Result: "error",
			Detail: describe(rev, shown) + " (timed out; outcome unknown)"})
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the database did not answer within %v; "+
			"the revocation may be deleted or not: repeat the call (it is safe)", a.cfg.ChangeTimeout))
		return
	case err != nil:
		a.storeError(w, r, "delete revocation", err)
		return
	case removed:
		a.auditEvent(r, db.AuditEvent{Actor: "admin", Action: "cert.unrevoke", Result: "ok", Detail: describe(rev, shown)})
	}
	writeJSON(w, http.StatusOK, api.Removed{Removed: removed})
}

// parseRevocation checks a revocation's body; the message says what is
// wrong ("" if nothing).
func parseRevocation(b api.Revoke) (db.Revocation, string) {
	var rev db.Revocation
	switch {
	case (b.Serial == nil) == (b.KeyID == nil):
		return rev, `give exactly one of "serial" and "key_id"`
	case b.Serial != nil:
		rev.Kind, rev.Serial = db.CredSerial, *b.Serial
	case *b.KeyID == "" || len(*b.KeyID) > sshcert.MaxKeyIDLen || !utf8.ValidString(*b.KeyID):
		return rev, fmt.Sprintf(`"key_id" must be 1 to %d bytes of UTF-8`, sshcert.MaxKeyIDLen)
	default:
		rev.Kind, rev.KeyID = db.CredKeyID, *b.KeyID
	}
	switch rev.CA = b.CA; {
	case strings.HasPrefix(rev.CA, "SHA256:"):
		if msg := validFingerprint(rev.CA); msg != "" {
			return rev, `"ca": ` + msg
		}
	case len(rev.CA) > sshcert.MaxNameLen:
		return rev, fmt.Sprintf(`"ca" must be a CA's fingerprint (SHA256:...) or name (at most %d bytes)`, sshcert.MaxNameLen)
	}
	if len(b.Expires) > 0 && string(b.Expires) != "null" {
		at, err := parseExpires(b.Expires)
		if err != nil {
			return rev, `"expires" must be an RFC 3339 time or unix seconds`
		}
		if last := db.MaxRevocationExpiry(); at.Unix() > last.Unix() { // not After: huge unix seconds wrap
			return rev, `"expires" must be at most ` + last.Format(time.RFC3339) + ` (omit it to revoke for good)`
		}
		rev.ExpiresAt = at
	}
	return rev, ""
}

// parseExpires reads a JSON string (RFC 3339 or unix seconds) or number
// (unix seconds).
func parseExpires(raw json.RawMessage) (time.Time, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil {
			return time.Time{}, err
		}
		s = strconv.FormatInt(n, 10)
	}
	at, err := parseSince(s)
	if err == nil && at.Unix() <= 0 {
		err = errors.New("not after 1970")
	}
	return at, err
}

// resolveCA turns a CA given by name into its fingerprint (db.ErrNotFound:
// no trusted CA has that name); a fingerprint is kept as it is (it need
// not be trusted yet). It returns how the audit names the CA.
func (a *API) resolveCA(ctx context.Context, rev *db.Revocation) (string, error) {
	if rev.CA == "" || strings.HasPrefix(rev.CA, "SHA256:") {
		return rev.CA, nil
	}
	cas, err := a.store.CAs(ctx)
	if err != nil {
		return "", err
	}
	for _, ca := range cas {
		if ca.Name == rev.CA {
			shown := ca.Name + " (" + ca.Fingerprint + ")"
			rev.CA = ca.Fingerprint
			return shown, nil
		}
	}
	return "", db.ErrNotFound
}

// describe names a revocation in the audit.
func describe(rev db.Revocation, ca string) string {
	what := "serial " + strconv.FormatUint(rev.Serial, 10)
	if rev.Kind == db.CredKeyID {
		what = "key id " + quote(rev.KeyID)
	}
	if ca == "" {
		ca = "every CA"
	}
	what += " of " + ca
	if !rev.ExpiresAt.IsZero() {
		what += " until " + rev.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return what
}

// listRevocations is GET /v1/cas/revoked.
func (a *API) listRevocations(w http.ResponseWriter, r *http.Request) {
	revs, err := a.store.Revocations(r.Context())
	if err != nil {
		a.storeError(w, r, "list revocations", err)
		return
	}
	out := api.Revocations{Revoked: make([]api.Revocation, 0, len(revs))}
	for _, v := range revs {
		out.Revoked = append(out.Revoked, viewRevocation(v))
	}
	writeJSON(w, http.StatusOK, out)
}
