package migrations

import (
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// releasedSteps is the last migration of the previous release (v0.9.0):
// replicas of that release run on the schema of this one while the
// cluster is upgraded one replica at a time (docs/replicas.md, Rolling
// upgrades). It moves at each release (docs/contributing.md, Releases).
const releasedSteps = 8

// contractMark opens a line that declares a step a contraction: it drops
// or changes what the previous release no longer uses, and says so.
const contractMark = "-- contract:"

// narrowing matches the statements of an Up step that the previous
// release's code may trip on: dropping or renaming what it reads, changing
// a column's type, a column it does not fill that has no default, a new
// uniqueness it does not expect, or deleting rows. (A column added NOT
// NULL without a default is notNullAdded's.)
var narrowing = regexp.MustCompile(`(?is)\b(` +
	`drop\s+(table|column|index|constraint|view)` +
	`|rename\s+(to|column)` +
	`|(change|modify)\s+column` +
	`|alter\s+column` +
	`|create\s+unique\s+index|add\s+(constraint\s+\S+\s+)?unique` +
	`|truncate` +
	`|delete\s+from` +
	`)`)

// TestExpandOnly: every step after the previous release's only adds
// (tables, nullable or defaulted columns, indexes), so that release keeps
// working on the new schema during a rolling upgrade; a step that drops or
// changes something must say, on a contract line, why the previous
// release no longer needs it.
func TestExpandOnly(t *testing.T) {
	for dialect, fsys := range map[string]fs.FS{"sqlite": SQLite(), "mysql": MySQL(), "postgres": Postgres()} {
		if err := expandOnly(fsys); err != nil {
			t.Errorf("%s: %v", dialect, err)
		}
	}
}

// TestExpandOnlyCatches: the check refuses each narrowing statement in an
// unreleased step, and takes it in a released one or with a contract line.
func TestExpandOnlyCatches(t *testing.T) {
	step := func(name, up string) fs.FS {
		return fstest.MapFS{name: {Data: []byte("-- +goose Up\n" + up + "\n-- +goose Down\nDROP TABLE x;\n")}}
	}
	unreleased := fmt.Sprintf("%05d_x.sql", releasedSteps+1)
	for _, up := range []string{
		"ALTER TABLE nodes DROP COLUMN zone;",
		"DROP TABLE replicas;",
		"ALTER TABLE nodes RENAME TO hosts;",
		"ALTER TABLE nodes RENAME COLUMN zone TO pod;",
		"ALTER TABLE nodes MODIFY COLUMN zone TEXT;",
		"ALTER TABLE nodes ALTER COLUMN zone TYPE TEXT;",
		"ALTER TABLE nodes ADD COLUMN zone VARCHAR(64) NOT NULL;",
		"ALTER TABLE nodes ADD zone VARCHAR(64) NOT NULL, ADD pod INT;",
		"CREATE UNIQUE INDEX nodes_zone ON nodes (zone);",
		"ALTER TABLE nodes ADD CONSTRAINT nodes_zone UNIQUE (zone);",
		"DELETE FROM leases;",
	} {
		if err := expandOnly(step(unreleased, up)); err == nil {
			t.Errorf("%q: taken, want refused", up)
		}
		if err := expandOnly(step(unreleased, contractMark+" v0.9.0 never reads it\n"+up)); err != nil {
			t.Errorf("%q with a contract line: %v", up, err)
		}
		if err := expandOnly(step(fmt.Sprintf("%05d_x.sql", releasedSteps), up)); err != nil {
			t.Errorf("%q in a released step: %v", up, err)
		}
	}
	for _, up := range []string{
		"ALTER TABLE nodes ADD COLUMN zone VARCHAR(64) NOT NULL DEFAULT '';",
		"ALTER TABLE nodes ADD COLUMN zone VARCHAR(64);",
		"CREATE TABLE zones (name VARCHAR(64) NOT NULL, PRIMARY KEY (name));",
		"CREATE INDEX nodes_zone ON nodes (zone);",
		"CREATE TABLE zones (name VARCHAR(64) NOT NULL, UNIQUE (name));",
	} {
		if err := expandOnly(step(unreleased, up)); err != nil {
			t.Errorf("%q: %v, want taken", up, err)
		}
	}
}

// expandOnly checks the Up sections of fsys's unreleased steps.
func expandOnly(fsys fs.FS) error {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return err
	}
	for _, name := range names {
		n, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("%s: not numbered: %v", name, err)
		}
		if n <= releasedSteps {
			continue
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		text := string(b)
		if strings.Contains(text, "\n"+contractMark) || strings.HasPrefix(text, contractMark) {
			continue
		}
		up, _, _ := strings.Cut(text, "-- +goose Down")
		var sql []string
		for _, line := range strings.Split(up, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") {
				sql = append(sql, line)
			}
		}
		stmts := strings.Join(sql, "\n")
		m := narrowing.FindString(stmts)
		if m == "" {
			m = notNullAdded(stmts)
		}
		if m != "" {
			return fmt.Errorf("%s narrows the schema (%q), which the previous release runs on during a rolling upgrade: "+
				"add instead, or mark the step with a %q line saying why that release no longer needs it", name, m, contractMark)
		}
	}
	return nil
}

var (
	alterTable = regexp.MustCompile(`(?is)^\s*alter\s+table\b`)
	addClause  = regexp.MustCompile(`(?is)^\s*(alter\s+table\s+\S+\s+)?add\b`)
	notNull    = regexp.MustCompile(`(?is)\bnot\s+null\b`)
	hasDefault = regexp.MustCompile(`(?is)\bdefault\b`)
)

// notNullAdded returns the first clause of an ALTER TABLE in stmts that
// adds a NOT NULL column without a default: the previous release's inserts
// do not fill it, and fail.
func notNullAdded(stmts string) string {
	for _, stmt := range strings.Split(stmts, ";") {
		if !alterTable.MatchString(stmt) {
			continue
		}
		for _, clause := range strings.Split(stmt, ",") {
			if addClause.MatchString(clause) && notNull.MatchString(clause) && !hasDefault.MatchString(clause) {
				return strings.TrimSpace(clause)
			}
		}
	}
	return ""
}
