package daemon_test

// One writer per node in the cluster (issue 14), in TestReplicas: the
// replica holding a node's SOL link arbitrates the write role for every
// viewer on every replica, checked on the BMC's serial side.

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"github.com/obmd/obmd/sol/ipmisim"
)

// rpOneWriter: viewers vs on replicas reps (vs[0] attached first, so its
// replica holds the link) share one writer: the first; a takeover through
// any replica moves it and tells the previous writer wherever it is;
// read-only escapes and `console --read-only` work the same everywhere;
// and no key typed by a viewer that does not write reaches the node.
func rpOneWriter(t *testing.T, bmc *ipmisim.Sim, vs []*client, reps []*rpReplica, keyFile string) {
	va, vb, vc := vs[0], vs[1], vs[2]
	named := regexp.MustCompile(`#` + regexp.QuoteMeta(reps[0].name) + `-\d+ \(writing, on another replica\)`)
	for i, v := range vs[1:] {
		v.out.wait(t, "the banner on "+reps[i+1].name, 0, "(writing, on another replica)")
		if !named.MatchString(v.out.String()) {
			t.Errorf("banner on %s does not name the writer on %s: %q", reps[i+1].name, reps[0].name, tailString(v.out.String(), 400))
		}
	}
	var lost []string // typed by viewers that were not writing
	typed := func(v *client, who string) {
		t.Helper()
		k := "w-" + who + "-" + rpRandom(t)[:6]
		v.typeKeys(k + "\r")
		bmc.WaitSerial(t, []byte(k), 10*time.Second)
	}
	refused := func(v *client, who string) {
		t.Helper()
		k := "r-" + who + "-" + rpRandom(t)[:6]
		v.typeKeys(k + "\r")
		lost = append(lost, k)
	}
	told := func(v *client, who string, from int) {
		t.Helper()
		v.out.wait(t, who+" told of the takeover", from, "took over writing; you are read-only")
	}

	refused(vb, "b")
	refused(vc, "c")
	typed(va, "a")

	// C takes over through a relay: A, on the holder, is told.
	mark := len(va.out.String())
	vc.typeKeys(escTakeOver)
	told(va, "A", mark)
	typed(vc, "c")
	refused(va, "a")

	// B takes over: C, on another relaying replica, is told by its own.
	mark = len(vc.out.String())
	vb.typeKeys(escTakeOver)
	told(vc, "C", mark)
	typed(vb, "b")
	refused(vc, "c")

	// B goes read-only: nobody writes, anywhere.
	mark = len(vb.out.String())
	vb.typeKeys(escReadOnly)
	vb.out.wait(t, "B read-only", mark, "[obmd: you are read-only]")
	refused(va, "a")
	refused(vb, "b")
	refused(vc, "c")
	// A read-only attach on a relaying replica does not write either,
	// though nobody does.
	ro := &sshPTY(t, reps[1].listening["ssh"], "n1", "", []string{"-i", keyFile}, "console", "--read-only").client
	ro.out.wait(t, "the read-only banner", 0, "you are read-only")
	refused(ro, "ro")
	ro.detach()

	// C takes the role back; what it types comes after everything typed
	// before it through its relay (the holder's hub keeps one order).
	vc.typeKeys(escTakeOver)
	typed(vc, "c-back")
	for _, k := range lost {
		if bytes.Contains(bmc.Serial(), []byte(k)) {
			t.Errorf("%q, typed by a viewer that was not writing, reached the serial port", k)
		}
	}
}

// rpSurvivingWriter: survivors[0] writes before the holder is killed; it
// still does once a survivor has taken the link over, and survivors[1]
// does not.
func rpSurvivingWriter(t *testing.T, bmc *ipmisim.Sim, survivors []*client, before bool) {
	t.Helper()
	w, r := survivors[0], survivors[1]
	k := "survivor-" + rpRandom(t)[:6]
	if before {
		w.typeKeys(escTakeOver)
		w.typeKeys(k + "\r")
		bmc.WaitSerial(t, []byte(k), 10*time.Second)
		return
	}
	lost := "not-writing-" + rpRandom(t)[:6]
	r.typeKeys(lost + "\r")
	w.typeKeys(k + "\r")
	bmc.WaitSerial(t, []byte(k), 15*time.Second)
	time.Sleep(200 * time.Millisecond) // the other relay's keys, were they sent
	if bytes.Contains(bmc.Serial(), []byte(lost)) {
		t.Errorf("after the holder's death, a survivor that was not writing typed %q onto the serial port", lost)
	}
}
