package commands

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBoundedDeadlineRace: a BMC call that gives up on its own at the
// deadline (a socket read deadline set from ctx) may return a moment before
// ctx's timer marks ctx done; it is still the timeout that ended it.
func TestBoundedDeadlineRace(t *testing.T) {
	errRead := errors.New("read udp: i/o timeout")
	for i := 0; i < 200; i++ {
		_, err := bounded(context.Background(), time.Millisecond, func(ctx context.Context) (int, error) {
			dl, _ := ctx.Deadline()
			for time.Now().Before(dl) { // as a read deadline would, without looking at ctx
			}
			return 0, errRead
		})
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, errRead) {
			t.Fatalf("try %d: got %v, want ErrTimeout wrapping the driver's error", i, err)
		}
	}
}

// TestBoundedParentDeadline: when the caller's own deadline ends the call
// first, it is not reported as this bound's timeout.
func TestBoundedParentDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err := bounded(ctx, time.Hour, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the caller's DeadlineExceeded, not ErrTimeout", err)
	}
}
