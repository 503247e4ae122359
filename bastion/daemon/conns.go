package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/internal/conncap"
	"github.com/obmd/obmd/bastion/internal/proxyproto"
	"github.com/obmd/obmd/bastion/sshdoor"
)

// connCaps are the connection caps of the admin, peer and SSH listeners.
type connCaps struct {
	nofile                                   uint64 // the open-file limit they were sized from
	admin, adminUnauth, adminUnauthPerSource int
	adminTokenPerSource                      int
	peer, peerUnauth                         int
	ssh, sshUnauth                           int // negative: no limit (configured so)
}

// sizeCaps sizes the caps left at zero in cfg from nofile, the soft
// open-file limit. The admin port may hold a quarter of it (at most 16,384
// connections, half of them unauthenticated and a quarter of those from one
// address, and half of them of one address's node-token requests), the SSH
// port a quarter (at most 65,536 connections, half of them and at most 1,024
// unauthenticated) and the peer port an eighth (a quarter of that
// unauthenticated), so that with all of them full at least three eighths
// remain for what must keep working: the database pool, BMC sockets and
// ipmitool's terminals, and obmd's own files. An access change then still
// reaches the database.
func sizeCaps(cfg Config, nofile uint64) connCaps {
	clamp := func(v uint64, lo, hi int) int { return int(min(max(v, uint64(lo)), uint64(hi))) }
	c := connCaps{nofile: nofile, admin: cfg.Admin.MaxConns, adminUnauth: cfg.Admin.MaxUnauthConns,
		adminUnauthPerSource: cfg.Admin.MaxUnauthConnsPerSource, adminTokenPerSource: cfg.Admin.MaxTokenConnsPerSource,
		ssh: cfg.SSH.MaxConns, sshUnauth: cfg.SSH.MaxUnauthenticated}
	if c.admin == 0 {
		c.admin = clamp(nofile/4, 16, 16384)
	}
	if c.adminUnauth == 0 {
		c.adminUnauth = clamp(uint64(c.admin)/2, 8, 4096)
	}
	if c.adminUnauthPerSource == 0 {
		c.adminUnauthPerSource = max(c.adminUnauth/4, 4)
	}
	if c.adminTokenPerSource == 0 {
		c.adminTokenPerSource = max(c.admin/2, 4)
	}
	c.peer = clamp(nofile/8, 16, 8192)
	// Per source as much as in all: the peer port's sources are a few
	// replicas, which may open many relays at once.
	c.peerUnauth = max(c.peer/4, 8)
	if c.ssh == 0 {
		c.ssh = clamp(nofile/4, 16, 65536)
	}
	if c.sshUnauth == 0 {
		c.sshUnauth = clamp(nofile/8, 8, 1024)
		if c.ssh > 0 {
			c.sshUnauth = min(c.sshUnauth, max(c.ssh/2, 1))
		}
	}
	return c
}

// sourceKey is the per-source key of the caps: the address, an IPv6 /64
// counting as one (as the session limits count).
func sourceKey(a net.Addr) string {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		host = a.String()
	}
	return sessions.SourceKey(host)
}

// capAdmin wraps the admin listener in its caps.
func (d *Daemon) capAdmin(l net.Listener) (net.Listener, error) {
	c, err := conncap.New(l, conncap.Config{Max: d.caps.admin, MaxStrangers: d.caps.adminUnauth,
		MaxStrangersPerSource: d.caps.adminUnauthPerSource, MaxTenantsPerSource: d.caps.adminTokenPerSource,
		Source: sourceKey, Name: "admin"}, d.log.WithField("part", "admin"))
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	return c, nil
}

// proxyAdmin wraps the admin listener so that connections from the
// balancers in admin.proxy_protocol_from start with a PROXY header naming the
// client (read before TLS, which follows it, within the Listener's default
// timeout, as long as the SSH port's), with the SSH port's rules: a
// connection from a listed balancer without a valid header is closed, and
// from anyone else a header is not honoured. With none listed, l as it is.
func (d *Daemon) proxyAdmin(l net.Listener) (net.Listener, error) {
	from, err := d.cfg.Admin.balancers()
	if err != nil || len(from) == 0 {
		return l, err
	}
	log := d.log.WithField("part", "admin")
	pl, err := proxyproto.NewListener(l, proxyproto.ListenerConfig{From: from.ContainsAddr,
		Refused: func(peer net.Addr, err error) { sshdoor.LogProxyRefused(log, peer, err) }})
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	return pl, nil
}

// capPeer wraps the peer listener in its caps; the peer server trusts a
// connection once the replica on it has authenticated.
func (d *Daemon) capPeer(l net.Listener) (net.Listener, error) {
	c, err := conncap.New(l, conncap.Config{Max: d.caps.peer, MaxStrangers: d.caps.peerUnauth,
		Source: sourceKey, Name: "peer"}, d.log.WithField("part", "peer"))
	if err != nil {
		return nil, fmt.Errorf("peer listener: %w", err)
	}
	return c, nil
}

// newHTTPServer is the admin port's server. ReadTimeout bounds reading a
// request, headers and body: net/http lifts the read deadline once the body
// has been read (and before the handler for a request without one), so a
// console stream or a slow power operation outlives it (verified by
// TestAdminReadTimeoutSparesStreams). A connection is trusted by the caps
// once a request on it presents the admin credential (admin.Config's
// Authenticated), trusted as a tenant's once a node-token request on it
// has been read and its session started (TenantSession), and counted idle
// between requests.
func (d *Daemon) newHTTPServer(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{Handler: h,
		ReadHeaderTimeout: d.cfg.Admin.ReadHeaderTimeout, ReadTimeout: d.cfg.Admin.ReadTimeout,
		IdleTimeout: d.cfg.Admin.IdleTimeout,
		ErrorLog:    httpErrorLog(d.log.WithField("part", "admin")),
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext: capContext,
		ConnState: func(c net.Conn, s http.ConnState) {
			if cc, ok := conncap.Of(c); ok {
				cc.SetIdle(s == http.StateIdle)
			}
		},
	}
}

// capContext is an http.Server's ConnContext for a capped listener: a
// request's context carries its connection's caps (conncap.NewContext),
// so that a handler can vouch for it.
func capContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := conncap.Of(c); ok {
		return conncap.NewContext(ctx, cc)
	}
	return ctx
}

// capsFields are the caps for the start's log line (0: no limit).
func (c connCaps) fields() logrus.Fields {
	return logrus.Fields{"open_files_limit": c.nofile, "admin_max_conns": c.admin,
		"admin_max_unauth_conns": c.adminUnauth, "admin_max_unauth_conns_per_source": c.adminUnauthPerSource,
		"admin_max_token_conns_per_source": c.adminTokenPerSource, "peer_max_conns": c.peer,
		"max_conns": max(c.ssh, 0), "max_unauthenticated": max(c.sshUnauth, 0)}
}
