package nodes

import (
	"testing"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
)

// TestSealInfo: info sealed to a label opens as it was, and only as that
// label's and under the same key.
func TestSealInfo(t *testing.T) {
	key := make([]byte, 32)
	sealer, err := keys.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	key[0] = 1
	other, err := keys.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	cipher := 17
	info := sol.Info{Addr: "10.0.0.5", User: "root", Pass: "bmc-secret", Port: 6230, Cipher: &cipher, Interface: "lan"}
	sealed, err := SealInfo(sealer, "n1", info)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenInfo(sealer, db.Node{Label: "n1", InfoSealed: sealed})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if got.Cipher == nil || *got.Cipher != cipher {
		t.Fatalf("cipher: got %v, want %d", got.Cipher, cipher)
	}
	got.Cipher, info.Cipher = nil, nil
	if got != info {
		t.Errorf("got %+v, want %+v", got, info)
	}
	if _, err := OpenInfo(sealer, db.Node{Label: "n2", InfoSealed: sealed}); err == nil {
		t.Errorf("open as another label: got nil error, want one")
	}
	if _, err := OpenInfo(other, db.Node{Label: "n1", InfoSealed: sealed}); err == nil {
		t.Errorf("open under another key: got nil error, want one")
	}
}
