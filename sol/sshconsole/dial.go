package sshconsole

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol"
)

// HostKeyError is a BMC showing a host key other than the node's pin.
type HostKeyError struct {
	Addr       string
	Offered    string // fingerprint
	Pinned     string // fingerprint
	Registered bool   // the pin is the key registered with the node (else recorded on first contact)
}

func (e *HostKeyError) Error() string {
	how := "pinned on first contact"
	if e.Registered {
		how = "registered with the node"
	}
	return fmt.Sprintf("the SSH host key of %s changed: it shows %s, the key %s is %s", e.Addr, e.Offered, how, e.Pinned)
}

// keyCheck is the host-key verdict of one handshake.
type keyCheck struct {
	offered ssh.PublicKey
	pinned  ssh.PublicKey // the key it was checked against; nil: first contact
	// registered: pinned is the node's registered key.
	registered bool
	// recorded: first contact, and the key was pinned now (Open); a
	// diagnosis pins nothing.
	recorded bool
	err      error // the refusal, if the key was refused
}

// dialed is an authenticated SSH connection to a BMC.
type dialed struct {
	conn   net.Conn
	client *ssh.Client
	// release ends the ctx watch that bounds the handshake; the caller
	// calls it once the opening is done and clears the deadline.
	release func() bool
}

// close ends the connection and the ctx watch.
func (d *dialed) close() {
	d.release()
	d.client.Close()
}

// dial connects to t's BMC and authenticates, checking its host key
// against the pin (pin: record it on first contact). ctx bounds the TCP
// connection and the handshake; on success the connection's deadline is
// still set: the caller clears it (settle) when the opening is done. Its
// errors are *sol.Error values; k is set once the handshake saw a key.
func (c *Client) dial(ctx context.Context, t Target, pin bool) (*dialed, *keyCheck, error) {
	addr := t.Addr()
	pinned, err := c.pinOf(ctx, t)
	if err != nil {
		return nil, nil, sol.NewError(sol.FaultUnknown, fmt.Errorf("read the pinned SSH host key of %s: %w", t.Node, err))
	}
	d := net.Dialer{}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, dialError(ctx, addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	release := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	k := &keyCheck{pinned: pinned, registered: t.HostKey != nil}
	cfg := c.sshConfig(t, pinned, func(_ string, _ net.Addr, key ssh.PublicKey) error {
		return c.checkKey(ctx, t, k, key, pin)
	})
	sc, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		release()
		conn.Close()
		if k.offered == nil {
			k = nil
		}
		return nil, k, handshakeError(ctx, addr, k, err)
	}
	return &dialed{conn: conn, client: ssh.NewClient(sc, chans, reqs), release: release}, k, nil
}

// settle ends the handshake's bound: the console lives until its Close.
func (d *dialed) settle() {
	d.release()
	d.conn.SetDeadline(time.Time{})
}

// pinOf is the key t's BMC must show: the registered one, else the one
// pinned for the node at this address; nil if none.
func (c *Client) pinOf(ctx context.Context, t Target) (ssh.PublicKey, error) {
	if t.HostKey != nil {
		return t.HostKey, nil
	}
	p, ok, err := c.keys.PinnedHostKey(ctx, t.Node)
	if err != nil || !ok || p.Addr != t.Addr() {
		return nil, err
	}
	k, err := parseHostKey(p.Key)
	if err != nil {
		return nil, fmt.Errorf("stored key: %w", err)
	}
	return k, nil
}

// checkKey is the handshake's host-key callback: key must be the pin;
// without one it is pinned now (pin) or accepted as seen (a diagnosis).
func (c *Client) checkKey(ctx context.Context, t Target, k *keyCheck, key ssh.PublicKey, pin bool) error {
	k.offered = key
	if k.pinned == nil && pin {
		got, err := c.keys.PinHostKey(ctx, t.Node, PinnedKey{Key: KeyLine(key), Addr: t.Addr()})
		if err != nil {
			k.err = fmt.Errorf("pin the SSH host key of %s: %w", t.Node, err)
			return k.err
		}
		if got.Key == KeyLine(key) {
			k.recorded = true
			c.Forget(t.Node) // a change reported was against the old pin
			c.log.WithFields(logrus.Fields{"node": t.Node, "addr": t.Addr(), "fingerprint": ssh.FingerprintSHA256(key)}).
				Info("ssh_host_key_pinned")
			c.tell(ctx, HostKeyEvent{Node: t.Node, Addr: t.Addr(), Offered: ssh.FingerprintSHA256(key)})
			return nil
		}
		// Pinned meanwhile by another link (another replica): that one
		// stands.
		if k.pinned, _ = parseHostKey(got.Key); k.pinned == nil {
			k.err = fmt.Errorf("pin the SSH host key of %s: the stored key does not parse", t.Node)
			return k.err
		}
	}
	if k.pinned == nil || bytes.Equal(key.Marshal(), k.pinned.Marshal()) {
		return nil
	}
	e := &HostKeyError{Addr: t.Addr(), Offered: ssh.FingerprintSHA256(key), Pinned: ssh.FingerprintSHA256(k.pinned),
		Registered: k.registered}
	k.err = e
	if pin {
		c.changed(ctx, t, e)
	}
	return e
}

