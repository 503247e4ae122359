package web

// One-time tickets minted on the admin API.

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

// TestTickets: a ticket minted on the admin API opens the node's
// console once; a second use, a ticket for another node, and a ticket
// minted before an access change are refused like a wrong token; with the
// web console off the route says so.
func TestTickets(t *testing.T) {
	o := startWeb(t)
	o.AddSimNode("t1")
	o.AddSimNode("t2")
	mint := func(label string) (ticket, link string) {
		var out struct {
			Ticket, URL string
			ExpiresAt   time.Time `json:"expires_at"`
		}
		if err := json.Unmarshal(o.MustAPI(200, "POST", "/v1/nodes/"+label+"/web-tickets", nil), &out); err != nil {
			t.Fatal(err)
		}
		if left := time.Until(out.ExpiresAt); left <= 0 || left > time.Minute+time.Second {
			t.Errorf("expires in %v, want within a minute", left)
		}
		return out.Ticket, out.URL
	}
	ticket, link := mint("t1")
	if want := "http://" + o.WebAddr() + "/nodes/t1#ticket=" + ticket; link != want {
		t.Errorf("url: got %q, want %q", link, want)
	}
	if _, m := loginWeb(t, o, "t1", map[string]any{"ticket": ticket}); m.Type != "hello" || m.Role != "writer" {
		t.Errorf("first use: got %+v", m)
	}
	refusal := "unknown node or invalid credential"
	if _, m := loginWeb(t, o, "t1", map[string]any{"ticket": ticket}); m.Error != refusal {
		t.Errorf("second use: got %+v", m)
	}
	other, _ := mint("t2")
	if _, m := loginWeb(t, o, "t1", map[string]any{"ticket": other}); m.Error != refusal {
		t.Errorf("another node's ticket: got %+v", m)
	}
	stale, _ := mint("t1")
	o.Rotate("t1")
	if _, m := loginWeb(t, o, "t1", map[string]any{"ticket": stale}); m.Error != refusal {
		t.Errorf("ticket from before a rotation: got %+v", m)
	}
	o.MustAPI(404, "POST", "/v1/nodes/nope/web-tickets", nil)
	waitAudit(t, o, "t1", "admin web.ticket ok expires", "web auth ok ticket", "ticket from before an access change")

	off := obmdtest.Start(t)
	off.AddSimNode("t1")
	off.MustAPI(409, "POST", "/v1/nodes/t1/web-tickets", nil)
}
