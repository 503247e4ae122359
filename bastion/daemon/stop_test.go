package daemon_test

import (
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

// TestStopAtOnce: an obmd stopped right after it started (SIGTERM as it
// comes up) stops, whatever its serving goroutines had reached: a stop
// that came before the SSH server took its listener left it accepting
// for ever.
func TestStopAtOnce(t *testing.T) {
	for i := range 10 {
		o := obmdtest.Start(t)
		if err := o.Stop(); err != nil {
			t.Fatalf("stop %d right after the start: %v", i, err)
		}
	}
}
