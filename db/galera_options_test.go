package db

import (
	"testing"
	"time"
)

// TestSuspectOf: evs.suspect_timeout is read from wsrep_provider_options
// as Galera writes it (ISO 8601), Galera's default when it is absent, and
// a value that is no duration is an error, not a guess.
func TestSuspectOf(t *testing.T) {
	for _, c := range []struct {
		opts string
		want time.Duration
	}{
		{"base_dir = /var/lib/mysql/; evs.suspect_timeout = PT5S; evs.inactive_timeout = PT15S", 5 * time.Second},
		{"evs.suspect_timeout=PT1.5S", 1500 * time.Millisecond},
		{"gcache.size = 32M; evs.suspect_timeout = PT1M30S", 90 * time.Second},
		{"evs.suspect_timeout = pt2s", 2 * time.Second},
		{"gcache.size = 32M; evs.inactive_timeout = PT15S", defaultSuspect},
		{"", defaultSuspect},
	} {
		if got, err := suspectOf(c.opts); err != nil || got != c.want {
			t.Errorf("suspectOf(%q): got %v, %v, want %v", c.opts, got, err, c.want)
		}
	}
	for _, bad := range []string{"evs.suspect_timeout = 5", "evs.suspect_timeout = PT", "evs.suspect_timeout = PTxS", "evs.suspect_timeout = PT5", "evs.suspect_timeout = PT-1S"} {
		if got, err := suspectOf(bad); err == nil {
			t.Errorf("suspectOf(%q): got %v, want an error", bad, got)
		}
	}
}
