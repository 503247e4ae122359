package daemon

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/admin"
	"github.com/obmd/obmd/bastion/cluster"
	"github.com/obmd/obmd/bastion/internal/realip"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys/sshcert"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmi"
	"github.com/obmd/obmd/sol/ipmitool"
	"github.com/obmd/obmd/sol/redfish"
	"github.com/obmd/obmd/sol/sshconsole"
)

// Config is everything an operator can set. The YAML names are the config
// file's keys; cmd/obmd maps OBMD_* variables and flags onto the same fields.
type Config struct {
	// SSHAddr is the SSH front door (default 127.0.0.1:2222).
	SSHAddr string `yaml:"ssh_addr"`
	// AdminAddr is the admin HTTP API (default 127.0.0.1:8080).
	AdminAddr string `yaml:"admin_addr"`
	// StateDir holds the host key, the sealing key, the generated admin
	// token and the default SQLite database (default ./obmd-state).
	StateDir string `yaml:"state_dir"`
	// DB is a SQLite path (or file: URI), mysql://user:pass@tcp(host:port)/db
	// or postgres://user:pass@host:port/db (default StateDir/obmd.db).
	DB string `yaml:"db"`
	// AdminToken, if set, is the admin secret; otherwise it is read from
	// StateDir/admin-token, generated there on first start.
	AdminToken string `yaml:"admin_token"`
	// HostKey is the SSH host key file (default StateDir/ssh_host_ed25519_key);
	// replicas share it.
	HostKey string `yaml:"host_key"`
	// SealKey is the key that seals BMC passwords at rest (default
	// StateDir/seal.key); replicas share it.
	SealKey string `yaml:"seal_key"`
	// TLSCert and TLSKey serve the admin API over HTTPS when both are set.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// InsecureHTTP allows plain HTTP on an admin address that is not
	// loopback (tokens would cross the network in clear).
	InsecureHTTP bool `yaml:"insecure_http"`
	// AdminReadHeaderTimeout bounds reading a request's headers (default
	// 10 s), AdminReadTimeout reading the whole request, body included
	// (default 30 s; a response, such as a console stream, is not bounded),
	// and AdminIdleTimeout a keep-alive connection between requests
	// (default 2 min).
	AdminReadHeaderTimeout time.Duration `yaml:"admin_read_header_timeout"`
	AdminReadTimeout       time.Duration `yaml:"admin_read_timeout"`
	AdminIdleTimeout       time.Duration `yaml:"admin_idle_timeout"`
	// AdminMaxConns bounds open admin connections; AdminMaxUnauthConns
	// those that have not yet made a request with a valid credential, and
	// AdminMaxUnauthConnsPerSource those from one address. A connection
	// over a cap pushes out the oldest unauthenticated one (conns.go). Zero:
	// sized from the open-file limit at start.
	AdminMaxConns                int `yaml:"admin_max_conns"`
	AdminMaxUnauthConns          int `yaml:"admin_max_unauth_conns"`
	AdminMaxUnauthConnsPerSource int `yaml:"admin_max_unauth_conns_per_source"`
	// AdminMaxTokenConnsPerSource bounds the connections of one address
	// whose node-token request has started (a tenant's, or HIL's console
	// streams); they may be closed to make room for any newcomer, the
	// admin credential's never (zero: half of admin_max_conns).
	AdminMaxTokenConnsPerSource int `yaml:"admin_max_token_conns_per_source"`
	// AdminProxyProtocolFrom lists the TCP load balancers (addresses or
	// networks) that send a PROXY protocol header (v1 or v2) on the admin
	// port, before TLS: their connections must start with one, which names
	// the real client.
	AdminProxyProtocolFrom []string `yaml:"admin_proxy_protocol_from"`

	// Escape is the console escape prefix, two bytes (default Ctrl-E c).
	Escape string `yaml:"escape"`
	// Scrollback, Linger, ViewerQueue and DropSlowViewers are
	// console.scrollback, .linger, .viewer_queue and .drop_slow_viewers,
	// under the names they had before the console section (still read;
	// setting both names differently is an error).
	Scrollback      int           `yaml:"scrollback"`
	Linger          time.Duration `yaml:"linger"`
	ViewerQueue     int           `yaml:"viewer_queue"`
	DropSlowViewers bool          `yaml:"drop_slow_viewers"`
	// MaxSessionsPerNode, MaxSessionsPerSource and MaxHTTPSessionsPerSource
	// are sessions.max_per_node, .max_per_source and .max_per_source_http,
	// under their names from before the sessions section (as above).
	MaxSessionsPerNode       int `yaml:"max_sessions_per_node"`
	MaxSessionsPerSource     int `yaml:"max_sessions_per_source"`
	MaxHTTPSessionsPerSource int `yaml:"max_http_sessions_per_source"`
	// MaxConnsPerSource bounds open SSH connections, authenticated or not,
	// from one address (an IPv6 /64 counts as one; default 64; negative:
	// no limit); at the limit a new one displaces the address's oldest
	// unauthenticated connection.
	MaxConnsPerSource int `yaml:"max_conns_per_source"`
	// LoginGraceTime bounds the time an SSH connection may take to
	// authenticate, in every phase before it (default 30 s).
	LoginGraceTime time.Duration `yaml:"login_grace_time"`
	// MaxConns bounds open SSH connections, authenticated or not
	// (default: a quarter of the open-file limit, at most 65,536);
	// MaxUnauthenticated those that have not authenticated (default: an
	// eighth of it, at most half of MaxConns and at most 1024),
	// MaxUnauthenticatedPerSource those of one address (default 32); when
	// full, a new connection displaces the oldest unauthenticated one of the
	// address holding the most (negative: no limit).
	MaxConns                    int `yaml:"max_conns"`
	MaxUnauthenticated          int `yaml:"max_unauthenticated"`
	MaxUnauthenticatedPerSource int `yaml:"max_unauthenticated_per_source"`
	// ProxyProtocolFrom lists the load balancers (addresses or networks)
	// that send a PROXY protocol header (v1 or v2) on the SSH port: their
	// connections must start with one, which names the real client.
	ProxyProtocolFrom []string `yaml:"proxy_protocol_from"`
	// TrustedProxies lists the reverse proxies (addresses or networks)
	// whose X-Forwarded-For the admin API believes.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// AuthLimits bound guessing of node tokens and of the admin token; SSH
	// and the admin API share one budget per source.
	AuthLimits authlimit.Config `yaml:"auth_limits"`
	// SSHLegacyAlgorithms also offers the SHA-1 algorithms old clients may
	// need (diffie-hellman-group14-sha1, hmac-sha1, ssh-rsa signatures);
	// off, obmd offers what a current OpenSSH server does, without SHA-1.
	SSHLegacyAlgorithms bool `yaml:"ssh_legacy_algorithms"`
	// FailDelay is the least time a failed token takes (default 300 ms).
	FailDelay time.Duration `yaml:"fail_delay"`
	// PowerTimeout bounds one BMC call (default 20 s).
	PowerTimeout time.Duration `yaml:"power_timeout"`
	// EpochPoll is how often access changes made by other replicas are
	// looked for (default 1 s).
	EpochPoll time.Duration `yaml:"epoch_poll"`
	// ShutdownTimeout bounds a graceful stop (default 10 s).
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// ChangeTimeout bounds an access change made through the admin API:
	// storing it, cutting the sessions it ends, and every other replica's
	// acknowledgement (default 5 s). It also bounds one poll of the
	// database for changes and each login's lookups.
	ChangeTimeout time.Duration `yaml:"change_timeout"`

	// Several replicas on one MySQL/MariaDB or PostgreSQL (docs/replicas.md). ReplicaID
	// names this replica (default: host name and a random suffix, new at
	// each start). PeerAddr is where this replica listens for the others
	// (empty: single-replica mode, no leases); PeerAdvertise is the address
	// they dial (default PeerAddr's bound address). Replicas authenticate
	// each other with the shared host key. LeaseTTL is how long a dead
	// replica's console links and power operations block the others
	// (default 6 s).
	ReplicaID     string        `yaml:"replica_id"`
	PeerAddr      string        `yaml:"peer_addr"`
	PeerAdvertise string        `yaml:"peer_advertise"`
	LeaseTTL      time.Duration `yaml:"lease_ttl"`
	// DBGrace is how long live sessions outlast the loss of the database
	// (new logins are refused at once): after it they are cut, as access
	// changes can no longer reach this replica (default 30 s).
	DBGrace time.Duration `yaml:"db_grace"`
	// DBOptions are passed to db.Open (tests only: no file key or
	// variable sets them), e.g. db.WithClockSkew for a replica whose clock
	// is wrong.
	DBOptions []db.Option `yaml:"-"`

	// ConsoleCapture is console.capture under a top-level name: the
	// capture of nodes whose registration sets none ("always": their link
	// is held open with nobody attached and everything they print is
	// recorded; "attached": open while someone watches; default: always
	// for ipmi and ipmitool nodes, attached for the others).
	ConsoleCapture string `yaml:"console_capture"`
	// HistoryBytes bounds the console history kept per tenancy (default
	// 1 MiB, at least 64 KiB): the oldest output goes first.
	HistoryBytes int `yaml:"history_bytes"`
	// HistoryRetention keeps the history of an ended tenancy (an access
	// change ends it) this long, for admins only (default 0: deleted at
	// once).
	HistoryRetention time.Duration `yaml:"history_retention"`

	// Each component's own settings, as its package documents them (keys
	// and defaults): the console hub, the session registry, the cluster's
	// tunables, and the BMC drivers (a Redfish node's serial console uses
	// the ipmi section).
	Console  sol.Config      `yaml:"console"`
	Sessions sessions.Config `yaml:"sessions"`
	Cluster  cluster.Config  `yaml:"cluster"`
	IPMI     ipmi.Config     `yaml:"ipmi"`
	IPMITool ipmitool.Config `yaml:"ipmitool"`
	Redfish  redfish.Config  `yaml:"redfish"`
	// SSHConsole tunes the consoles over the BMCs' SSH services.
	SSHConsole sshconsole.Config `yaml:"ssh_console"`
	// IPMIOptions is what both IPMI drivers share (and a Redfish node's
	// IPMI console): the cipher suites tried for a node that pins none,
	// and what to do when SOL is off on a BMC.
	IPMIOptions sol.IPMIOptions `yaml:"ipmi_options"`
	// Certs configures certificate logins (OpenSSH user certificates from
	// the CAs registered through the admin API).
	Certs CertsConfig `yaml:"certs"`
	// Audit is the audit section: retention of audit rows and access
	// changes, aggregation of repeats, export to a SIEM (db.AuditConfig).
	Audit db.AuditConfig `yaml:"audit"`

	// Demo registers node "demo" on the built-in simulator and prints a
	// fresh token for it at start (make run).
	Demo bool `yaml:"demo"`
	// Version is shown by `version` and logged at start.
	Version string `yaml:"-"`
}

