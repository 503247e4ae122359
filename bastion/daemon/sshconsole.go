package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sshconsole"
	"github.com/obmd/obmd/sol/transport"
)

// consoles is how nodes' consoles are reached beside IPMI SOL
// (sol/transport): the SSH client over the host keys pinned in the
// database, and the memory of the transport each node's console uses
// (the admin view's console_in_use).
type consoles struct {
	tr  *transport.Transports
	ssh *sshconsole.Client
	mem *transport.Memory
}

// newConsoles builds the console transports; a host key pinned or refused
// is audited (hostKeyEvent), and doctor asks consoleHeld whether obmd
// holds a node's console.
func (d *Daemon) newConsoles() (*consoles, error) {
	c := &consoles{mem: transport.NewMemory()}
	var err error
	if c.ssh, err = sshconsole.NewClient(d.cfg.SSHConsole, hostKeys{d.store}, d.hostKeyEvent, d.log.WithField("part", "sshconsole")); err != nil {
		return nil, err
	}
	if c.tr, err = transport.New(c.ssh, c.mem, d.consoleHeld, d.log.WithField("part", "console_transport")); err != nil {
		return nil, err
	}
	return c, nil
}

// wrap is node label's driver b (built with err) behind its console
// transport, reaching the target that target builds.
func (c *consoles) wrap(label string, b sol.BMC, err error, target func() (transport.Target, error)) (sol.BMC, error) {
	if err != nil {
		return nil, err
	}
	tg, err := target()
	if err != nil {
		return nil, err
	}
	return c.tr.Wrap(label, b, tg)
}

// forget drops what is remembered of a deleted node.
func (c *consoles) forget(label string) {
	c.mem.Forget(label)
	c.ssh.Forget(label)
}

// hostKeyEvent audits a BMC host key pinned on first contact
// ("console.ssh_host_key_pinned") or refused as changed
// ("console.ssh_host_key_changed", once per key offered).
func (d *Daemon) hostKeyEvent(ctx context.Context, e sshconsole.HostKeyEvent) {
	ev := commands.Event{Node: e.Node, Actor: "obmd", Action: "console.ssh_host_key_pinned", Result: commands.ResultOK,
		Detail: fmt.Sprintf("%s at %s", e.Offered, e.Addr)}
	if e.Changed {
		ev.Action, ev.Result = "console.ssh_host_key_changed", "refused"
		ev.Detail = fmt.Sprintf("%s at %s shows %s; pinned %s", e.Node, e.Addr, e.Offered, e.Pinned)
	}
	auditor{d.store, d.log}.Audit(ctx, ev)
}

// hostKeys is the database as the SSH client's store of pinned host keys.
type hostKeys struct{ s *db.Store }

func (h hostKeys) PinnedHostKey(ctx context.Context, label string) (sshconsole.PinnedKey, bool, error) {
	k, err := h.s.SSHHostKey(ctx, label)
	if errors.Is(err, db.ErrNotFound) {
		return sshconsole.PinnedKey{}, false, nil
	}
	if err != nil {
		return sshconsole.PinnedKey{}, false, err
	}
	return sshconsole.PinnedKey{Key: k.Key, Addr: k.Addr}, true, nil
}

func (h hostKeys) PinHostKey(ctx context.Context, label string, k sshconsole.PinnedKey) (sshconsole.PinnedKey, error) {
	got, err := h.s.PinSSHHostKey(ctx, db.SSHHostKey{Node: label, Addr: k.Addr, Key: k.Key})
	if err != nil {
		return sshconsole.PinnedKey{}, err
	}
	return sshconsole.PinnedKey{Key: got.Key, Addr: got.Addr}, nil
}