// changed reports a refused key: logged at error level and told (notify)
// once per key offered against the pin this client last made (Forget),
// at debug level after that.
func (c *Client) changed(ctx context.Context, t Target, e *HostKeyError) {
	c.mu.Lock()
	first := c.reported[t.Node] != e.Offered
	c.reported[t.Node] = e.Offered
	c.mu.Unlock()
	log := c.log.WithFields(logrus.Fields{"node": t.Node, "addr": e.Addr, "offered": e.Offered, "pinned": e.Pinned,
		"registered": e.Registered})
	if !first {
		log.Debug("ssh_host_key_changed")
		return
	}
	log.Error("ssh_host_key_changed")
	c.tell(ctx, HostKeyEvent{Node: t.Node, Addr: e.Addr, Changed: true, Offered: e.Offered, Pinned: e.Pinned})
}

// Forget drops what the client remembers of node (a key change reported).
func (c *Client) Forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.reported, node)
}

func (c *Client) tell(ctx context.Context, e HostKeyEvent) {
	if c.notify != nil {
		c.notify(ctx, e)
	}
}

// sshConfig is the client configuration for t: its user, its password by
// either method, the host key check, and (with a pin) only the pinned
// key's algorithms, so that the BMC shows that key and no other.
func (c *Client) sshConfig(t Target, pinned ssh.PublicKey, check ssh.HostKeyCallback) *ssh.ClientConfig {
	answer := func(_, _ string, questions []string, echos []bool) ([]string, error) {
		out := make([]string, len(questions))
		for i := range questions {
			out[i] = t.Pass
			if echos[i] { // a question shown as typed is not the password
				out[i] = t.User
			}
		}
		return out, nil
	}
	cfg := &ssh.ClientConfig{
		User:            t.User,
		Auth:            []ssh.AuthMethod{ssh.Password(t.Pass), ssh.KeyboardInteractive(answer)},
		HostKeyCallback: check,
		ClientVersion:   "SSH-2.0-obmd",
	}
	if c.cfg.LegacyAlgorithms {
		all, weak := ssh.SupportedAlgorithms(), ssh.InsecureAlgorithms()
		cfg.KeyExchanges = append(all.KeyExchanges, weak.KeyExchanges...)
		cfg.Ciphers = append(all.Ciphers, weak.Ciphers...)
		cfg.MACs = append(all.MACs, weak.MACs...)
		cfg.HostKeyAlgorithms = append(all.HostKeys, weak.HostKeys...)
	}
	if pinned != nil {
		cfg.HostKeyAlgorithms = keyAlgorithms(pinned.Type(), c.cfg.LegacyAlgorithms)
	}
	return cfg
}

// keyAlgorithms are the signature algorithms of a host key type.
func keyAlgorithms(typ string, legacy bool) []string {
	if typ != ssh.KeyAlgoRSA {
		return []string{typ}
	}
	algos := []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
	if legacy {
		algos = append(algos, ssh.KeyAlgoRSA)
	}
	return algos
}

// dialError classifies a failed TCP connection.
func dialError(ctx context.Context, addr string, err error) error {
	var dns *net.DNSError
	var ne net.Error
	f := sol.FaultUnknown
	switch {
	case errors.As(err, &dns), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH):
		f = sol.FaultUnreachable
	case ctx.Err() != nil, errors.As(err, &ne) && ne.Timeout():
		f = sol.FaultNoAnswer
	}
	return sol.NewError(f, fmt.Errorf("connect to the SSH service of %s: %w", addr, err))
}

// handshakeError classifies a failed SSH handshake.
func handshakeError(ctx context.Context, addr string, k *keyCheck, err error) error {
	var ne net.Error
	var he *HostKeyError
	f := sol.FaultRejected
	switch {
	case errors.As(err, &he):
		f = sol.FaultHostKey
	case k != nil && k.err != nil:
		f = sol.FaultUnknown // the pin could not be stored
	case strings.Contains(err.Error(), "unable to authenticate"):
		f = sol.FaultCredentials
	case ctx.Err() != nil, errors.As(err, &ne) && ne.Timeout():
		f = sol.FaultNoAnswer
	}
	return sol.NewError(f, fmt.Errorf("SSH handshake with %s: %w", addr, err))
}
