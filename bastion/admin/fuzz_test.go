package admin

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
	"github.com/sirupsen/logrus"
)

// FuzzPutNodeBody: the node body decoder never panics, and a body it
// refuses never reaches the database, on either route.
func FuzzPutNodeBody(f *testing.F) {
	for _, seed := range []string{
		`{"type":"mock","info":{"addr":"10.0.0.4","NumWrites":0}}`,
		`{"type":"ipmi","info":{"addr":"10.0.0.5","user":"root","pass":"p"}}`,
		`{"type":"ipmitool","info":{"addr":"h","user":"u","pass":"p","port":6230,"cipher":17,"interface":"lan"}}`,
		`{"type":"ipmi","info":{"addr":"h","user":"u","pass":"p","port":0}}`,
		`{"type":"mock","info":null}`,
		`{"type":"mock","info":{"addr":"a"}} x`,
		`{"type":"mock","info":{"addr":"a","addr":"b"}}`,
		`{"type":"mock","info":{"addr":"\u0000"}}`,
		`{"type":"mock","info":[]}`,
		`[{"type":"mock"}]`,
		`{"type":"mock","info":{"addr":"a"},"type":"ipmi"}`,
		``, `null`, `{}`, `{"type":`, `"\xff"`,
	} {
		f.Add([]byte(seed))
	}
	ctx := context.Background()
	st, a := fuzzAPI(f)
	h := a.Handler()

	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v1 := range []bool{false, true} {
			info, decErr := a.decodeNodeBody(body, v1)
			path := "/node/fz"
			if v1 {
				path = "/v1/nodes/fz"
			}
			req := httptest.NewRequest("PUT", path, bytes.NewReader(body))
			req.SetBasicAuth("admin", testAdminToken)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			n, getErr := st.Node(ctx, "fz")
			if decErr != nil || len(body) > 4<<10 {
				if getErr == nil {
					t.Fatalf("v1=%v: refused body %q was stored", v1, body)
				}
				if rec.Code != 400 && rec.Code != 413 {
					t.Fatalf("v1=%v: refused body %q: got status %d, want 400 or 413", v1, body, rec.Code)
				}
				if !strings.HasPrefix(rec.Body.String(), `{"error":"`) {
					t.Fatalf("v1=%v: error body %q is not a JSON error", v1, rec.Body.String())
				}
				continue
			}
			if getErr != nil || (rec.Code != 200 && rec.Code != 201) {
				t.Fatalf("v1=%v: accepted body %q: got status %d, stored %v", v1, body, rec.Code, getErr)
			}
			stored, err := a.types.Open(n)
			if err != nil || !stored.Equal(info) {
				t.Fatalf("v1=%v: stored %s %+v (%v), want %s %+v", v1, n.Type, stored.View(), err, info.Type(), info.View())
			}
			if _, err := st.DeleteNode(ctx, "fz"); err != nil {
				t.Fatalf("clean up: %v", err)
			}
		}
	})
}

// FuzzValidLabel: ValidLabel never panics and what it accepts keeps its
// promises.
func FuzzValidLabel(f *testing.F) {
	for _, s := range []string{"n1", "", ".", "..", "a/b", "a\x00", " a", "a ", "nœud", "a\u202eb", strings.Repeat("é", 41)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, label string) {
		if ValidLabel(label) != nil {
			return
		}
		first, _ := utf8.DecodeRuneInString(label)
		last, _ := utf8.DecodeLastRuneInString(label)
		if len(label) < 1 || len(label) > db.MaxLabelLen || !utf8.ValidString(label) || strings.Contains(label, "/") ||
			label == "." || label == ".." || unicode.IsSpace(first) || unicode.IsSpace(last) ||
			strings.IndexFunc(label, unicode.IsControl) >= 0 {
			t.Fatalf("accepted %q", label)
		}
	})
}

// fuzzAPI is the API the fuzz targets drive: a real SQLite store (migrated,
// in a temporary directory) behind fake runner, consoles and revoker.
func fuzzAPI(f *testing.F) (*db.Store, *API) {
	ctx := context.Background()
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	st, err := db.Open(ctx, dbtest.SQLiteDSN(f), quiet)
	if err != nil {
		f.Fatalf("open store: %v", err)
	}
	f.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		f.Fatalf("migrate: %v", err)
	}
	sealer, _ := keys.NewSealer(make([]byte, 32))
	reg := sessions.New(sessions.Config{})
	a, err := New(Config{AdminToken: testAdminToken, MaxBody: 4 << 10,
		Limiter: authlimit.New(noLimits, time.Now)}, st, testTypes(f, sealer), newFakeRunner(reg),
		newConsoles(f), &fakeRevoker{reg: reg, opener: openerOver(reg, st)}, reg, quiet)
	if err != nil {
		f.Fatalf("new api: %v", err)
	}
	return st, a
}
