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
// max_conns_per_source) on SQLite, so that its CPU profile shows where a
// connection's server time goes:
//
//	go test -run '^$' -bench ConnRateInproc -benchtime 8s -cpuprofile cpu.out ./bench/
//	go tool pprof -top -cum bench.test cpu.out
//
// The profile holds the clients' CPU too (they are in this process).
// BenchmarkConnRateInprocMySQL is the same on MariaDB/MySQL (a scratch
// database on the server of OBMD_TEST_MYSQL_DSN; mariadbd's own CPU is
// not in the profile).
func BenchmarkConnRateInproc(b *testing.B) {
	connRateInproc(b, "")
}

func BenchmarkConnRateInprocMySQL(b *testing.B) {
	connRateInproc(b, dbtest.MySQLDSN(b))
}

// connRateInproc runs the loop against an obmd on dsn ("": SQLite in its
// state directory).
func connRateInproc(b *testing.B, dsn string) {
	dir := b.TempDir()
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	d, err := daemon.New(daemon.Config{SSHAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DB: dsn,
		StateDir: filepath.Join(dir, "state"), AdminToken: "bench-admin-token-0123456789abcdef", Version: "bench"}, log)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }() // waited for below
	defer func() {
		cancel()
		<-done
	}()
	a := admin{d.AdminAddr(), d.AdminToken(), &http.Client{Timeout: 30 * time.Second}}
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
				if err := execOnce(d.SSHAddr(), user, gossh.Password(tokens[w]), "power-status", "power on"); err != nil {
					b.Error(err) // and go on draining next
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
}
