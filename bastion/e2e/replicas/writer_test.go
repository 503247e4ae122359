package replicas

// One writer per node in the cluster (issue 14), in TestReplicas: the
// replica holding a node's SOL link arbitrates the write role for every
// viewer on every replica, checked on the BMC's serial side.

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// oneWriter: viewers vs on replicas reps (vs[0] attached first, so its
// replica holds the link) share one writer: the first; a takeover through
// any replica moves it and tells the previous writer wherever it is;
// read-only escapes and `console --read-only` work the same everywhere;
// and no key typed by a viewer that does not write reaches the node.
func oneWriter(t *testing.T, bmc *ipmisim.Sim, vs []*obmdtest.Client, reps []*obmdtest.Replica, keyFile string) {
	va, vb, vc := vs[0], vs[1], vs[2]
	named := regexp.MustCompile(`#[0-9a-f]{8}-\d+ \(writing, on another replica\)`)
	for i, v := range vs[1:] {
		v.Out.Wait(t, "the banner on "+reps[i+1].Name, 0, "(writing, on another replica)")
		if !named.MatchString(v.Out.String()) {
			t.Errorf("banner on %s does not name the writer on %s: %q", reps[i+1].Name, reps[0].Name, obmdtest.Tail(v.Out.String(), 400))
		}
	}
	for i, v := range vs {
		for _, r := range reps {
			if strings.Contains(v.Out.String(), r.Name) {
				t.Errorf("the screen on %s names replica %s (for operators only): %q", reps[i].Name, r.Name, obmdtest.Tail(v.Out.String(), 400))
			}
		}
	}
	var lost []string // typed by viewers that were not writing
	typed := func(v *obmdtest.Client, who string) {
		t.Helper()
		k := "w-" + who + "-" + obmdtest.Random(t)[:6]
		v.TypeKeys(k + "\r")
		bmc.WaitSerial(t, []byte(k), 10*time.Second)
	}
	refused := func(v *obmdtest.Client, who string) {
		t.Helper()
		k := "r-" + who + "-" + obmdtest.Random(t)[:6]
		v.TypeKeys(k + "\r")
		lost = append(lost, k)
	}
	told := func(v *obmdtest.Client, who string, from int) {
		t.Helper()
		v.Out.Wait(t, who+" told of the takeover", from, "took over writing; you are read-only")
	}

	refused(vb, "b")
	refused(vc, "c")
	typed(va, "a")

	// C takes over through a relay: A, on the holder, is told.
	mark := len(va.Out.String())
	vc.TypeKeys(obmdtest.EscTakeOver)
	told(va, "A", mark)
	typed(vc, "c")
	refused(va, "a")

	// B takes over: C, on another relaying replica, is told by its own.
	mark = len(vc.Out.String())
	vb.TypeKeys(obmdtest.EscTakeOver)
	told(vc, "C", mark)
	typed(vb, "b")
	refused(vc, "c")

	// B goes read-only: nobody writes, anywhere.
	mark = len(vb.Out.String())
	vb.TypeKeys(obmdtest.EscReadOnly)
	vb.Out.Wait(t, "B read-only", mark, "[obmd: you are read-only]")
	refused(va, "a")
	refused(vb, "b")
	refused(vc, "c")
	// A read-only session on a relaying replica does not write either,
	// though nobody does, nor after Ctrl-E c f.
	ro := &obmdtest.SSHPTY(t, reps[1].Listening["ssh"], "n1", "", []string{"-i", keyFile}, "console", "--read-only").Client
	ro.Out.Wait(t, "the read-only banner", 0, "this session is read-only")
	refused(ro, "ro")
	ro.TypeKeys(obmdtest.EscTakeOver)
	ro.Expect("[obmd: this session is read-only]")
	refused(ro, "ro-f")
	ro.Detach()

	// C takes the role back; what it types comes after everything typed
	// before it through its relay (the holder's hub keeps one order).
	vc.TypeKeys(obmdtest.EscTakeOver)
	typed(vc, "c-back")
	for _, k := range lost {
		if bytes.Contains(bmc.Serial(), []byte(k)) {
			t.Errorf("%q, typed by a viewer that was not writing, reached the serial port", k)
		}
	}
}