// CertsConfig is the certs section: how certificates are judged
// (keys/sshcert) and how long revocations are kept.
type CertsConfig struct {
	// Skew is the clock difference tolerated between a CA and obmd at the
	// start of a certificate's validity (default 60 s, at most 10 min): it
	// is accepted from valid_after minus the skew. Its end is strict, as
	// in OpenSSH: a session ends at valid_before.
	Skew time.Duration `yaml:"skew"`
	// LegacyAlgorithms accepts CA signatures made with SHA-1 ("ssh-rsa"),
	// which OpenSSH refuses by default since 8.2.
	LegacyAlgorithms bool `yaml:"legacy_algorithms"`
	// PurgeInterval is how often revocations whose certificates have
	// expired (plus the skew and a margin) are deleted (default 1 h).
	PurgeInterval time.Duration `yaml:"purge_interval"`
}

// DemoNode is the label of the demo node.
const DemoNode = "demo"

// DefaultDB is the SQLite database used when none is configured.
func DefaultDB(stateDir string) string { return filepath.Join(stateDir, "obmd.db") }

// WithDefaults returns c with every unset field at its default, or an error
// for a contradictory configuration.
func (c Config) WithDefaults() (Config, error) {
	err := c.setDefaults()
	return c, err
}

func (c *Config) setDefaults() error {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.SSHAddr, "127.0.0.1:2222")
	def(&c.AdminAddr, "127.0.0.1:8080")
	def(&c.StateDir, "./obmd-state")
	def(&c.DB, DefaultDB(c.StateDir))
	def(&c.HostKey, filepath.Join(c.StateDir, "ssh_host_ed25519_key"))
	def(&c.SealKey, filepath.Join(c.StateDir, "seal.key"))
	def(&c.Version, "dev")
	if err := c.aliases(); err != nil {
		return err
	}
	if err := c.doorDefaults(); err != nil {
		return err
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.ChangeTimeout < 0 {
		return errors.New("change_timeout must not be negative")
	}
	if c.ChangeTimeout == 0 {
		c.ChangeTimeout = access.DefaultChangeTimeout // shared by several components
	}
	if err := c.adminDefaults(); err != nil {
		return err
	}
	if err := c.replicaDefaults(); err != nil {
		return err
	}
	if c.Certs.Skew < 0 || c.Certs.Skew > sshcert.MaxSkew {
		return fmt.Errorf("certs.skew must be from 0 to %v", sshcert.MaxSkew)
	}
	if c.Certs.PurgeInterval <= 0 {
		c.Certs.PurgeInterval = time.Hour
	}
	var err error
	if c.Audit, err = c.Audit.WithDefaults(); err != nil {
		return err
	}
	if c.SSHConsole, err = c.SSHConsole.WithDefaults(); err != nil {
		return err
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("tls_cert and tls_key go together")
	}
	if c.TLSCert == "" && !c.InsecureHTTP && !loopback(c.AdminAddr) {
		return fmt.Errorf("admin address %s is not loopback: configure tls_cert/tls_key, or set insecure_http to send tokens in clear", c.AdminAddr)
	}
	return nil
}

