package db

import (
	"strings"
	"testing"
	"time"
)

// TestAuditConfig: zero values take the defaults; a setting out of its
// bounds is an error naming it.
func TestAuditConfig(t *testing.T) {
	c, err := AuditConfig{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := AuditConfig{Retention: 90 * 24 * time.Hour, ChangesRetention: 90 * 24 * time.Hour, PurgeInterval: 10 * time.Minute,
		AggregateWindow: time.Second, AggregateKeys: 1024, Export: AuditExport{MaxBytes: 100 << 20, Keep: 5}}
	if c != want {
		t.Errorf("defaults: got %+v, want %+v", c, want)
	}
	for _, tt := range []struct {
		name string
		c    AuditConfig
		key  string
	}{
		{"retention below an hour", AuditConfig{Retention: time.Minute}, "audit.retention"},
		{"changes kept below an hour", AuditConfig{ChangesRetention: 59 * time.Minute}, "audit.changes_retention"},
		{"negative purge interval", AuditConfig{PurgeInterval: -time.Second}, "audit.purge_interval"},
		{"window over a minute", AuditConfig{AggregateWindow: 2 * time.Minute}, "audit.aggregate_window"},
		{"too many keys", AuditConfig{AggregateKeys: 1 << 20}, "audit.aggregate_keys"},
		{"negative keys", AuditConfig{AggregateKeys: -1}, "audit.aggregate_keys"},
		{"tiny export file", AuditConfig{Export: AuditExport{MaxBytes: 100}}, "audit.export.max_bytes"},
		{"negative keep", AuditConfig{Export: AuditExport{Keep: -1}}, "audit.export.keep"},
	} {
		if _, err := tt.c.WithDefaults(); err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("%s: got %v, want an error naming %s", tt.name, err, tt.key)
		}
	}
}
