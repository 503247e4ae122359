package obmdtest

import (
	"testing"
	"time"
)

// TestRunClientBounded: a client that outlives its limit, and whose own
// child holds its output pipes (as ssh under sshpass does), is given up
// on within the limit and the wait delay, not when the child ends.
func TestRunClientBounded(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := RunClient(200*time.Millisecond, "sh", "-c", "sleep 10 & sleep 10")
	if took := time.Since(start); err == nil || took > 200*time.Millisecond+ClientWaitDelay+3*time.Second {
		t.Errorf("got %v after %v, want an error within the limit and the wait delay", err, took.Round(time.Millisecond))
	}
}
