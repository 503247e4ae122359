package db

import (
	"errors"
	"fmt"
	"time"
)

// AuditConfig is the audit section of obmd's configuration: how long audit
// rows and access changes are kept (RunPurge), how repeats are aggregated
// (WithAuditAggregation), and where every row is also sent (Export). Zero
// values take the defaults noted; WithDefaults sets them.
type AuditConfig struct {
	// Retention is how long an audit row is kept (default 2160h, 90 days;
	// at least 1h).
	Retention time.Duration `yaml:"retention"`
	// ChangesRetention is how long an access change is kept at least
	// (default 2160h; at least 1h); PurgeChanges says which may go then.
	ChangesRetention time.Duration `yaml:"changes_retention"`
	// PurgeInterval is how often rows past their retention are deleted
	// (default 10m), in batches of PurgeBatch rows.
	PurgeInterval time.Duration `yaml:"purge_interval"`
	// AggregateWindow is the interval over which repeats of an event are
	// counted into one row (default 1s, at most 1m); AggregateKeys how
	// many keys are counted at once (default 1024, at most 65536). See
	// WithAuditAggregation.
	AggregateWindow time.Duration `yaml:"aggregate_window"`
	AggregateKeys   int           `yaml:"aggregate_keys"`
	// Export sends every audit row also to a SIEM.
	Export AuditExport `yaml:"export"`
}

// AuditExport is where every audit row is also written, as one JSON object
// a line (db/auditlog): a file rotated by size, a local syslog socket, or
// both; neither is the default.
type AuditExport struct {
	// File is the path of the JSON lines file (none: no file).
	File string `yaml:"file"`
	// MaxBytes is the size past which the file is rotated (default
	// 100 MiB, at least 4 KiB); Keep how many rotated files are kept
	// beside it, File.1 the newest (default 5).
	MaxBytes int `yaml:"max_bytes"`
	Keep     int `yaml:"keep"`
	// Syslog is the path of a local syslog datagram socket, e.g. /dev/log
	// (none: no syslog). Each row is one message, facility auth, tag obmd.
	Syslog string `yaml:"syslog"`
}

// Defaults and bounds of AuditConfig.
const (
	DefaultAuditRetention = 90 * 24 * time.Hour
	minAuditRetention     = time.Hour
	defaultPurgeInterval  = 10 * time.Minute
	defaultAggWindow      = time.Second
	maxAggWindow          = time.Minute
	defaultAggKeys        = 1024
	maxAggKeys            = 1 << 16
	defaultExportBytes    = 100 << 20
	minExportBytes        = 4 << 10
	defaultExportKeep     = 5
)

// WithDefaults returns c with every unset field at its default, or an
// error naming the first setting out of its bounds.
func (c AuditConfig) WithDefaults() (AuditConfig, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Retention, DefaultAuditRetention)
	def(&c.ChangesRetention, DefaultAuditRetention)
	def(&c.PurgeInterval, defaultPurgeInterval)
	def(&c.AggregateWindow, defaultAggWindow)
	if c.AggregateKeys == 0 {
		c.AggregateKeys = defaultAggKeys
	}
	e := &c.Export
	if e.MaxBytes == 0 {
		e.MaxBytes = defaultExportBytes
	}
	if e.Keep == 0 {
		e.Keep = defaultExportKeep
	}
	switch {
	case c.Retention < minAuditRetention:
		return c, fmt.Errorf("audit.retention must be at least %v", minAuditRetention)
	case c.ChangesRetention < minAuditRetention:
		// Below it a replica that missed a few polls could find the
		// changes it has not applied gone (PurgeChanges keeps them for
		// live replicas; this is the margin for the others).
		return c, fmt.Errorf("audit.changes_retention must be at least %v", minAuditRetention)
	case c.PurgeInterval < 0:
		return c, errors.New("audit.purge_interval must not be negative")
	case c.AggregateWindow < 0 || c.AggregateWindow > maxAggWindow:
		return c, fmt.Errorf("audit.aggregate_window must be from 0 (1s) to %v", maxAggWindow)
	case c.AggregateKeys < 0 || c.AggregateKeys > maxAggKeys:
		return c, fmt.Errorf("audit.aggregate_keys must be from 0 (%d) to %d", defaultAggKeys, maxAggKeys)
	case e.MaxBytes < minExportBytes:
		return c, fmt.Errorf("audit.export.max_bytes must be at least %d", minExportBytes)
	case e.Keep < 0:
		return c, errors.New("audit.export.keep must not be negative")
	}
	return c, nil
}
