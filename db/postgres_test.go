package db

import "testing"

// TestRebind: "?" placeholders become $1, $2, ... in order, except inside
// string literals, quoted identifiers and comments.
func TestRebind(t *testing.T) {
	tests := []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = $1 AND c = $2`},
		{`INSERT INTO t VALUES (?, '?', ?)`, `INSERT INTO t VALUES ($1, '?', $2)`},
		{`SELECT 'it''s ?', ?`, `SELECT 'it''s ?', $1`},
		{`SELECT "a?b" FROM t WHERE x = ?`, `SELECT "a?b" FROM t WHERE x = $1`},
		{"SELECT ? -- why?\n, ?", "SELECT $1 -- why?\n, $2"},
		{`SELECT /* ? */ ?`, `SELECT /* ? */ $1`},
		{`SELECT '?`, `SELECT '?`}, // unterminated: left alone
	}
	for _, tt := range tests {
		if got := rebind(tt.in); got != tt.want {
			t.Errorf("rebind(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}
