package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/obmd/obmd/sol/soltest/fleetbmc"
)

// The reference of section 12: one `ipmitool sol activate` per BMC of a
// fleet, each writing what its node prints into a file.

// ipmitools are the reference: one `ipmitool sol activate` per BMC.
type ipmitools struct {
	mu     sync.Mutex
	cmds   []*exec.Cmd
	exited []chan struct{} // closed when cmds[i] has exited
	ttys   []*os.File      // the pty's terminal end, each tool's stdin
	ptmxs  []*os.File
	files  []string
	up     []int          // the tools whose session carried text: the reference
	wg     sync.WaitGroup // one waiter per started tool
	once   sync.Once
}

// startIPMITools starts one ipmitool per BMC of f, stdin a pty and stdout
// a file, and waits until each has shown a marker printed on its node. A
// tool that exits before (its session setup timed out on a loaded
// machine) is started again, 2n times in all at most.
func startIPMITools(cfg benchConfig, f *fleetbmc.Fleet, n int) (*ipmitools, error) {
	t := &ipmitools{cmds: make([]*exec.Cmd, n), exited: make([]chan struct{}, n), ttys: make([]*os.File, n),
		ptmxs: make([]*os.File, n), files: make([]string, n)}
	dir, err := os.MkdirTemp(cfg.tmp, "storm-ipmitool-")
	if err != nil {
		return t, err
	}
	for i := range n {
		t.files[i] = filepath.Join(dir, fmt.Sprintf("sol-%04d.log", i))
		if t.ptmxs[i], t.ttys[i], err = pty.Open(); err != nil {
			return t, err
		}
	}
	err = forEach(n, stormWorkers, time.Now().Add(5*time.Minute), func(i int) error { return t.start(f, i) })
	if err != nil {
		return t, err
	}
	marker := []byte("ipmitool-storm-marker\r\n")
	pending := map[int]bool{}
	for i := range n {
		pending[i] = true
	}
	restarts := 0
	deadline := time.Now().Add(3 * time.Minute)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			break
		}
		for i := range pending {
			if time.Now().After(deadline) {
				break
			}
			data, _ := os.ReadFile(t.files[i])
			if bytes.Contains(data, marker) {
				delete(pending, i)
				continue
			}
			select {
			case <-t.exited[i]:
				if restarts >= 2*n {
					continue // too many failed: this one is left out
				}
				restarts++
				// The failed run may have activated the payload: give it
				// back, as an operator would, before trying again.
				f.BMC(i).Deactivate()
				if err := t.start(f, i); err != nil {
					return t, err
				}
			default:
				f.BMC(i).Print(marker)
			}
		}
		time.Sleep(time.Second)
	}
	for i := range n {
		if !pending[i] {
			t.up = append(t.up, i)
		}
	}
	cfg.logf("ipmitool: %d of %d sessions up, %d restarts", len(t.up), n, restarts)
	if len(t.up) == 0 {
		return t, fmt.Errorf("no ipmitool SOL session carried text within 3 minutes")
	}
	return t, nil
}

// start starts tool i (its output appended to its file).
func (t *ipmitools) start(f *fleetbmc.Fleet, i int) error {
	info := f.BMC(i).Info()
	out, err := os.OpenFile(t.files[i], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("ipmitool", "-I", "lanplus", "-C", strconv.Itoa(stormSuite), "-H", info.Addr,
		"-p", strconv.Itoa(info.Port), "-U", info.User, "-E", "sol", "activate")
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+info.Pass)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = t.ttys[i], out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // none outlives the bench
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	t.mu.Lock()
	t.cmds[i], t.exited[i] = cmd, exited
	t.mu.Unlock()
	t.wg.Go(func() { cmd.Wait(); close(exited) }) // stop kills it
	return nil
}

// cpu is the CPU time all tools have used.
func (t *ipmitools) cpu() (time.Duration, error) {
	var sum time.Duration
	for _, i := range t.up {
		if d, err := procCPU(t.cmds[i].Process.Pid); err == nil { // one that died has no /proc: left out
			sum += d
		}
	}
	return sum, nil
}

// written is the bytes all files hold.
func (t *ipmitools) written() int64 {
	var sum int64
	for _, i := range t.up {
		if fi, err := os.Stat(t.files[i]); err == nil {
			sum += fi.Size()
		}
	}
	return sum
}

// storm prints outs on the tools' fleet and waits until the files hold it.
func (t *ipmitools) storm(f *fleetbmc.Fleet, outs [][]byte) (stormRound, error) {
	base := t.written()
	cpu0, err := t.cpu()
	if err != nil {
		return stormRound{}, err
	}
	var total int64
	for _, i := range t.up {
		f.BMC(i).Print(outs[i])
		total += int64(len(outs[i]))
	}
	last := lastPrinted(f)
	rose, err := settle(func() int64 { return t.written() - base }, total, last)
	if err != nil {
		return stormRound{}, fmt.Errorf("ipmitool: %w", err)
	}
	cpu1, err := t.cpu()
	return stormRound{cpu: cpu1 - cpu0, lag: rose.Sub(last), printed: total, got: t.written() - base}, err
}

// rss is the mean VmRSS and RssAnon of a tool, in KiB.
func (t *ipmitools) rss() (rss, anon float64) {
	var n int
	for _, i := range t.up {
		r, a, err := procRSS(t.cmds[i].Process.Pid)
		if err == nil {
			rss, anon, n = rss+float64(r), anon+float64(a), n+1
		}
	}
	if n == 0 {
		return 0, 0
	}
	return rss / float64(n), anon / float64(n)
}

// exact counts the tools whose file holds every round's output of its
// node whole.
func (t *ipmitools) exact(printed [][]byte, n int) int {
	k := 0
	for _, i := range t.up {
		data, _ := os.ReadFile(t.files[i])
		if missing(data, printed, i, n) == 0 {
			k++
		}
	}
	return k
}

// missing is how many bytes of node i's rounds (printed[r*n+i]) got does
// not hold: a round it holds whole counts none, else the bytes it lacks
// (at least 1).
func missing(got []byte, printed [][]byte, i, n int) int64 {
	var lost int64
	for r := 0; r*n+i < len(printed); r++ {
		want := printed[r*n+i]
		if k := bytes.Index(got, want); k >= 0 {
			got = got[k+len(want):]
			continue
		}
		lost += max(1, int64(len(want))-int64(len(got)))
	}
	return lost
}

func (t *ipmitools) stop() {
	t.once.Do(func() {
		t.mu.Lock()
		for _, c := range t.cmds {
			if c != nil {
				c.Process.Kill()
			}
		}
		t.mu.Unlock()
		t.wg.Wait()
		for i := range t.ptmxs {
			if t.ptmxs[i] != nil {
				t.ptmxs[i].Close()
				t.ttys[i].Close()
			}
		}
	})
}