// doorDefaults checks what guards the doors: the admin token's strength,
// the pre-authentication bounds, and the lists of balancers and proxies
// (part of setDefaults).
func (c *Config) doorDefaults() error {
	if c.AdminToken != "" && len(c.AdminToken) < admin.MinAdminTokenLen {
		return fmt.Errorf("admin_token is %d characters; it must have at least %d (e.g. openssl rand -base64 24)",
			len(c.AdminToken), admin.MinAdminTokenLen)
	}
	if c.LoginGraceTime < 0 {
		return errors.New("login_grace_time must not be negative")
	}
	_, _, err := c.balancers()
	if err == nil {
		_, err = c.adminBalancers()
	}
	return err
}

// balancers parses ProxyProtocolFrom and TrustedProxies.
func (c *Config) balancers() (proxyFrom, trustedProxies realip.Trusted, err error) {
	if proxyFrom, err = realip.ParseTrusted(c.ProxyProtocolFrom); err != nil {
		return nil, nil, fmt.Errorf("proxy_protocol_from: %w", err)
	}
	if trustedProxies, err = realip.ParseTrusted(c.TrustedProxies); err != nil {
		return nil, nil, fmt.Errorf("trusted_proxies: %w", err)
	}
	return proxyFrom, trustedProxies, nil
}

