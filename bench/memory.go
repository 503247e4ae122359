package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/creack/pty"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// memory is section 2.
func memory(cfg benchConfig) *section {
	s := &section{Title: "2. Memory: RSS of the obmd process (VmRSS from /proc)"}
	viewerKB, err := idleViewers(cfg, s)
	if err != nil {
		s.skip("RSS per idle console viewer (1,000 viewers on 100 sim nodes)", err)
	}
	links := 200
	if cfg.quick {
		links = 20
	}
	if err := nativeLinks(cfg, s, links, viewerKB); err != nil {
		s.skip(fmt.Sprintf("RSS per open native BMC link (%d ipmi links)", links), err)
	}
	captured := 500
	if cfg.quick {
		captured = 50
	}
	if err := capturedIdle(cfg, s, captured); err != nil {
		s.skip(fmt.Sprintf("RSS per always-captured idle sim node (%d nodes)", captured), err)
	}
	return s
}

// idleViewers measures (RSS with 1,000 idle viewers - RSS before) / 1,000
// on a fresh obmd process; it returns the figure in KiB.
func idleViewers(cfg benchConfig, s *section) (float64, error) {
	const nodes, viewers = 100, 1000
	dir, err := os.MkdirTemp(cfg.tmp, "mem-obmd-")
	if err != nil {
		return 0, err
	}
	o, err := startObmdProc(cfg.obmdBin, dir, "", nil)
	if err != nil {
		return 0, err
	}
	defer o.Stop()
	tokens, err := o.admin().addSimNodes("mem", nodes)
	if err != nil {
		return 0, err
	}
	cfg.logf("memory: %d viewers on %d sim nodes", viewers, nodes)
	before, err := settledRSS(o.Pid(), 5*time.Second)
	if err != nil {
		return 0, err
	}
	vs, err := openViewers(viewers, 8, o.SSHAddr,
		func(i int) string { return fmt.Sprintf("mem-%03d", i%nodes) },
		func(i int) gossh.AuthMethod { return gossh.Password(tokens[i%nodes]) }, cfg.scale(2*time.Minute))
	if err != nil {
		return 0, err
	}
	defer closeViewers(vs)
	for _, v := range vs {
		v.discard()
	}
	after, err := settledRSS(o.Pid(), 10*time.Second)
	if err != nil {
		return 0, err
	}
	per := float64(after-before) / viewers
	s.add(row{Measure: fmt.Sprintf("RSS per idle console viewer (%d viewers on %d sim nodes)", viewers, nodes),
		Figure: num(per, "KiB"), Ref: "goal: 100 KB (97.7 KiB)", Ratio: ratio(per*1024, 100_000),
		Goal: "< 100 KB", Status: verdict(per*1024 < 100_000)})
	s.note("Idle viewers: x/crypto clients with pty-req + shell, reading; (RSS after - RSS before) / %d of a fresh obmd process; before %s, after %s. Includes the %d console links they opened (amortised).",
		viewers, num(float64(before)/1024, "MiB"), num(float64(after)/1024, "MiB"), nodes)
	s.note("What a viewer holds (Go runtime counters and a heap profile of an in-process obmd with 1,000 idle viewers, taken while writing this bench): about 10 goroutines (SSH transport, channel, session, console output and input, viewer pump) with 38 KiB of stacks, and 38 KiB of heap (8 KiB of it the SSH transport's read and write buffers, 4 KiB the console input buffer, the rest connection, cipher, channel and session state). A fresh process's RSS undercounts buffers whose pages were never touched: before commit 8ee158a each viewer's 32 KiB console input buffer added 29 KiB of heap that a long-running obmd would have had resident.")
	return per, nil
}

