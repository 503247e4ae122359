package db

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestRetryConflictsUntilDeadline: a write that keeps losing conflicts is
// run again for as long as its caller's deadline allows, past
// conflictAttempts (writers through other Galera nodes can win many times
// in a row); without a deadline it gives up after conflictAttempts; any
// other error ends it at once.
func TestRetryConflictsUntilDeadline(t *testing.T) {
	log, _ := logtest.NewNullLogger()
	s := &Store{log: log}
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	losing := func(wins int, tries *int) func() error {
		return func() error {
			if *tries++; *tries < wins {
				return deadlock
			}
			return nil
		}
	}
	var tries int
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.retryConflicts(ctx, losing(conflictAttempts+10, &tries)); err != nil || tries != conflictAttempts+10 {
		t.Errorf("with a deadline: got %v after %d tries, want success after %d", err, tries, conflictAttempts+10)
	}
	tries = 0
	if err := s.retryConflicts(context.Background(), losing(conflictAttempts+10, &tries)); !errors.Is(err, deadlock) || tries != conflictAttempts {
		t.Errorf("without a deadline: got %v after %d tries, want the conflict after %d", err, tries, conflictAttempts)
	}
	tries = 0
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if err := s.retryConflicts(short, losing(1<<30, &tries)); !errors.Is(err, deadlock) {
		t.Errorf("past the deadline: got %v, want the conflict", err)
	}
	tries = 0
	other := errors.New("disk full")
	if err := s.retryConflicts(ctx, func() error { tries++; return other }); !errors.Is(err, other) || tries != 1 {
		t.Errorf("another error: got %v after %d tries, want it at once", err, tries)
	}
}

// TestConflictBoundPositive: the wait's bound stays within
// (0, conflictBackoffMax] however many attempts a deadline allows (a bound
// of 0 or below would make rand.N panic in retryConflicts).
func TestConflictBoundPositive(t *testing.T) {
	for attempt := 1; attempt <= 1000; attempt++ {
		if b := conflictBound(attempt); b <= 0 || b > conflictBackoffMax {
			t.Fatalf("attempt %d: bound %v, want within (0, %v]", attempt, b, conflictBackoffMax)
		}
	}
	if b := conflictBound(1); b != conflictBackoff {
		t.Errorf("attempt 1: bound %v, want %v", b, conflictBackoff)
	}
}