// adminBalancers parses AdminProxyProtocolFrom.
func (c *Config) adminBalancers() (realip.Trusted, error) {
	t, err := realip.ParseTrusted(c.AdminProxyProtocolFrom)
	if err != nil {
		return nil, fmt.Errorf("admin_proxy_protocol_from: %w", err)
	}
	return t, nil
}

// loopback reports whether addr's host is a loopback address or localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// aliases carries the settings that moved into a section from their old
// top-level names (part of setDefaults).
func (c *Config) aliases() error {
	return errors.Join(
		alias(&c.Console.Scrollback, c.Scrollback, "scrollback", "console.scrollback"),
		alias(&c.Console.Linger, c.Linger, "linger", "console.linger"),
		alias(&c.Console.QueueBytes, c.ViewerQueue, "viewer_queue", "console.viewer_queue"),
		alias(&c.Console.DropSlow, c.DropSlowViewers, "drop_slow_viewers", "console.drop_slow_viewers"),
		alias(&c.Console.Capture, c.ConsoleCapture, "console_capture", "console.capture"),
		alias(&c.Sessions.MaxPerNode, c.MaxSessionsPerNode, "max_sessions_per_node", "sessions.max_per_node"),
		alias(&c.Sessions.MaxPerSource, c.MaxSessionsPerSource, "max_sessions_per_source", "sessions.max_per_source"),
		alias(&c.Sessions.MaxPerSourceHTTP, c.MaxHTTPSessionsPerSource, "max_http_sessions_per_source",
			"sessions.max_per_source_http"))
}

// alias sets *section from old, the same setting under its old name, unless
// only the section's is set; both set differently is an error.
func alias[T comparable](section *T, old T, oldName, name string) error {
	var zero T
	switch {
	case old == zero:
	case *section == zero:
		*section = old
	case *section != old:
		return fmt.Errorf("%s and %s are one setting; set it once", oldName, name)
	}
	return nil
}
