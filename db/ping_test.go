package db

import (
	"context"
	"testing"

	"github.com/obmd/obmd/db/dbtest"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestPingNeedsSchema checks that Ping (the readiness probe) fails until
// obmd's schema is there, and after the tables are gone, on both engines: a
// protocol ping alone kept answering on MySQL after the database was dropped.
func TestPingNeedsSchema(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s, err := Open(ctx, e.DSN(t), log)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Ping(ctx); err == nil {
				t.Errorf("Ping before Migrate: got nil, want an error")
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Ping(ctx); err != nil {
				t.Errorf("Ping after Migrate: got %v, want nil", err)
			}
			if _, err := s.w.ExecContext(ctx, "ALTER TABLE nodes RENAME TO nodes_gone"); err != nil {
				t.Fatal(err)
			}
			if err := s.Ping(ctx); err == nil {
				t.Errorf("Ping without the nodes table: got nil, want an error")
			}
		})
	}
}
