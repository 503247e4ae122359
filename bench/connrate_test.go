package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db/dbtest"
)

// BenchmarkConnRateInproc is section 1's loop (8 clients: connect, token
// auth, power-status on a sim node, close) against an obmd in this process
// at the default configuration (default auth_limits and
// ssh.max_conns_per_source) on SQLite, so that its CPU profile shows where a
// connection's server time goes:
//
//	go test -run '^$' -bench ConnRateInproc -benchtime 8s -cpuprofile cpu.out ./bench/
//	go tool pprof -top -cum bench.test cpu.out
//
// The profile holds the clients' CPU too (they are in this process).
// BenchmarkConnRateInprocMySQL is the same on MariaDB/MySQL (a scratch
// database on the server of OBMD_TEST_MYSQL_DSN; mariadbd's own CPU is
// not in the profile), BenchmarkConnRateInprocPostgres on PostgreSQL
// (OBMD_TEST_POSTGRES_DSN).
func BenchmarkConnRateInproc(b *testing.B) {
	connRateInproc(b, "")
}

func BenchmarkConnRateInprocMySQL(b *testing.B) {
	connRateInproc(b, dbtest.MySQLDSN(b))
}

func BenchmarkConnRateInprocPostgres(b *testing.B) {
	connRateInproc(b, dbtest.PostgresDSN(b))
}

// connRateInproc runs the loop against an obmd on dsn ("": SQLite in its
// state directory).
func connRateInproc(b *testing.B, dsn string) {
	a := testDaemon(b, dsn)
	const workers = 8
	tokens, err := a.addSimNodes("rate", workers)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	next := make(chan struct{})
	go func() { // owned: closes next once b.N connections are handed out
		defer close(next)
		for range b.N {
			next <- struct{}{}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() { // owned by the benchmark, waited for by wg
			defer wg.Done()
			user := fmt.Sprintf("rate-%03d", w)
			for range next {
				if err := execOnce(a.sshAddr, user, gossh.Password(tokens[w]), "power-status", "power on"); err != nil {
					b.Error(err) // and go on draining next
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
}

// testDaemon starts an obmd in this process at the default configuration
// on dsn ("": SQLite in its state directory; logging warnings only),
// stopped when b ends, and returns its admin client (whose addr is the
// admin API; sshAddr the SSH one).
func testDaemon(b *testing.B, dsn string) testObmd {
	b.Helper()
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	cfg := daemon.Config{Version: "bench"}
	cfg.SSH.Addr, cfg.Admin.Addr, cfg.DB.DSN = "127.0.0.1:0", "127.0.0.1:0", dsn
	cfg.Daemon.StateDir, cfg.Admin.Token = filepath.Join(b.TempDir(), "state"), "bench-admin-token-0123456789abcdef"
	d, err := daemon.New(cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Start(ctx); err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }() // waited for by the cleanup
	b.Cleanup(func() {
		cancel()
		<-done
	})
	return testObmd{admin{d.AdminAddr(), d.AdminToken(), &http.Client{Timeout: 30 * time.Second}}, d.SSHAddr()}
}

// testObmd is an in-process obmd's admin client and SSH address.
type testObmd struct {
	admin
	sshAddr string
}