// nativeLinks measures the obmd process's RSS per open native (ipmi type)
// SOL link, against n ipmi_sim BMCs, and one `ipmitool sol activate`.
func nativeLinks(cfg benchConfig, s *section, n int, viewerKB float64) error {
	for _, p := range []string{"ipmi_sim", "socat"} {
		if _, err := exec.LookPath(p); err != nil {
			return notMeasured("%s missing (apt-get install openipmi socat)", p)
		}
	}
	cfg.logf("memory: starting %d ipmi_sim BMCs", n+1)
	sims, err := startSims(cfg, n+1)
	defer func() {
		for _, sm := range sims {
			if sm != nil {
				sm.Close()
			}
		}
	}()
	if err != nil {
		return err
	}
	spare := sims[n] // for ipmitool, so it does not fight obmd for a payload
	sims = sims[:n]

	ipmitoolKB, ipmitoolErr := ipmitoolRSS(spare)

	dir, err := os.MkdirTemp(cfg.tmp, "links-obmd-")
	if err != nil {
		return err
	}
	o, err := startObmdProc(cfg.obmdBin, dir, "", nil)
	if err != nil {
		return err
	}
	defer o.Stop()
	a := o.admin()
	tokens := make([]string, n)
	for i, sm := range sims {
		if tokens[i], err = a.addNode(fmt.Sprintf("bmc-%03d", i), "ipmi", sm.Info()); err != nil {
			return err
		}
	}
	before, err := settledRSS(o.Pid(), 5*time.Second)
	if err != nil {
		return err
	}
	cfg.logf("memory: %d viewers, one per ipmi node", n)
	vs, err := openViewers(n, 8, o.SSHAddr,
		func(i int) string { return fmt.Sprintf("bmc-%03d", i) },
		func(i int) gossh.AuthMethod { return gossh.Password(tokens[i]) }, cfg.scale(2*time.Minute))
	if err != nil {
		return err
	}
	defer closeViewers(vs)
	// A link is up when text written on the BMC's serial port reaches the viewer.
	if err := waitLinksUp(vs, sims, 60*time.Second); err != nil {
		return err
	}
	after, err := settledRSS(o.Pid(), 10*time.Second)
	if err != nil {
		return err
	}
	both := float64(after-before) / float64(n)
	link := both - viewerKB
	measure := fmt.Sprintf("RSS per open native BMC link (%d ipmi links, one viewer each)", n)
	if ipmitoolErr != nil {
		s.add(row{Measure: measure, Figure: num(both, "KiB") + " (link + its viewer)", Ref: "-", Ratio: "-",
			Goal: "< 1/20", Status: "not measured (reference): " + ipmitoolErr.Error()})
	} else {
		s.add(row{Measure: measure, Figure: num(both, "KiB") + " (link + its viewer)",
			Ref: "one `ipmitool sol activate`: " + num(ipmitoolKB, "KiB"), Ratio: ratio(both, ipmitoolKB),
			Goal: "< 1/20", Status: verdict(both < ipmitoolKB/20)})
		if viewerKB > 0 {
			s.add(row{Measure: "the link alone (minus one idle viewer, from the row above)", Figure: num(link, "KiB"),
				Ref: "ipmitool: " + num(ipmitoolKB, "KiB"), Ratio: ratio(link, ipmitoolKB), Status: statusNone})
		}
	}
	s.note("Native links: %d OpenIPMI ipmi_sim processes (a real RMCP+ BMC each, SOL on a pty; go-ipmi's in-process server was not used so that the BMC side is the one the tests trust); obmd's ipmi driver opens one SOL link per node on the first viewer. Each link is confirmed up by text written on the BMC's serial port reaching its viewer; (RSS after - RSS before) / %d, including each link's viewer; before %s, after %s.",
		n, n, num(float64(before)/1024, "MiB"), num(float64(after)/1024, "MiB"))
	s.note("ipmitool: `ipmitool -I lanplus -C 3 -E sol activate` under a pty against another ipmi_sim, VmRSS once its SOL session carried text (VmRSS counts its shared libraries, as a process's RSS does).")
	return nil
}

// startSims starts n ipmi_sims, 8 at a time.
func startSims(cfg benchConfig, n int) ([]*ipmisim.Sim, error) {
	sims := make([]*ipmisim.Sim, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		dir, err := os.MkdirTemp(cfg.tmp, "sim-")
		if err != nil {
			return sims, err
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() { // owned by startSims
			defer wg.Done()
			defer func() { <-sem }()
			sims[i], errs[i] = ipmisim.StartProcess(dir)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return sims, err
		}
	}
	return sims, nil
}

// waitLinksUp writes a marker on each BMC's serial port until its viewer
// shows it.
func waitLinksUp(vs []*viewer, sims []*ipmisim.Sim, timeout time.Duration) error {
	outs := make([]*syncBuf, len(vs))
	for i, v := range vs {
		outs[i] = &syncBuf{}
		go copyInto(outs[i], v) // ends with the session
	}
	deadline := time.Now().Add(timeout)
	pending := map[int]bool{}
	for i := range vs {
		pending[i] = true
	}
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d SOL links not up within %v", len(pending), len(vs), timeout)
		}
		for i := range pending {
			if outs[i].Contains("link-up-marker") {
				delete(pending, i)
				continue
			}
			sims[i].WriteSerial([]byte("link-up-marker\r\n"))
		}
		time.Sleep(250 * time.Millisecond)
	}
	return nil
}

// copyInto copies the viewer's output into b until the session ends.
func copyInto(b *syncBuf, v *viewer) {
	r := v.out
	v.out = nil
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

// ipmitoolRSS runs `ipmitool sol activate` against sm under a pty and
// returns its VmRSS in KiB once text from the serial port reached it.
func ipmitoolRSS(sm *ipmisim.Sim) (float64, error) {
	if _, err := exec.LookPath("ipmitool"); err != nil {
		return 0, notMeasured("ipmitool missing (apt-get install ipmitool)")
	}
	info := sm.Info()
	cmd := exec.Command("ipmitool", "-I", "lanplus", "-C", "3", "-H", info.Addr, "-p", fmt.Sprint(info.Port),
		"-U", info.User, "-E", "sol", "activate")
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+info.Pass)
	tty, err := pty.Start(cmd)
	if err != nil {
		return 0, fmt.Errorf("start ipmitool: %w", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		tty.Close()
	}()
	out := &syncBuf{}
	go func() { // ends when tty is closed
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !out.Contains("ipmitool-marker") {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("ipmitool SOL never carried text: %q", tailString(out, 200))
		}
		sm.WriteSerial([]byte("ipmitool-marker\r\n"))
		time.Sleep(250 * time.Millisecond)
	}
	rss, _, err := procRSS(cmd.Process.Pid)
	return float64(rss), err
}

func tailString(b *syncBuf, n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.b.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}
