package ipmi

import (
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/bmcs"
)

// tableDriver is the native driver as the shared tables of sol/soltest/bmcs
// build it.
func tableDriver(t *testing.T, info sol.Info, opts sol.IPMIOptions, log logrus.FieldLogger) sol.BMC {
	t.Helper()
	cfg := fastConfig
	cfg.Options = opts
	b, err := New(bmcs.Label, info, cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

func TestCiphers(t *testing.T) { bmcs.RunCiphers(t, tableDriver) }

// TestNewValidatesOptions: a bad cipher order or sol_enable is refused.
func TestNewValidatesOptions(t *testing.T) {
	info := sol.Info{Addr: "10.0.0.5", User: "admin", Pass: "secret"}
	for _, opts := range []sol.IPMIOptions{
		{CipherOrder: []int{17, 4}}, // RC4: go-ipmi has none
		{CipherOrder: []int{3, 3}},
		{SOLEnable: "always"},
	} {
		if _, err := New("n", info, Config{Options: opts}, testLogger(t)); err == nil {
			t.Errorf("options %+v: got nil error, want one", opts)
		}
	}
}

func TestSOLEnable(t *testing.T) { bmcs.RunSOLEnable(t, tableDriver) }

func TestDiagnose(t *testing.T) { bmcs.RunDiagnose(t, tableDriver) }
