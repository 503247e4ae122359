package migrations

import (
	"io/fs"
	"slices"
	"testing"
)

// TestSameSteps: every dialect has the same numbered migrations, under the
// same names: a change of schema is a step in every folder.
func TestSameSteps(t *testing.T) {
	names := func(fsys fs.FS) []string {
		t.Helper()
		got, err := fs.Glob(fsys, "*.sql")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := names(SQLite())
	if len(want) == 0 {
		t.Fatal("no SQLite migrations")
	}
	for dialect, fsys := range map[string]fs.FS{"mysql": MySQL(), "postgres": Postgres()} {
		if got := names(fsys); !slices.Equal(got, want) {
			t.Errorf("%s migrations: got %v, want the SQLite steps %v", dialect, got, want)
		}
	}
}
