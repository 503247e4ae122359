package sshconsole

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestSkipEchoBounded: a BMC that floods output right after the typed
// console command is not buffered whole while its echo is looked for: at
// most maxBanner (and one read) is held; the rest stays in the session's
// output for Read.
func TestSkipEchoBounded(t *testing.T) {
	p, _ := Lookup(VendorXCC)
	con := &Console{t: Target{Node: "n1", Host: "127.0.0.1", Port: 22, Command: p.Command, Preset: p}}
	s := &session{out: make(chan []byte, 4)}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case s.out <- bytes.Repeat([]byte{'x'}, 4096):
			case <-stop:
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pre, err := con.skipEcho(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(pre) > maxBanner+4096 {
		t.Errorf("skipEcho held %d bytes of a flood, want at most %d", len(pre), maxBanner+4096)
	}
}