// survivingWriter: survivors[0] writes before the holder is killed; it
// still does once a survivor has taken the link over, and survivors[1]
// does not.
func survivingWriter(t *testing.T, bmc *ipmisim.Sim, survivors []*obmdtest.Client, before bool) {
	t.Helper()
	w, r := survivors[0], survivors[1]
	k := "survivor-" + obmdtest.Random(t)[:6]
	if before {
		w.TypeKeys(obmdtest.EscTakeOver)
		w.TypeKeys(k + "\r")
		bmc.WaitSerial(t, []byte(k), 10*time.Second)
		return
	}
	lost := "not-writing-" + obmdtest.Random(t)[:6]
	r.TypeKeys(lost + "\r")
	w.TypeKeys(k + "\r")
	bmc.WaitSerial(t, []byte(k), 15*time.Second)
	time.Sleep(200 * time.Millisecond) // the other relay's keys, were they sent
	if bytes.Contains(bmc.Serial(), []byte(lost)) {
		t.Errorf("after the holder's death, a survivor that was not writing typed %q onto the serial port", lost)
	}
}

// oneSessionList: with viewers on every replica, `sessions` through any
// replica and GET /v1/sessions list every replica's sessions (the admin's
// naming the replica, IDs unique), the writer marked wherever it is; DELETE /v1/sessions
// through one replica ends a session on another, with the reason.
func oneSessionList(t *testing.T, reps []*obmdtest.Replica, tok, writerOn string) {
	a, c := reps[0], reps[2]
	extra := a.GoViewer(t, "n1", tok)
	extra.Out.Wait(t, "the extra viewer's banner", 0, "console of n1")
	type listed struct {
		ID, Kind, Replica string
		Started           time.Time
	}
	var body struct{ Sessions []listed }
	if err := json.Unmarshal(c.On(t).MustAPI(200, "GET", "/v1/sessions?node=n1", nil), &body); err != nil {
		t.Fatal(err)
	}
	per, ids := map[string]int{}, map[string]bool{}
	var newest listed
	writerID := ""
	for _, s := range body.Sessions {
		per[s.Replica]++
		if ids[s.ID] {
			t.Errorf("session ID %q listed twice", s.ID)
		}
		ids[s.ID] = true
		if s.Replica == a.Name && s.Started.After(newest.Started) {
			newest = s
		}
		if s.Replica == writerOn {
			writerID = s.ID
		}
	}
	for i, want := range []int{2, 1, 1} { // A's two viewers; B's; C's
		if per[reps[i].Name] != want {
			t.Errorf("GET /v1/sessions through %s: %d sessions of %s, want %d (all: %+v)", c.Name, per[reps[i].Name], reps[i].Name, want, body.Sessions)
		}
	}
	res, err := reps[1].Exec("n1", tok, "sessions")
	if err != nil || res.Code != 0 {
		t.Fatalf("sessions through %s: %v, %v", reps[1].Name, res, err)
	}
	for id := range ids {
		if !strings.Contains(res.Stdout, id) {
			t.Errorf("`sessions` through %s does not list %s:\n%s", reps[1].Name, id, res.Stdout)
		}
	}
	var writers []string
	for _, line := range strings.Split(res.Stdout, "\n") {
		if strings.HasSuffix(line, " yes") {
			writers = append(writers, line)
		}
	}
	if len(writers) != 1 || writerID == "" || !strings.HasPrefix(writers[0], writerID+" ") {
		t.Errorf("`sessions` through %s: writers %q, want one, on %s:\n%s", reps[1].Name, writers, writerOn, res.Stdout)
	}

	c.On(t).MustAPI(200, "DELETE", "/v1/sessions/"+newest.ID, nil)
	extra.End.Wait(t, "the session kicked through "+c.Name)
	if !strings.Contains(extra.Out.String(), "your session on n1 was ended by an administrator; your access is unchanged") {
		t.Errorf("kicked viewer on %s: no reason; screen %q", a.Name, obmdtest.Tail(extra.Out.String(), 300))
	}
	if code, _ := c.On(t).API("DELETE", "/v1/sessions/"+newest.ID, nil); code != 404 {
		t.Errorf("kick the ended session again: got %d, want 404", code)
	}
}
