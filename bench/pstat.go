package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// pstatProbe is one way of asking for a node's power status: a process
// (argv, extra environment) or an in-process call, and what its output
// must contain.
type pstatProbe struct {
	name string
	argv []string
	env  []string
	call func() ([]byte, error) // instead of argv
	want string
	took []time.Duration
	err  error
}

// run times one probe: a process from start to exit, as a script sees it.
func (p *pstatProbe) run() {
	if p.err != nil {
		return
	}
	t := time.Now()
	var out []byte
	var err error
	if p.call != nil {
		out, err = p.call()
	} else {
		cmd := exec.Command(p.argv[0], p.argv[1:]...)
		cmd.Env = append(os.Environ(), p.env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err = cmd.Output()
		if err != nil {
			err = fmt.Errorf("%s: %w: %s", p.argv[0], err, strings.TrimSpace(stderr.String()))
		}
	}
	d := time.Since(t)
	if err == nil && !bytes.Contains(out, []byte(p.want)) {
		err = fmt.Errorf("%s: got %q, want %q", p.name, out, p.want)
	}
	if err != nil {
		p.err = err
		return
	}
	p.took = append(p.took, d)
}

// openSSH is the OpenSSH client command line used for every ssh probe: no
// user config, no host key check (loopback, servers this bench started),
// no connection sharing, and the key exchange section 1 offers.
func openSSH(addr, user string, opts ...string) []string {
	host, port, _ := strings.Cut(addr, ":")
	argv := []string{"ssh", "-F", "/dev/null", "-p", port,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-o", "ControlMaster=no", "-o", "ControlPath=none", "-o", "KexAlgorithms=" + strings.Join(kex, ",")}
	argv = append(argv, opts...)
	return append(argv, user+"@"+host)
}

// pstatObmd is one obmd process with the node "ps" on a BMC, reachable by
// key and by token.
type pstatObmd struct {
	*obmdProc
	token, keyFile string
}

// startPstatObmd runs obmd (defaults, SQLite, extra settings added) and
// registers node ps (type ipmi) on info, with a fresh token and key.
func startPstatObmd(cfg benchConfig, name string, info sol.Info, extra map[string]any) (*pstatObmd, error) {
	dir, err := os.MkdirTemp(cfg.tmp, name+"-")
	if err != nil {
		return nil, err
	}
	settings := obmdDefaults()
	for k, v := range extra {
		settings[k] = v
	}
	o, err := startObmdProc(cfg.obmdBin, dir, "", settings)
	if err != nil {
		return nil, err
	}
	p := &pstatObmd{obmdProc: o, keyFile: filepath.Join(dir, "id_ed25519")}
	a := o.admin()
	signer, err := writeKey(p.keyFile)
	if err == nil {
		p.token, err = a.addNode("ps", "ipmi", info)
	}
	if err == nil {
		key := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
		err = a.call("POST", "/v1/nodes/ps/keys", map[string]string{"key": key}, nil)
	}
	if err != nil {
		o.Stop()
		return nil, err
	}
	return p, nil
}

// sshKey is `ssh -i KEY ps@obmd CMD` (power-status unless cmd says).
func (p *pstatObmd) sshKey(name string, cmd ...string) *pstatProbe {
	argv := openSSH(p.SSHAddr, "ps", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-i", p.keyFile)
	if len(cmd) == 0 {
		return &pstatProbe{name: name, argv: append(argv, "power-status"), want: "power on"}
	}
	return &pstatProbe{name: name, argv: append(argv, cmd[0]), want: cmd[1]}
}

// sshToken is `sshpass -e ssh LABEL@obmd power-status` (the token in
// SSHPASS, not in argv).
func (p *pstatObmd) sshToken(name, label, token string) *pstatProbe {
	argv := openSSH(p.SSHAddr, label, "-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password")
	return &pstatProbe{name: name, argv: append(append([]string{"sshpass", "-e"}, argv...), "power-status"),
		env: []string{"SSHPASS=" + token}, want: "power on"}
}

// statusURL is HIL's route GET /node/ps/power_status?token=.
func (p *pstatObmd) statusURL() string {
	return "http://" + p.AdminAddr + "/node/ps/power_status?token=" + url.QueryEscape(p.token)
}

// ipmitoolArgv is the reference: ipmitool run locally, the password in the
// environment (-E), cipher suite 3 as the node pins it.
func ipmitoolArgv(info sol.Info) []string {
	return []string{"ipmitool", "-I", "lanplus", "-C", "3", "-H", info.Addr, "-p", strconv.Itoa(info.Port),
		"-U", info.User, "-E", "chassis", "power", "status"}
}

// ipmitoolScript is the ForceCommand of the OpenSSH reference: the same
// ipmitool call behind sshd.
func ipmitoolScript(info sol.Info) string {
	return "#!/bin/sh\nIPMI_PASSWORD='" + info.Pass + "' exec " + strings.Join(ipmitoolArgv(info), " ") + "\n"
}

// httpGet returns a call that GETs u with client c.
func httpGet(c *http.Client, u string) func() ([]byte, error) {
	return func() ([]byte, error) {
		resp, err := c.Get(u)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET power_status: %d %s", resp.StatusCode, bytes.TrimSpace(body))
		}
		return body, err
	}
}

// pstatTools are the programs section 8 runs.
var pstatTools = []string{"ipmi_sim", "socat", "ipmitool", "ssh", "sshpass", "curl"}

// startPstatSims starts the two BMCs of section 8.
func startPstatSims(cfg benchConfig) (after, before *ipmisim.Sim, err error) {
	for _, t := range pstatTools {
		if _, err := exec.LookPath(t); err != nil {
			return nil, nil, notMeasured("%s missing (apt-get install openipmi socat ipmitool openssh-client sshpass curl)", t)
		}
	}
	sims, err := startSims(cfg, 2)
	if err != nil {
		for _, s := range sims {
			if s != nil {
				s.Close()
			}
		}
		return nil, nil, err
	}
	return sims[0], sims[1], nil
}

// bmcDelayEach is what the delaying relay adds each way: a BMC that takes
// 5 ms longer per request than ipmi_sim on loopback.
const bmcDelayEach = 2500 * time.Microsecond

// pstatLab is what section 8 runs: two ipmi_sims (A for the obmd keeping
// sessions and for ipmitool, B for the obmd keeping none), each also
// behind a delaying relay, the two obmds, and an sshd running ipmitool.
type pstatLab struct {
	simA, simB   *ipmisim.Sim
	slowA, slowB *udpDelay
	kept, unkept *pstatObmd
	negToken     string
	slowK, slowU string // tokens of node psd on kept and unkept
	sshd         *sshdServer
	sshdDir      string
	sshdErr      error
	stops        []func()
}

func (l *pstatLab) Close() {
	for i := len(l.stops) - 1; i >= 0; i-- {
		l.stops[i]()
	}
}

// startPstatLab starts everything; on error what started is stopped.
func startPstatLab(cfg benchConfig) (l *pstatLab, err error) {
	l = &pstatLab{}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	if l.simA, l.simB, err = startPstatSims(cfg); err != nil {
		return nil, err
	}
	l.stops = append(l.stops, func() { l.simA.Close() }, func() { l.simB.Close() })
	for _, x := range []struct {
		sim *ipmisim.Sim
		out **udpDelay
	}{{l.simA, &l.slowA}, {l.simB, &l.slowB}} {
		if *x.out, err = startUDPDelay(x.sim.Port, bmcDelayEach); err != nil {
			return nil, err
		}
		l.stops = append(l.stops, (*x.out).Close)
	}
	if l.kept, err = startPstatObmd(cfg, "pstat-obmd", l.simA.Info(), nil); err != nil {
		return nil, err
	}
	l.stops = append(l.stops, l.kept.Stop)
	unkeptCfg := map[string]any{"ipmi": map[string]any{"session_linger": "-1s"}}
	if l.unkept, err = startPstatObmd(cfg, "pstat-unkept", l.simB.Info(), unkeptCfg); err != nil {
		return nil, err
	}
	l.stops = append(l.stops, l.unkept.Stop)
	negotiated := l.simA.Info()
	negotiated.Cipher = nil
	if l.negToken, err = addAttachedNode(l.kept, "psn", negotiated); err != nil {
		return nil, err
	}
	if l.slowK, err = addAttachedNode(l.kept, "psd", slowInfo(l.simA, l.slowA)); err != nil {
		return nil, err
	}
	if l.slowU, err = addAttachedNode(l.unkept, "psd", slowInfo(l.simB, l.slowB)); err != nil {
		return nil, err
	}
	if l.sshdDir, err = os.MkdirTemp(cfg.tmp, "pstat-sshd-"); err != nil {
		return nil, err
	}
	if l.sshd, l.sshdErr = startSSHDWith(l.sshdDir, ipmitoolScript(l.simA.Info())); l.sshdErr == nil {
		l.stops = append(l.stops, l.sshd.Stop)
	}
	return l, nil
}

// slowInfo is sim's BMC reached through its delaying relay.
func slowInfo(sim *ipmisim.Sim, d *udpDelay) sol.Info {
	info := sim.Info()
	info.Port = d.Port()
	return info
}

// addAttachedNode registers label on o with capture attached (node ps
// holds the BMC's SOL payload: another node on it must not fight for it,
// and it shares that BMC on purpose) and returns its token.
func addAttachedNode(o *pstatObmd, label string, info sol.Info) (string, error) {
	a := o.admin()
	if err := a.call("PUT", "/node/"+url.PathEscape(label)+"?allow_shared_bmc=1", map[string]any{"type": "ipmi", "info": info}, nil); err != nil {
		return "", err
	}
	token, err := a.rotate(label)
	if err != nil {
		return "", err
	}
	return token, a.call("PUT", "/v1/nodes/"+label+"/capture", map[string]string{"capture": "attached"}, nil)
}

// powerStatusBench is section 8.
func powerStatusBench(cfg benchConfig) *section {
	s := &section{Title: "8. Power status latency: `ssh node@obmd power-status` and HIL's `power_status` route vs ipmitool run locally (native ipmi node on ipmi_sim)"}
	l, err := startPstatLab(cfg)
	if err != nil {
		s.skip("power-status wall time, through obmd vs local ipmitool", err)
		return s
	}
	defer l.Close()
	probes := pstatProbes(l)
	runs, warm := 40, 3
	if cfg.quick {
		runs, warm = 8, 1
	}
	cfg.logf("power status: %d rounds of %d probes, interleaved", warm+runs, len(probes))
	for r := range warm + runs {
		for _, p := range probes {
			p.run()
			if r == warm-1 {
				p.took = nil // warm-up done
			}
		}
	}
	pstatRows(s, probes)
	pstatNotes(s, runs, warm)
	return s
}

// Indexes of pstatProbes' probes.
const (
	pIpmitool = iota
	pKey
	pToken
	pViaSSHD
	pCurl
	pHTTPKeepAlive
	pUnkept
	pNegotiated
	pHelp
	pSlowIpmitool
	pSlowKept
	pSlowUnkept
)

// pstatProbes lists the probes, in the order of the indexes above.
func pstatProbes(l *pstatLab) []*pstatProbe {
	info := l.simA.Info()
	via := &pstatProbe{name: "ssh to sshd running ipmitool", want: "Chassis Power is on", err: l.sshdErr}
	if l.sshd != nil {
		via.argv = append(openSSH(l.sshd.Addr, l.sshd.User, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
			"-i", filepath.Join(l.sshdDir, "id_ed25519")), "power-status")
	}
	keepAlive := &http.Client{Timeout: 30 * time.Second}
	slow := slowInfo(l.simA, l.slowA)
	return []*pstatProbe{
		{name: "ipmitool", argv: ipmitoolArgv(info), env: []string{"IPMI_PASSWORD=" + info.Pass}, want: "Chassis Power is on"},
		l.kept.sshKey("ssh, key"),
		l.kept.sshToken("ssh, token", "ps", l.kept.token),
		via,
		{name: "curl", argv: []string{"curl", "-sS", "--fail-with-body", l.kept.statusURL()}, want: `"power_status":"on"`},
		{name: "HTTP keep-alive", call: httpGet(keepAlive, l.kept.statusURL()), want: `"power_status":"on"`},
		l.unkept.sshKey("ssh, key, sessions not kept"),
		l.kept.sshToken("ssh, token, cipher negotiated", "psn", l.negToken),
		l.kept.sshKey("ssh, key, help", "help", "power-status"),
		{name: "ipmitool, slower BMC", argv: ipmitoolArgv(slow), env: []string{"IPMI_PASSWORD=" + info.Pass}, want: "Chassis Power is on"},
		l.kept.sshToken("ssh, token, slower BMC", "psd", l.slowK),
		l.unkept.sshToken("ssh, token, slower BMC, not kept", "psd", l.slowU),
	}
}

// pstatRows compares each probe with its reference (p50 and p99).
func pstatRows(s *section, ps []*pstatProbe) {
	cmp := func(measure string, a, b *pstatProbe, refName string, goal bool, p99 bool) {
		if a.err != nil || b.err != nil {
			err := a.err
			if err == nil {
				err = b.err
			}
			s.skip(measure, err)
			return
		}
		q, g := 0.5, "< 1x"
		if p99 {
			q, g = 0.99, "-"
		}
		fa, fb := pct(a.took, q), pct(b.took, q)
		r := row{Measure: measure, Figure: ms(fa), Ref: refName + ": " + ms(fb), Ratio: ratio(float64(fa), float64(fb)),
			Goal: "-", Status: statusNone}
		if goal && !p99 {
			r.Goal, r.Status = g, verdict(fa < fb)
		}
		s.add(r)
	}
	both := func(measure string, a, b *pstatProbe, refName string, goal bool) {
		cmp(measure+", p50", a, b, refName, goal, false)
		cmp(measure+", p99", a, b, refName, goal, true)
	}
	ipmitool := ps[pIpmitool]
	both("`ssh` (key) `power-status` vs local `ipmitool chassis power status`", ps[pKey], ipmitool, "ipmitool", true)
	both("`sshpass` + `ssh` (token) `power-status` vs local ipmitool", ps[pToken], ipmitool, "ipmitool", true)
	both("`ssh` (key) `power-status` vs `ssh` (key) to sshd whose ForceCommand runs that ipmitool", ps[pKey], ps[pViaSSHD], "ssh + sshd + ipmitool", true)
	both("`curl` GET `/node/ps/power_status` vs local ipmitool", ps[pCurl], ipmitool, "ipmitool", true)
	cmp("GET `power_status`, one kept-alive HTTP connection (a long-running client such as HIL) vs local ipmitool, p50", ps[pHTTPKeepAlive], ipmitool, "ipmitool", true, false)
	cmp("`ssh` (key) `power-status`, IPMI session kept (default) vs not kept (`ipmi.session_linger: -1s`), p50", ps[pKey], ps[pUnkept], "not kept", false, false)
	cmp("`ssh` (key) `power-status`, not kept vs local ipmitool, p50", ps[pUnkept], ipmitool, "ipmitool", true, false)
	cmp("`ssh` (key) `help` (obmd's SSH path alone: no BMC call) vs `ssh` (key) `power-status`, p50", ps[pHelp], ps[pKey], "power-status", false, false)
	slow := fmt.Sprintf("BMC %v slower per request (a relay holding each datagram %v each way)", 2*bmcDelayEach, bmcDelayEach)
	cmp("`sshpass` + `ssh` (token) `power-status` vs local ipmitool, "+slow+", p50", ps[pSlowKept], ps[pSlowIpmitool], "ipmitool", true, false)
	cmp("the same, IPMI session not kept vs local ipmitool, p50", ps[pSlowUnkept], ps[pSlowIpmitool], "ipmitool", true, false)
	cmp("the same, kept vs not kept, p50", ps[pSlowKept], ps[pSlowUnkept], "not kept", false, false)
	cmp("`sshpass` + `ssh` (token), node without a pinned cipher (negotiated: 17 refused, 3 remembered) vs pinned 3, p50", ps[pNegotiated], ps[pToken], "pinned", false, false)
}

// pstatNotes says what was run.
func pstatNotes(s *section, runs, warm int) {
	s.note("Ratio: obmd's time / the reference's time: below 1x obmd answers sooner.")
	s.note("Wall time of each client from its start to its exit (a process, as a user's script runs it; the keep-alive row is a Go net/http client in the bench process), %d rounds after %d of warm-up; in each round every probe runs once, one after the other (interleaved, so the shared machine's drift weighs on all alike). with %d runs p99 is the slowest one: read p50.", runs, warm, runs)
	s.note("BMC: OpenIPMI ipmi_sim on 127.0.0.1 (RMCP+, cipher suite 3; its chassis_control hook is a shell script, forked per request: ~2 ms of every status, for obmd and ipmitool alike). obmd: the binary, separate process, defaults (SQLite, `console_capture` always: each obmd also holds its node's SOL link to its BMC), node `ps` of type `ipmi` pinning cipher suite 3; reference `ipmitool -I lanplus -C 3 -H 127.0.0.1 -p PORT -U admin -E chassis power status` (IPMI_PASSWORD in its environment) on the same ipmi_sim.")
	s.note("OpenSSH client: `ssh -F /dev/null -o KexAlgorithms=curve25519-sha256` (no connection sharing, host key not checked), key auth with a key registered for the node (`POST /v1/nodes/ps/keys`), or token auth through `sshpass -e` (the token in SSHPASS). The OpenSSH reference runs the same ssh (key auth) to an sshd of this bench whose ForceCommand runs that ipmitool: the OpenSSH client on both sides. `curl -sS --fail-with-body` is a process per call, a new TCP connection each.")
	s.note("\"Not kept\" is a second obmd process (`ipmi.session_linger: -1s`: every call opens, uses and closes its own RMCP+ session, as before issue 18) on a second, identical ipmi_sim: what a caller gets when its calls come further apart than the linger (10 s) or the 15 s a session is reused at most.")
}
