package webdoor

import (
	"errors"
	"fmt"
	"time"

	"github.com/obmd/obmd/bastion/internal/realip"
)

// Settings is the web section of obmd's configuration: the web console's
// own listener and its bounds. Defaults are set by WithDefaults; the
// wiring builds the listener, its caps and Config from them.
type Settings struct {
	// Addr is the web console's listen address (env OBMD_WEB_ADDR); empty:
	// no web console.
	Addr string `yaml:"addr"`
	// PublicURL is the console's address as browsers reach it, e.g.
	// https://console.example.com behind a proxy: one-time links start
	// with it (default: http(s)://Addr).
	PublicURL string `yaml:"public_url"`
	// TLSCert and TLSKey serve the console over HTTPS (default: the admin
	// port's tls_cert and tls_key). Off loopback it needs them, or
	// InsecureHTTP.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// InsecureHTTP allows plain HTTP on an address that is not loopback
	// (tokens would cross the network in clear).
	InsecureHTTP bool `yaml:"insecure_http"`
	// TrustedProxies lists the reverse proxies (addresses or networks)
	// whose X-Forwarded-For names the client, as admin.trusted_proxies
	// does for the admin port.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// FrameAncestors are the origins that may embed the page in a frame
	// (a dashboard: https://dash.example.com); none: no one may.
	FrameAncestors []string `yaml:"frame_ancestors"`
	// PreAuthTimeout bounds the time from a socket's opening to its
	// credential (default 10 s); ReadHeaderTimeout the HTTP request before
	// it (default 10 s).
	PreAuthTimeout    time.Duration `yaml:"preauth_timeout"`
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// MaxMessage bounds one message from a browser (default 64 KiB).
	MaxMessage int `yaml:"max_message"`
	// TicketTTL is how long a one-time ticket is valid (default and at
	// most 1 min).
	TicketTTL time.Duration `yaml:"ticket_ttl"`
	// MaxConns bounds the port's open connections, MaxUnauthConns those
	// whose socket has not logged in, MaxUnauthConnsPerSource those of one
	// address (zero: sized as the admin port's caps are). Over a cap the
	// oldest connection that has not logged in is closed.
	MaxConns                int `yaml:"max_conns"`
	MaxUnauthConns          int `yaml:"max_unauth_conns"`
	MaxUnauthConnsPerSource int `yaml:"max_unauth_conns_per_source"`
}

// WithDefaults returns s with its defaults set, or an error for a value
// out of range. adminCert and adminKey are the admin port's certificate.
func (s Settings) WithDefaults(adminCert, adminKey string) (Settings, error) {
	if s.Addr == "" {
		return s, nil
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		return s, errors.New("web.tls_cert and web.tls_key go together")
	}
	if s.TLSCert == "" {
		s.TLSCert, s.TLSKey = adminCert, adminKey
	}
	if s.PreAuthTimeout < 0 || s.ReadHeaderTimeout < 0 || s.MaxMessage < 0 ||
		s.MaxConns < 0 || s.MaxUnauthConns < 0 || s.MaxUnauthConnsPerSource < 0 {
		return s, errors.New("web: timeouts, sizes and caps must not be negative")
	}
	if s.PreAuthTimeout == 0 {
		s.PreAuthTimeout = DefaultPreAuthTimeout
	}
	if s.ReadHeaderTimeout == 0 {
		s.ReadHeaderTimeout = 10 * time.Second
	}
	if s.MaxMessage == 0 {
		s.MaxMessage = DefaultMaxMessage
	}
	if s.MaxMessage < maxFirstMessage {
		return s, fmt.Errorf("web.max_message must be at least %d", maxFirstMessage)
	}
	if s.TicketTTL == 0 {
		s.TicketTTL = MaxTicketTTL
	}
	if s.TicketTTL < time.Second || s.TicketTTL > MaxTicketTTL {
		return s, fmt.Errorf("web.ticket_ttl must be from 1s to %v", MaxTicketTTL)
	}
	if s.PublicURL != "" {
		if _, err := ParsePublicURL(s.PublicURL); err != nil {
			return s, err
		}
	}
	if _, err := s.Proxies(); err != nil {
		return s, err
	}
	if _, err := policy(s.FrameAncestors); err != nil {
		return s, err
	}
	return s, nil
}

// Proxies parses TrustedProxies.
func (s Settings) Proxies() (realip.Trusted, error) {
	t, err := realip.ParseTrusted(s.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("web.trusted_proxies: %w", err)
	}
	return t, nil
}
