package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
)

// FuzzKeyBody: POST /v1/nodes/{label}/keys never panics; a body it refuses
// gets a JSON error (400 or 413) that never echoes the key line and
// stores nothing; a body it accepts stores exactly the key its line parses
// to.
func FuzzKeyBody(f *testing.F) {
	const line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGcOWuhoq8Pd1C6nkJBjqGc6XkI8Cmb0CoFsFu4yb0bY alice@laptop"
	for _, seed := range []string{
		`{"key":"` + line + `"}`,
		`{"key":"` + line + `","comment":"x"}`,
		`{"key":"command=\"/bin/sh\" ` + line + `"}`,
		`{"key":"` + line + `\n` + line + `"}`,
		`{"key":"` + line + ` \u001b[2J"}`,
		`{"key":"` + line + `"} {}`,
		`{"key":1}`, `{"key":null}`, `{"key":""}`, `{}`, `[]`, `null`, ``, `{"key":`, "\xff",
		`{"key":"` + strings.Repeat("A", 5000) + `"}`,
	} {
		f.Add([]byte(seed))
	}
	ctx := context.Background()
	st, a := fuzzAPI(f)
	h := a.Handler()
	if _, err := st.CreateNode(ctx, db.Node{Label: "fz", Type: string(TypeMock), InfoSealed: []byte("x")}); err != nil {
		f.Fatalf("create node: %v", err)
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/v1/nodes/fz/keys", bytes.NewReader(body))
		req.SetBasicAuth("admin", testAdminToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		stored, err := st.Keys(ctx, "fz")
		if err != nil {
			t.Fatalf("list keys: %v", err)
		}
		var want struct {
			Key string `json:"key"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		decErr := dec.Decode(&want)
		if !utf8.Valid(body) {
			decErr = io.ErrUnexpectedEOF
		}
		if decErr == nil {
			if _, err := dec.Token(); err != io.EOF {
				decErr = io.ErrUnexpectedEOF
			}
		}
		var ak keys.AuthorizedKey
		parseErr := decErr
		if parseErr == nil {
			ak, parseErr = keys.ParseAuthorizedKey(want.Key)
		}
		if parseErr != nil || len(body) > 4<<10 {
			if len(stored) != 0 {
				t.Fatalf("refused body %q stored %+v", body, stored)
			}
			if rec.Code != 400 && rec.Code != 413 {
				t.Fatalf("refused body %q: got status %d, want 400 or 413", body, rec.Code)
			}
			var eb api.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error == "" {
				t.Fatalf("error body %q is not a JSON error", rec.Body.String())
			}
			if f := strings.Fields(want.Key); len(f) > 1 && len(f[1]) > 8 && strings.Contains(eb.Error, f[1]) {
				t.Fatalf("error %q echoes the key line", eb.Error)
			}
			return
		}
		if rec.Code != 201 || len(stored) != 1 || stored[0].Fingerprint != ak.Fingerprint || stored[0].Line != ak.Line {
			t.Fatalf("accepted body %q: got status %d, stored %+v, want %s", body, rec.Code, stored, ak.Fingerprint)
		}
		if _, err := st.DeleteKey(ctx, "fz", ak.Fingerprint); err != nil {
			t.Fatalf("clean up: %v", err)
		}
	})
}
