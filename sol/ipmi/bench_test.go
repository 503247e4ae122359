package ipmi

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// waitSerialLen waits until the sim's serial port has received n bytes.
func waitSerialLen(b *testing.B, s *ipmisim.Sim, n int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for len(s.Serial()) < n {
		if time.Now().After(deadline) {
			b.Fatalf("serial port got %d bytes, want %d", len(s.Serial()), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkPaste64K measures a 64 KiB paste through the native console
// until the last byte reaches the node's serial port.
func BenchmarkPaste64K(b *testing.B) {
	s := ipmisim.Start(b)
	bmc := newBMC(b, s.Info(), Config{})
	c, err := bmc.OpenConsole(context.Background())
	if err != nil {
		b.Fatalf("OpenConsole: %v", err)
	}
	defer c.Close()
	go io.Copy(io.Discard, c) // ends when Close fails Read
	data := soltest.Paste(soltest.PasteSize, 1)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(data); err != nil {
			b.Fatalf("Write: %v", err)
		}
		waitSerialLen(b, s, (i+1)*len(data), time.Minute)
	}
	b.StopTimer()
	if got := s.Serial(); !bytes.Equal(got[:len(data)], data) {
		b.Errorf("serial port: first paste differs from what was written")
	}
}

// BenchmarkPasteIpmitool64K is the same paste through `ipmitool sol
// activate` in a pty, for comparison.
func BenchmarkPasteIpmitool64K(b *testing.B) {
	ipmisim.Require(b, "ipmitool")
	s := ipmisim.Start(b)
	cmd := exec.Command("ipmitool", "-I", "lanplus", "-C", "3", "-H", "127.0.0.1",
		"-p", strconv.Itoa(s.Port), "-U", ipmisim.User, "-E", "sol", "activate")
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+ipmisim.Pass)
	tty, err := pty.Start(cmd)
	if err != nil {
		b.Fatalf("start ipmitool: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	output := make(chan []byte, 1)
	go func() { // drains ipmitool's output; ends when the pty closes
		var all bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			all.Write(buf[:n])
			if bytes.Contains(all.Bytes(), []byte("SOL Session operational")) {
				select {
				case output <- nil:
				default:
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		tty.Write([]byte("\r~.")) // ipmitool's escape: deactivate and exit
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		tty.Close()
	}()
	select {
	case <-output:
	case <-time.After(10 * time.Second):
		b.Fatal("ipmitool did not report an operational SOL session")
	}
	data := soltest.Paste(soltest.PasteSize, 1)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tty.Write(data); err != nil {
			b.Fatalf("write to ipmitool: %v", err)
		}
		waitSerialLen(b, s, (i+1)*len(data), 5*time.Minute)
	}
	b.StopTimer()
	if got := s.Serial(); !bytes.Equal(got[:len(data)], data) {
		b.Errorf("serial port: first paste differs from what was written")
	}
}

// BenchmarkOutput measures console output: 256 KiB printed on the serial
// port until Read has returned all of it.
func BenchmarkOutput(b *testing.B) {
	s := ipmisim.Start(b)
	bmc := newBMC(b, s.Info(), Config{})
	c, err := bmc.OpenConsole(context.Background())
	if err != nil {
		b.Fatalf("OpenConsole: %v", err)
	}
	defer c.Close()
	data := soltest.Paste(256<<10, 2)
	b.SetBytes(int64(len(data)))
	buf := make([]byte, 64<<10)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		printed := make(chan error, 1)
		go func() { printed <- s.WriteSerial(data) }() // waited below
		for got := 0; got < len(data); {
			n, err := c.Read(buf)
			if err != nil {
				b.Fatalf("Read: %v", err)
			}
			got += n
		}
		if err := <-printed; err != nil {
			b.Fatalf("WriteSerial: %v", err)
		}
	}
}

// BenchmarkPowerStatus is one power status against ipmi_sim through the
// driver, on a new session each time and on the kept one, with the
// requests it sends (requests/op, counted by a relay).
func BenchmarkPowerStatus(b *testing.B) {
	rl, info := simBehindRelay(b)
	for _, c := range []struct {
		name   string
		linger time.Duration
	}{{"new-session", -1}, {"kept-session", 10 * time.Second}} {
		b.Run(c.name, func(b *testing.B) {
			p := NewSessions()
			defer p.Close()
			bmc := newBMC(b, info, Config{SessionLinger: c.linger, Sessions: p})
			if _, err := bmc.PowerStatus(context.Background()); err != nil { // fills the pool
				b.Fatalf("PowerStatus: %v", err)
			}
			sent := rl.sent.Load()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := bmc.PowerStatus(context.Background()); err != nil {
					b.Fatalf("PowerStatus: %v", err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(rl.sent.Load()-sent)/float64(b.N), "requests/op")
		})
	}
}
