package redfish_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/redfish"
	"github.com/obmd/obmd/sol/redfish/redfishtest"
)

// TestConsoleServices: what the system says of its serial consoles
// (SerialConsole.IPMI and .SSH) is read as it is, SSH's port and entry
// command included; a system that says nothing reports nothing known.
func TestConsoleServices(t *testing.T) {
	b := startBMC(t, nil)
	d := b.driver(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := d.ConsoleServices(ctx)
	if err != nil || got.IPMI.Known || got.SSH.Known {
		t.Fatalf("mock as shipped: got %+v, %v, want nothing known", got, err)
	}
	b.SetSerialConsole(t, redfishtest.SerialConsole{SSH: true, SSHPort: 2200, SSHCommand: "console com2"})
	got, err = d.ConsoleServices(ctx)
	want := sol.ConsoleServices{IPMI: sol.ConsoleService{Known: true},
		SSH: sol.ConsoleService{Known: true, Enabled: true, Port: 2200, Command: "console com2"}}
	if err != nil || got != want {
		t.Errorf("IPMI off, SSH on: got %+v, %v, want %+v", got, err, want)
	}
	b.SetSerialConsole(t, redfishtest.SerialConsole{IPMI: true, SSHCommand: "bad\x1bcommand"})
	got, _ = d.ConsoleServices(ctx)
	if !got.IPMI.Enabled || got.SSH.Enabled || got.SSH.Command != "" {
		t.Errorf("IPMI on, SSH off, a control character in the command: got %+v", got)
	}
	if live, _, _ := b.Counts(); live != 0 {
		t.Errorf("%d Redfish sessions left open", live)
	}
}

// TestConsoleInfo: console "sol" is SOL with its defaults ("sol" details
// folded in); "auto" builds the IPMI console too, and takes IPMI's limits
// on user and password; "ssh" refuses "sol" details.
func TestConsoleInfo(t *testing.T) {
	base := redfish.Info{Addr: "https://bmc", User: "u", Pass: "p"}
	solOnly := base
	solOnly.Console = sol.ConsoleSOL
	withSOL := base
	withSOL.SOL = &redfish.SOLInfo{}
	if !solOnly.Equal(withSOL) {
		t.Errorf("console sol and sol {} differ: %+v %+v", solOnly.Canonical(), withSOL.Canonical())
	}
	for _, tc := range []struct {
		name string
		edit func(*redfish.Info)
		want string
	}{
		{"auto, long password", func(i *redfish.Info) { i.Console, i.Pass = sol.ConsoleAuto, "password-longer-than-twenty" }, "info.pass"},
		{"ssh, long password", func(i *redfish.Info) { i.Console, i.Pass = sol.ConsoleSSH, "password-longer-than-twenty" }, ""},
		{"ssh with sol details", func(i *redfish.Info) { i.Console, i.SOL = sol.ConsoleSSH, &redfish.SOLInfo{} }, "info.sol"},
	} {
		info := base
		tc.edit(&info)
		err := redfish.Check(info)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	auto := base
	auto.Console = sol.ConsoleAuto
	d, err := redfish.New("n", auto, redfish.Config{}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	if !d.HasConsole() || d.Host() != "bmc" {
		t.Errorf("auto: console %v, host %q: want the IPMI console built, host bmc", d.HasConsole(), d.Host())
	}
}
