package sshconsole

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol"
)

// Hints of the diagnosis, for administrators and tenants alike.
const (
	HintAddress    = "check the BMC's address and info.ssh_port, and that obmd reaches the BMC's SSH port"
	HintAlgorithms = "the BMC's SSH service and obmd share no algorithm: old firmware may need ssh_console.legacy_algorithms"
	HintHostKey    = "if the BMC's key really changed (a new BMC, a reset), an administrator resets the node's pin (obmctl node ssh-host-key reset); otherwise something else answers at the BMC's address"
	HintAuth       = "check info.ssh_user and info.ssh_pass (by default the node's user and pass) and that the account may log in over SSH"
	HintBusy       = "another session holds the BMC's console: end it at the BMC, or let obmd free it when it opens the console"
	HintCommand    = "check info.ssh_command and info.ssh_vendor: the command must attach the host console at the BMC's CLI"
)

// consoleWait is how long a diagnosis watches the attached console.
const consoleWait = time.Second

// Diagnose checks t's console step by step, read-only but for attaching
// the console for a moment and leaving it as Close does (sol.Diagnoser's
// half for this transport): the SSH port answers; the host key matches
// the node's pin (a key not pinned yet is shown, not pinned: the first
// console link pins it); obmd logs in; the console command attaches the
// host console; the console stays attached (and what it printed). held
// reports that obmd's own link holds the console: it is not attached
// again (a vendor that lets a new session take the console over would
// take it from obmd). It stops after the first failed step.
func (c *Client) Diagnose(ctx context.Context, t Target, held bool) []sol.Check {
	var checks []sol.Check
	add := func(ch sol.Check) bool { checks = append(checks, ch); return ch.OK }
	addr := t.Addr()
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		add(sol.FailErr(sol.CheckSSHAddress, dialError(ctx, addr, err), HintAddress))
		return checks
	}
	conn.Close()
	add(sol.PassDetail(sol.CheckSSHAddress, addr+" accepts TCP connections", "the BMC's SSH service answers"))

	d, k, err := c.dial(ctx, t, false)
	if !add(keyStep(t, k, err)) {
		return checks
	}
	if err != nil {
		add(sol.FailErr(sol.CheckSSHAuth, err, HintAuth))
		return checks
	}
	add(sol.PassDetail(sol.CheckSSHAuth, "logged in to "+addr+" as "+strconv.Quote(t.User), "logged in"))
	if held {
		d.close()
		const text = "not attached: obmd's console link holds the console"
		add(sol.Pass(sol.CheckSSHCommand, text))
		add(sol.Pass(sol.CheckSSHConsole, text))
		return checks
	}
	con, err := c.start(ctx, t, d)
	if err != nil {
		hint := HintCommand
		if errors.Is(err, ErrBusy) {
			hint = HintBusy
		}
		add(sol.FailErr(sol.CheckSSHCommand, err, hint))
		return checks
	}
	defer con.Close()
	add(sol.Pass(sol.CheckSSHCommand, commandText(t)))
	add(con.watch(ctx))
	return checks
}

// keyStep is the host-key step from a handshake's verdict k (nil: the
// handshake failed before the BMC showed a key) and error.
func keyStep(t Target, k *keyCheck, err error) sol.Check {
	switch {
	case k == nil:
		return sol.FailErr(sol.CheckSSHHostKey, err, HintAlgorithms)
	case k.err != nil:
		return sol.FailErr(sol.CheckSSHHostKey, err, HintHostKey)
	}
	text := k.offered.Type() + " " + ssh.FingerprintSHA256(k.offered)
	switch {
	case k.registered:
		text += " (the key registered with the node)"
	case k.pinned != nil:
		text += " (pinned)"
	default:
		text += " (not pinned yet: the first console link pins it)"
	}
	return sol.PassDetail(sol.CheckSSHHostKey, t.Addr()+" shows "+text, "the BMC shows "+text)
}

// commandText says how the console was attached.
func commandText(t Target) string {
	if t.Command == "" {
		return "the session is the console (no command)"
	}
	return fmt.Sprintf("%q attached the host console", t.Command)
}

// watch is the console step: the console stays attached for consoleWait
// (within ctx), and what the host printed meanwhile.
func (con *Console) watch(ctx context.Context) sol.Check {
	n := len(con.pre)
	timer := time.NewTimer(consoleWait)
	defer timer.Stop()
	for {
		select {
		case b, ok := <-con.out:
			if !ok {
				return sol.FailErr(sol.CheckSSHConsole, sol.NewError(sol.FaultRejected, con.readError()), HintCommand)
			}
			n += len(b)
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		text := fmt.Sprintf("attached; the host printed %d bytes in %v", n, consoleWait)
		return sol.Pass(sol.CheckSSHConsole, text)
	}
}

// Free frees the console from another session: the vendor's Free command
// typed at the CLI (sol.BMC.DeactivateConsole). A vendor without one (the
// console is taken over, or shared) needs nothing: nil.
func (c *Client) Free(ctx context.Context, t Target) error {
	if t.Preset.Free == "" {
		return nil
	}
	d, _, err := c.dial(ctx, t, true)
	if err != nil {
		return err
	}
	con := &Console{c: c, t: t, d: d, ended: make(chan struct{}), done: make(chan struct{})}
	defer con.abort()
	s, err := con.newSession(ctx)
	if err != nil {
		return err
	}
	defer s.s.Close()
	if err := s.s.Shell(); err != nil {
		return con.sessionError(ctx, "start a shell on", err)
	}
	if _, err := con.waitPrompt(ctx, s); err != nil {
		return err
	}
	if _, err := s.in.Write([]byte(t.Preset.Free + "\r")); err != nil {
		return con.sessionError(ctx, "free the console on", err)
	}
	if _, err := con.waitPrompt(ctx, s); err != nil {
		return err
	}
	s.in.Write([]byte("exit\r")) // the connection closes anyway
	c.log.WithField("node", t.Node).Info("ssh_console_freed")
	return nil
}
