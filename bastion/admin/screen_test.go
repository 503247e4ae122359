package admin

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/screen"
)

// TestV1Screen: GET .../screen answers the node's screen as JSON (its
// size, cursor and rows), as text and as a redraw that draws the same
// rows on a terminal; a bad format, an unknown node and a bad label are
// refused.
func TestV1Screen(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		// Each request opens the node's link (it has no history here), whose
		// console prints a line every few milliseconds: until one does, the
		// screen is blank.
		get := func(format string) resp {
			t.Helper()
			for try := 0; ; try++ {
				r := e.admin("GET", "/v1/nodes/n1/screen"+format, "")
				if r.code != 200 || strings.Contains(r.body, "line ") || try == 100 {
					return r
				}
			}
		}
		var s api.Screen
		r := get("")
		if r.code != 200 || json.Unmarshal([]byte(r.body), &s) != nil {
			t.Fatalf("json: got %d %q", r.code, r.body)
		}
		if s.Cols != 80 || s.Rows != 25 || len(s.Lines) != 25 || !s.Cursor.Visible || s.Spans == nil ||
			!strings.Contains(strings.Join(s.Lines, "\n"), "line ") {
			t.Errorf("json: got %+v, want 80x25 with the console's lines", s)
		}
		r = get("?format=text")
		if r.code != 200 || r.header.Get("Content-Type") != "text/plain; charset=utf-8" || strings.Count(r.body, "\n") != 25 ||
			!strings.Contains(r.body, "line ") {
			t.Errorf("text: got %d %q", r.code, r.body)
		}
		r = get("?format=ansi")
		term, _ := screen.New(screen.Size{})
		term.Write([]byte(r.body))
		if r.code != 200 || !strings.HasPrefix(r.body, "\x1b[?25l") || !strings.Contains(term.Text(), "line ") {
			t.Errorf("ansi: got %d %q", r.code, r.body)
		}
		for _, c := range []struct {
			path string
			code int
		}{
			{"/v1/nodes/n1/screen?format=html", 400},
			{"/v1/nodes/nope/screen", 404},
		} {
			if r := e.admin("GET", c.path, ""); r.code != c.code {
				t.Errorf("%s: got %d %q, want %d", c.path, r.code, r.body, c.code)
			}
		}
	})
}

// TestScreenViewJSON: the API's screen (api.Screen, which obmctl and Go
// clients decode) is the emulator's snapshot in its JSON (which the route
// and `screen --json` print): every field of one is a field of the other.
func TestScreenViewJSON(t *testing.T) {
	term, _ := screen.New(screen.Size{Cols: 20, Rows: 3})
	term.Write([]byte("\x1b[?1049ha\x1b[1;2;3;4;5;31mred\x1b[0m\r\n\x1b[7;8;9;48;5;200mrev\x1b[38;2;1;2;3mrgb\x1b[m\x1b[?25l\x1b[3;5H"))
	want, err := term.Snapshot().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var s api.Screen
	dec := json.NewDecoder(bytes.NewReader(want))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("decode %s: %v", want, err)
	}
	got, err := json.Marshal(s)
	if err != nil || string(got) != string(want) {
		t.Errorf("got %s (%v)\nwant %s", got, err, want)
	}
}

// TestV1NodeScreenSize: PUT /v1/nodes/{label} sets the screen size with
// the BMC info (at creation, and on an identical node without cutting
// anything); a bad size refuses the whole body.
func TestV1NodeScreenSize(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		body := func(size string) string {
			return `{"type":"mock","info":{"addr":"10.0.0.4"},"screen_size":` + size + `}`
		}
		if r := e.admin("PUT", "/v1/nodes/n1", body(`"300x25"`)); r.code != 400 || !strings.Contains(r.body, "screen_size") {
			t.Errorf("bad size: got %d %q, want 400", r.code, r.body)
		}
		if r := e.admin("GET", "/v1/nodes/n1", ""); r.code != 404 {
			t.Errorf("after a refused body: got %d, want no node", r.code)
		}
		if r := e.admin("PUT", "/v1/nodes/n1", body(`"132x43"`)); r.code != 201 || !strings.Contains(r.body, `"screen_size":"132x43"`) {
			t.Fatalf("create: got %d %q", r.code, r.body)
		}
		ep := e.epoch("n1")
		e.rev.take()
		if r := e.admin("PUT", "/v1/nodes/n1", body(`"100x30"`)); r.code != 200 || !strings.Contains(r.body, `"screen_size":"100x30"`) {
			t.Errorf("change: got %d %q", r.code, r.body)
		}
		if e.epoch("n1") != ep || len(e.rev.take()) != 0 {
			t.Error("a new screen size moved the epoch or revoked")
		}
		if !hasAudit(e.auditEvents("n1"), "admin", "node.screen_size", "ok") {
			t.Error("audit: want node.screen_size")
		}
		if r := e.admin("PUT", "/v1/nodes/n1", body(`""`)); r.code != 200 || strings.Contains(r.body, "screen_size") {
			t.Errorf("back to the default: got %d %q", r.code, r.body)
		}
	})
}
