package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/admin"
	"github.com/obmd/obmd/bastion/internal/conncap"
	"github.com/obmd/obmd/bastion/webdoor"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
)

// web is the web console door (web.addr; all nil when it is off).
type web struct {
	l       net.Listener
	door    *webdoor.Server
	http    *http.Server
	tickets *webdoor.Tickets
	tls     bool
}

// WebAddr is the web console's address ("" when it is off).
func (d *Daemon) WebAddr() string {
	if d.web.l == nil {
		return ""
	}
	return d.web.l.Addr().String()
}

// listenWeb opens the web console's listener, capped like the admin
// port's and with TLS when configured (part of listen).
func (d *Daemon) listenWeb() error {
	s := d.cfg.Web
	if s.Addr == "" {
		return nil
	}
	var cert tls.Certificate
	if s.TLSCert != "" {
		var err error
		if cert, err = tls.LoadX509KeyPair(s.TLSCert, s.TLSKey); err != nil {
			return fmt.Errorf("web TLS: %w", err)
		}
	}
	l, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen for the web console: %w", err)
	}
	d.web.l = l
	caps := sizeCaps(Config{Admin: AdminConfig{MaxConns: s.MaxConns, MaxUnauthConns: s.MaxUnauthConns,
		MaxUnauthConnsPerSource: s.MaxUnauthConnsPerSource}}, d.caps.nofile)
	c, err := conncap.New(l, conncap.Config{Max: caps.admin, MaxStrangers: caps.adminUnauth,
		MaxStrangersPerSource: caps.adminUnauthPerSource, MaxTenantsPerSource: caps.adminTokenPerSource,
		Source: sourceKey, Name: "web"}, d.log.WithField("part", "web"))
	if err != nil {
		return fmt.Errorf("web listener: %w", err)
	}
	d.web.l = c
	if s.TLSCert != "" {
		d.web.l = tls.NewListener(c, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		d.web.tls = true
	}
	return nil
}

// buildWeb builds the web door and the minter of its one-time tickets
// (part of buildDoors, before the admin API, which mints them).
func (d *Daemon) buildWeb(ctx context.Context, gate *access.Gate) error {
	s := d.cfg.Web
	if s.Addr == "" {
		return nil
	}
	public := s.PublicURL
	if public == "" {
		scheme := "http://"
		if d.web.tls {
			scheme = "https://"
		}
		public = scheme + d.web.l.Addr().String()
	}
	proxies, err := s.Proxies()
	if err != nil {
		return err
	}
	if d.web.tickets, err = webdoor.NewTickets(d.store, public, s.TicketTTL); err != nil {
		return err
	}
	d.web.door, err = webdoor.New(webdoor.Config{Limiter: d.limiter, FailDelay: d.cfg.SSH.FailDelay,
		PreAuthTimeout: s.PreAuthTimeout, MaxMessage: int64(s.MaxMessage), FrameAncestors: s.FrameAncestors,
		PublicURL: s.PublicURL, TrustedProxies: proxies, RoleWait: d.roleWait(), OnAuth: d.metrics.ObserveAuth,
		Authenticated: conncap.TrustTenantContext},
		webStore{gate, d.store}, d.revoker, d.consoles, d.log.WithField("part", "web"))
	if err != nil {
		return err
	}
	d.web.http = &http.Server{Handler: d.web.door.Handler(), ReadHeaderTimeout: s.ReadHeaderTimeout,
		MaxHeaderBytes: 16 << 10, // a page or socket request needs little; this bounds a label too
		IdleTimeout:    d.cfg.Admin.IdleTimeout,
		ErrorLog:       httpErrorLog(d.log.WithField("part", "web")),
		BaseContext:    func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext:    capContext,
	}
	return nil
}

// webStore is what the web door reads: logins through the gate (refused
// while the database is unhealthy), tickets redeemed in the database.
type webStore struct {
	*access.Gate
	store *db.Store
}

func (w webStore) RedeemWebTicket(ctx context.Context, h keys.TokenHash) (db.WebTicket, error) {
	return w.store.RedeemWebTicket(ctx, h)
}

// serveWeb serves the web console until shutdown (nil when it is off).
func (d *Daemon) serveWeb() error {
	if d.web.http == nil {
		return nil
	}
	if err := d.web.http.Serve(d.web.l); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("web http: %w", err)
	}
	return nil
}

// stopWeb stops the web console once the registry has cut its sessions:
// the listener closes, sockets still logging in are refused, and the
// sockets of cut sessions are waited for, within ctx.
func (d *Daemon) stopWeb(ctx context.Context) error {
	if d.web.http == nil {
		return nil
	}
	if err := d.web.http.Shutdown(ctx); err != nil {
		d.web.http.Close()
	}
	if err := d.web.door.Shutdown(ctx); err != nil {
		return fmt.Errorf("stop the web console: %w", err)
	}
	return nil
}

// webTicketMinter is the admin API's minter of tickets (nil: the web
// console is off, and the route says so).
func (d *Daemon) webTicketMinter() admin.WebTickets {
	if d.web.tickets == nil {
		return nil
	}
	return d.web.tickets
}
