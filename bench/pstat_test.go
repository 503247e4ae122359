package main

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// BenchmarkPowerStatusInproc is one connection at a time (x/crypto client:
// connect, token auth, command, close) to an obmd in this process on
// SQLite, with a native ipmi node on ipmi_sim: `power-status` and `help`
// (the same without the BMC call), so that the difference and a CPU
// profile show obmd's own part of section 8's figures without the OpenSSH
// client process:
//
//	go test -run '^$' -bench PowerStatusInproc -benchtime 200x -cpuprofile cpu.out ./bench/
func BenchmarkPowerStatusInproc(b *testing.B) {
	ipmisim.Require(b, "ipmi_sim", "socat")
	sim := ipmisim.Start(b)
	dir := b.TempDir()
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	d, err := daemon.New(daemon.Config{SSHAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
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
	token, err := a.addNode("ps", "ipmi", sim.Info())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ cmd, want string }{{"power-status", "power on"}, {"help", "power-status"}} {
		b.Run(c.cmd, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := execOnce(d.SSHAddr(), "ps", gossh.Password(token), c.cmd, c.want); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
