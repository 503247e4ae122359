package daemon_test

// The clients of the end-to-end tests, shared by every file: how a test
// waits for what a client shows.

import (
	"testing"
	"time"
)

// e2eWait bounds every wait of these tests for something that must happen
// soon: generous, since CI has two cores and runs them under -race.
const e2eWait = 20 * time.Second

// waitUntil polls cond, less and less often (5 ms to 50 ms apart), until it
// holds; it fails t after e2eWait.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for pause := 5 * time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, e2eWait)
		}
		time.Sleep(pause)
	}
}
