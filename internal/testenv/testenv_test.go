package testenv

import (
	"fmt"
	"testing"
)

// recorder records a Fatal or a Skip instead of ending the test.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...) }
func (r *recorder) Skip(args ...any)  { r.skip = fmt.Sprint(args...) }

// TestMissing: a missing dependency skips the test, or fails it (and never
// skips it) under OBMD_REQUIRE_INTEGRATION=1.
func TestMissing(t *testing.T) {
	for _, require := range []string{"1", "", "0"} {
		t.Setenv(RequireEnv, require)
		r := &recorder{TB: t}
		Missing(r, "no %s", "ipmi_sim")
		if got := r.fatal != ""; got != (require == "1") || got == (r.skip != "") {
			t.Errorf("%s=%q: got fatal %q, skip %q; want a failure exactly when required", RequireEnv, require, r.fatal, r.skip)
		}
	}
}
