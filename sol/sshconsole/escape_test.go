package sshconsole_test

import (
	"bytes"
	"testing"

	"github.com/obmd/obmd/sol/soltest/sshbmc"
	"github.com/obmd/obmd/sol/sshconsole"
)

// keysWithEscapes are viewer keys holding every vendor's escape.
var keysWithEscapes = []byte("a\x1cb\x1b(c\r~.d\r~~e\x1b[A\r")

// TestViewerKeysNeverEscape: per vendor, keys holding every vendor's
// escape reach the host (less the bytes the vendor cannot pass: iDRAC's
// Ctrl-\, a '(' right after ESC on iLO and XCC) and never leave the
// console: it stays attached and works.
func TestViewerKeysNeverEscape(t *testing.T) {
	want := map[string]string{
		"idrac":   "ab\x1b(c\r~.d\r~~e\x1b[A\r",
		"ilo":     "a\x1cb\x1bc\r~.d\r~~e\x1b[A\r",
		"xcc":     "a\x1cb\x1bc\r~.d\r~~e\x1b[A\r",
		"openbmc": string(keysWithEscapes),
		"generic": string(keysWithEscapes),
	}
	for _, v := range vendors {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			b, con, r := attached(t, sshbmc.Options{Vendor: v})
			// One byte a write too: the escape state spans writes.
			for _, k := range [][]byte{keysWithEscapes, keysWithEscapes} {
				if _, err := con.Write(k); err != nil {
					t.Fatal(err)
				}
			}
			for i := range keysWithEscapes {
				if _, err := con.Write(keysWithEscapes[i : i+1]); err != nil {
					t.Fatal(err)
				}
			}
			all := want[v] + want[v] + want[v]
			b.WaitSerial(t, []byte(all), wait)
			if got := b.Serial(); !bytes.Equal(got, []byte(all)) {
				t.Errorf("host got %q, want %q", got, all)
			}
			if s := b.Stats(); s.Escapes != 0 || !s.Held && v != "openbmc" {
				t.Errorf("stats %+v: want the console still attached, never left", s)
			}
			if err := b.WriteSerial([]byte("still here\r\n")); err != nil {
				t.Fatal(err)
			}
			r.WaitOutput(t, []byte("still here\r\n"), wait)
		})
	}
}

// FuzzEncoder: whatever a viewer types, in whatever pieces, the vendor's
// CLI never sees its escape, and the host gets the keys (OpenBMC,
// generic: exactly).
func FuzzEncoder(f *testing.F) {
	f.Add(keysWithEscapes, uint8(3))
	f.Add([]byte("\r~\r~.\x1b\x1b((\x1c"), uint8(1))
	f.Fuzz(func(t *testing.T, keys []byte, cut uint8) {
		for _, v := range vendors {
			enc := sshconsole.EncoderOf(v)
			var sent []byte
			for i := 0; i < len(keys); {
				n := min(len(keys)-i, int(cut%7)+1)
				sent = enc(sent, keys[i:i+n])
				i += n
			}
			host, left := sshbmc.Leaves(v, sent)
			if left {
				t.Fatalf("%s: keys %q, sent %q: the CLI left the console", v, keys, sent)
			}
			if (v == "openbmc" || v == "generic") && !bytes.Equal(host, keys) {
				t.Fatalf("%s: keys %q reached the host as %q", v, keys, host)
			}
		}
	})
}
