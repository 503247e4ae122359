package db

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/obmd/obmd/keys"
)

// testNoPlaintextToken sets a known token, then reads every row of every
// table as text and checks the token appears nowhere: only its hash is kept.
func testNoPlaintextToken(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	const token = "plaintext-token-Zq9xW4vL7r"
	mustCreate(t, s, "n1")
	if _, err := s.SetToken(ctx, "n1", keys.HashToken(token)); err != nil {
		t.Fatalf("set token: %v", err)
	}
	if err := s.Audit(ctx, AuditEvent{Node: "n1", Actor: "admin", Action: "token.rotate", Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	hash := keys.HashToken(token).String()

	tables := tableNames(t, s)
	if len(tables) < 6 {
		t.Fatalf("tables: got %v, want at least the 6 of the schema", tables)
	}
	sawHash := false
	for _, table := range tables {
		rows, err := s.r.QueryContext(ctx, "SELECT * FROM "+table)
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]sql.RawBytes, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatalf("dump %s: %v", table, err)
			}
			for i, v := range vals {
				if strings.Contains(string(v), token) {
					t.Errorf("plaintext token in %s.%s", table, cols[i])
				}
				sawHash = sawHash || string(v) == hash
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		rows.Close()
	}
	if !sawHash {
		t.Errorf("the token's hash was not found in any table; is the dump reading the data?")
	}
}

func tableNames(t *testing.T, s *Store) []string {
	t.Helper()
	q := `SELECT name FROM sqlite_master WHERE type = 'table'`
	switch s.Dialect() {
	case DialectMySQL:
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()`
	case DialectPostgres:
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`
	}
	rows, err := s.r.QueryContext(context.Background(), q)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatalf("list tables: %v", err)
		}
		out = append(out, n)
	}
	return out
}
