package dbtest

import "testing"

// TestRedirect: a proxy takes the DSN of each engine it proxies, with
// either PostgreSQL scheme (PostgresDSN keeps OBMD_TEST_POSTGRES_DSN's).
func TestRedirect(t *testing.T) {
	for _, tt := range []struct{ dsn, target, want string }{
		{"mysql://u:p@tcp(127.0.0.1:3306)/db", "127.0.0.1:3306", "mysql://u:p@tcp(127.0.0.1:9)/db"},
		{"postgres://u:p@127.0.0.1:5432/db?sslmode=disable", "127.0.0.1:5432", "postgres://u:p@127.0.0.1:9/db?sslmode=disable"},
		{"postgresql://u:p@127.0.0.1:5432/db", "127.0.0.1:5432", "postgresql://u:p@127.0.0.1:9/db"},
	} {
		target, got := redirect(t, tt.dsn, "127.0.0.1:9")
		if target != tt.target || got != tt.want {
			t.Errorf("redirect(%q): got %q, %q, want %q, %q", tt.dsn, target, got, tt.target, tt.want)
		}
	}
}
