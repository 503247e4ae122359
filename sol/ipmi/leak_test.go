package ipmi

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestNoGoroutineLeak: after power operations, failed ones, and a console
// that was used and closed, the goroutine count returns to where it was.
func TestNoGoroutineLeak(t *testing.T) {
	s := ipmisim.Start(t)
	b := newBMC(t, s.Info(), fastConfig)
	dead := newBMC(t, sol.Info{Addr: "127.0.0.1", Port: 9, User: "admin", Pass: "x"}, fastConfig)
	ctx := context.Background()
	before := runtime.NumGoroutine()

	for range 3 {
		if _, err := b.PowerStatus(ctx); err != nil {
			t.Fatalf("PowerStatus: %v", err)
		}
		if err := b.SetBootDevice(ctx, sol.BootPXE, false); err != nil {
			t.Fatalf("SetBootDevice: %v", err)
		}
		dead.PowerStatus(ctx)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		b.PowerOn(cancelled)

		c, err := b.OpenConsole(ctx)
		if err != nil {
			t.Fatalf("OpenConsole: %v", err)
		}
		if _, err := c.Write(soltest.Paste(4096, 1)); err != nil {
			t.Fatalf("Write: %v", err)
		}
		s.WriteSerial([]byte("out\r\n"))
		buf := make([]byte, 64)
		c.Read(buf)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		}()
		c.Close()
		c.Close()
		wg.Wait()
	}

	deadline := time.Now().Add(5 * time.Second)
	for {
		after := runtime.NumGoroutine()
		if after <= before {
			return
		}
		if time.Now().After(deadline) {
			stacks := make([]byte, 1<<20)
			stacks = stacks[:runtime.Stack(stacks, true)]
			t.Fatalf("goroutines: got %d, want at most %d\n%s", after, before, stacks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNoSecretLeak: the password appears nowhere in logs (at Debug), errors
// or standard output, also when authentication fails.
func TestNoSecretLeak(t *testing.T) {
	s := ipmisim.Start(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	l := logrus.New()
	l.SetLevel(logrus.DebugLevel)
	l.SetOutput(lockedWriter{&mu, &logs})

	// Capture standard output: go-ipmi prints there when its debug is on.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	var printed bytes.Buffer
	copied := make(chan struct{})
	go func() { printed.ReadFrom(r); close(copied) }()
	defer func() {
		os.Stdout = stdout
		w.Close()
		<-copied
		if printed.Len() > 0 {
			t.Errorf("standard output: got %q, want nothing", printed.Bytes())
		}
	}()

	var errs []error
	good, err := New("node-sim", s.Info(), fastConfig, l)
	if err != nil {
		t.Fatal(err)
	}
	wrong := s.Info()
	wrong.Pass = "wrong-" + ipmisim.Pass[:8]
	bad, err := New("node-sim", wrong, fastConfig, l)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = good.PowerStatus(ctx)
	errs = append(errs, err)
	_, err = bad.PowerStatus(ctx)
	if err == nil {
		t.Error("PowerStatus with a wrong password: got nil error, want one")
	}
	errs = append(errs, err)
	c, err := good.OpenConsole(ctx)
	if err != nil {
		t.Fatalf("OpenConsole: %v", err)
	}
	c.Write([]byte("hello\r"))
	_, err = good.OpenConsole(ctx)
	errs = append(errs, err)
	c.Close()

	for _, secret := range []string{ipmisim.Pass, wrong.Pass} {
		mu.Lock()
		if strings.Contains(logs.String(), secret) {
			t.Errorf("logs contain a password")
		}
		mu.Unlock()
		for _, e := range errs {
			if e != nil && strings.Contains(e.Error(), secret) {
				t.Errorf("error %q contains a password", e)
			}
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
