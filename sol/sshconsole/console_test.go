package sshconsole_test

import (
	"testing"

	"github.com/obmd/obmd/sol/soltest/sshbmc"
)

var vendors = []string{"idrac", "ilo", "xcc", "openbmc", "generic"}

// TestConsoleVendors: per vendor, the host's output reaches the console
// with none of the CLI's own words, keys reach the host, and Close leaves
// the console through the vendor's escape, so that its slot is free.
func TestConsoleVendors(t *testing.T) {
	for _, v := range vendors {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			b, con, r := attached(t, sshbmc.Options{Vendor: v})
			if err := b.WriteSerial([]byte("BIOS line\r\n")); err != nil {
				t.Fatal(err)
			}
			r.WaitOutput(t, []byte("BIOS line\r\n"), wait)
			if got := string(r.Output()); got != "BIOS line\r\n" {
				t.Errorf("output: got %q, want the host's line alone", got)
			}
			if _, err := con.Write([]byte("root\r")); err != nil {
				t.Fatal(err)
			}
			b.WaitSerial(t, []byte("root\r"), wait)
			r.Close(t)
			s := b.Stats()
			if s.Held {
				t.Errorf("after Close: the console slot is still held (%+v)", s)
			}
			if v != "generic" && v != "openbmc" && s.Escapes != 1 {
				t.Errorf("after Close: %d escapes, want the console left through the vendor's escape", s.Escapes)
			}
		})
	}
}
