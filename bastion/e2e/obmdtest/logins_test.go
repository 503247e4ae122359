package obmdtest

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the failure and ends
// the goroutine, as testing's does.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestAgainWhileUnavailableFails: a try that obmd keeps refusing because
// its database is unavailable fails the test at the bound (such a refusal
// judges nothing: the limiter probes took the last 503 for their answer,
// so two probes that were never judged compared equal and passed); one
// refused a moment is made again and then judged.
func TestAgainWhileUnavailableFails(t *testing.T) {
	t.Parallel()
	run := func(unavailable int) (tries int, fatal string) {
		r := &fatalRecorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			againWhileUnavailable(r, "probe", 300*time.Millisecond, func() (bool, any) {
				tries++
				return unavailable < 0 || tries <= unavailable, 503
			})
		}()
		<-done
		return tries, r.fatal
	}
	if tries, fatal := run(-1); fatal == "" {
		t.Errorf("always unavailable: returned after %d tries, want a failure at the bound", tries)
	}
	if tries, fatal := run(2); fatal != "" || tries != 3 {
		t.Errorf("unavailable twice: got %d tries, failure %q; want 3 tries and no failure", tries, fatal)
	}
}
