package main

import (
	"testing"

	gossh "golang.org/x/crypto/ssh"

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
	a := testDaemon(b, "")
	token, err := a.addNode("ps", "ipmi", sim.Info())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ cmd, want string }{{"power-status", "power on"}, {"help", "power-status"}} {
		b.Run(c.cmd, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := execOnce(a.sshAddr, "ps", gossh.Password(token), c.cmd, c.want); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
