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
	"github.com/obmd/obmd/bastion/sshdoor"
	"github.com/obmd/obmd/bastion/webdoor"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys/sshcert"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/ipmi"
	"github.com/obmd/obmd/sol/ipmitool"
	"github.com/obmd/obmd/sol/redfish"
	"github.com/obmd/obmd/sol/sshconsole"
)

// Config is everything an operator can set, one section per component
// under the names the component uses. The YAML names are the config file's
// keys (section.key); cmd/obmd maps OBMD_SECTION_KEY variables and its
// flags onto the same fields. Each section's defaults sit beside its type;
// WithDefaults applies the daemon's own sections' and checks the others,
// whose constructors apply theirs.
type Config struct {
	// Daemon is obmd's own: where it keeps its state, how long it takes
	// to stop, the demo.
	Daemon DaemonConfig `yaml:"daemon"`
	// SSH is the SSH front door (bastion/sshdoor).
	SSH SSHConfig `yaml:"ssh"`
	// Admin is the admin HTTP API (bastion/admin).
	Admin AdminConfig `yaml:"admin"`
	// DB is the database: where it is, the key sealing BMC passwords in
	// it, and how long sessions outlast its loss.
	DB DBConfig `yaml:"db"`
	// Access bounds access changes and paces the look for changes made by
	// other replicas (bastion/access).
	Access AccessConfig `yaml:"access"`
	// Commands bounds the BMC calls commands make (commands.Runner).
	Commands CommandsConfig `yaml:"commands"`
	// History is the console history kept per tenancy (sol/history).
	History HistoryConfig `yaml:"history"`
	// Replica names this replica and says where the others reach it
	// (docs/replicas.md); Cluster tunes the leases and the peer links.
	Replica ReplicaConfig  `yaml:"replica"`
	Cluster cluster.Config `yaml:"cluster"`
	// AuthLimits bound guessing of node tokens and of the admin token; SSH
	// and the admin API share one budget per source.
	AuthLimits authlimit.Config `yaml:"auth_limits"`
	// The console hub, the session registry, and the BMC drivers (a
	// Redfish node's serial console uses the ipmi section).
	Console  sol.Config      `yaml:"console"`
	Sessions sessions.Config `yaml:"sessions"`
	IPMI     ipmi.Config     `yaml:"ipmi"`
	IPMITool ipmitool.Config `yaml:"ipmitool"`
	Redfish  redfish.Config  `yaml:"redfish"`
	// SSHConsole tunes the consoles over the BMCs' SSH services.
	SSHConsole sshconsole.Config `yaml:"ssh_console"`
	// IPMIOptions is what both IPMI drivers share (and a Redfish node's
	// IPMI console): the cipher suites tried for a node that pins none,
	// and what to do when SOL is off on a BMC.
	IPMIOptions sol.IPMIOptions `yaml:"ipmi_options"`
	// Web is the web console: its own listener (off unless web.addr is
	// set), TLS, framing and bounds (webdoor.Settings).
	Web webdoor.Settings `yaml:"web"`
	// Certs configures certificate logins (OpenSSH user certificates from
	// the CAs registered through the admin API).
	Certs CertsConfig `yaml:"certs"`
	// Audit is the audit section: retention of audit rows and access
	// changes, aggregation of repeats, export to a SIEM (db.AuditConfig).
	Audit db.AuditConfig `yaml:"audit"`

	// Version is shown by `version` and logged at start (the build's, not
	// a setting).
	Version string `yaml:"-"`
}

// DaemonConfig is the daemon section: obmd's own settings.
type DaemonConfig struct {
	// StateDir holds the host key, the sealing key, the generated admin
	// token and the default SQLite database (default ./obmd-state).
	StateDir string `yaml:"state_dir"`
	// ShutdownTimeout bounds a graceful stop (default 10 s).
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Demo registers node "demo" on the built-in simulator and prints a
	// fresh token for it at start (make run), and turns the web console on
	// at DemoWebAddr unless web.addr is set.
	Demo bool `yaml:"demo"`
}

func (c *DaemonConfig) setDefaults() error {
	if c.StateDir == "" {
		c.StateDir = "./obmd-state"
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	return nil
}

// SSHConfig is the ssh section: the SSH front door (sshdoor.Config's
// settings, under its names, and where it listens).
type SSHConfig struct {
	// Addr is where it listens (default 127.0.0.1:2222).
	Addr string `yaml:"addr"`
	// HostKey is the SSH host key file (default STATE_DIR/ssh_host_ed25519_key);
	// replicas share it.
	HostKey string `yaml:"host_key"`
	// Escape is the console escape prefix, two bytes (default Ctrl-E c).
	Escape string `yaml:"escape"`
	// FailDelay is the least time a failed token takes (default 300 ms).
	FailDelay time.Duration `yaml:"fail_delay"`
	// LoginGraceTime bounds the time a connection may take to
	// authenticate, in every phase before it (default 30 s).
	LoginGraceTime time.Duration `yaml:"login_grace_time"`
	// MaxConns bounds open connections, authenticated or not (default: a
	// quarter of the open-file limit, at most 65,536); MaxUnauthenticated
	// those that have not authenticated (default: an eighth of it, at most
	// half of MaxConns and at most 1024), MaxUnauthenticatedPerSource those
	// of one address (default 32, at most MaxUnauthenticated); when full,
	// a new connection displaces the oldest unauthenticated one of the
	// address holding the most (negative: no limit).
	MaxConns                    int `yaml:"max_conns"`
	MaxUnauthenticated          int `yaml:"max_unauthenticated"`
	MaxUnauthenticatedPerSource int `yaml:"max_unauthenticated_per_source"`
	// MaxConnsPerSource bounds open connections, authenticated or not,
	// from one address (an IPv6 /64 counts as one; default 64; negative:
	// no limit); at the limit a new one displaces the address's oldest
	// unauthenticated connection.
	MaxConnsPerSource int `yaml:"max_conns_per_source"`
	// ProxyProtocolFrom lists the load balancers (addresses or networks)
	// that send a PROXY protocol header (v1 or v2) on the SSH port: their
	// connections must start with one, which names the real client.
	ProxyProtocolFrom []string `yaml:"proxy_protocol_from"`
	// LegacyAlgorithms also offers the SHA-1 algorithms old clients may
	// need (diffie-hellman-group14-sha1, hmac-sha1, ssh-rsa signatures);
	// off, obmd offers what a current OpenSSH server does, without SHA-1.
	LegacyAlgorithms bool `yaml:"legacy_algorithms"`
}

func (c *SSHConfig) setDefaults(stateDir string) error {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:2222"
	}
	if c.HostKey == "" {
		c.HostKey = filepath.Join(stateDir, "ssh_host_ed25519_key")
	}
	if c.Escape == "" {
		c.Escape = sshdoor.DefaultEscape
	}
	if c.FailDelay <= 0 {
		c.FailDelay = sshdoor.DefaultFailDelay
	}
	if c.LoginGraceTime < 0 {
		return errors.New("ssh.login_grace_time must not be negative")
	}
	if c.LoginGraceTime == 0 {
		c.LoginGraceTime = sshdoor.DefaultLoginGraceTime
	}
	if c.MaxConnsPerSource == 0 {
		c.MaxConnsPerSource = sshdoor.DefaultMaxConnsPerSource
	}
	_, err := c.balancers()
	return err
}

// balancers parses ProxyProtocolFrom.
func (c *SSHConfig) balancers() (realip.Trusted, error) {
	t, err := realip.ParseTrusted(c.ProxyProtocolFrom)
	if err != nil {
		return nil, fmt.Errorf("ssh.proxy_protocol_from: %w", err)
	}
	return t, nil
}

// AdminConfig is the admin section: the admin HTTP API and its port.
type AdminConfig struct {
	// Addr is where it listens (default 127.0.0.1:8080).
	Addr string `yaml:"addr"`
	// Token, if set, is the admin secret; otherwise it is read from
	// STATE_DIR/admin-token, generated there on first start.
	Token string `yaml:"token"`
	// TLSCert and TLSKey serve the admin API over HTTPS when both are set.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// InsecureHTTP allows plain HTTP on an address that is not loopback
	// (tokens would cross the network in clear).
	InsecureHTTP bool `yaml:"insecure_http"`
	// ReadHeaderTimeout bounds reading a request's headers (default 10 s),
	// ReadTimeout reading the whole request, body included (default 30 s;
	// a response, such as a console stream, is not bounded), and
	// IdleTimeout a keep-alive connection between requests (default 2 min).
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	// MaxConns bounds open connections; MaxUnauthConns those that have not
	// yet made a request with a valid credential, and
	// MaxUnauthConnsPerSource those from one address. A connection over a
	// cap pushes out the oldest unauthenticated one (conns.go). Zero: sized
	// from the open-file limit at start.
	MaxConns                int `yaml:"max_conns"`
	MaxUnauthConns          int `yaml:"max_unauth_conns"`
	MaxUnauthConnsPerSource int `yaml:"max_unauth_conns_per_source"`
	// MaxTokenConnsPerSource bounds the connections of one address whose
	// node-token request has started (a tenant's, or HIL's console
	// streams); they may be closed to make room for any newcomer, the
	// admin credential's never (zero: half of MaxConns).
	MaxTokenConnsPerSource int `yaml:"max_token_conns_per_source"`
	// ProxyProtocolFrom lists the TCP load balancers (addresses or
	// networks) that send a PROXY protocol header (v1 or v2) before TLS:
	// their connections must start with one, which names the real client.
	ProxyProtocolFrom []string `yaml:"proxy_protocol_from"`
	// TrustedProxies lists the reverse proxies (addresses or networks)
	// whose X-Forwarded-For the API believes.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// FailDelay is the least time a failed node-token check takes (default
	// 300 ms, the SSH door's).
	FailDelay time.Duration `yaml:"fail_delay"`
}

func (c *AdminConfig) setDefaults() error {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
	}
	if c.Token != "" && len(c.Token) < admin.MinAdminTokenLen {
		return fmt.Errorf("admin.token is %d characters; it must have at least %d (e.g. openssl rand -base64 24)",
			len(c.Token), admin.MinAdminTokenLen)
	}
	for _, d := range []time.Duration{c.ReadHeaderTimeout, c.ReadTimeout, c.IdleTimeout} {
		if d < 0 {
			return errors.New("admin timeouts must not be negative")
		}
	}
	if c.MaxConns < 0 || c.MaxUnauthConns < 0 || c.MaxUnauthConnsPerSource < 0 || c.MaxTokenConnsPerSource < 0 {
		return errors.New("admin connection caps must not be negative (0: sized from the open-file limit)")
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.FailDelay <= 0 {
		c.FailDelay = admin.DefaultFailDelay
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("admin.tls_cert and admin.tls_key go together")
	}
	if c.TLSCert == "" && !c.InsecureHTTP && !loopback(c.Addr) {
		return fmt.Errorf("admin address %s is not loopback: configure admin.tls_cert/admin.tls_key, or set admin.insecure_http to send tokens in clear", c.Addr)
	}
	if _, err := c.balancers(); err != nil {
		return err
	}
	_, err := c.trustedProxies()
	return err
}

// balancers parses ProxyProtocolFrom.
func (c *AdminConfig) balancers() (realip.Trusted, error) {
	t, err := realip.ParseTrusted(c.ProxyProtocolFrom)
	if err != nil {
		return nil, fmt.Errorf("admin.proxy_protocol_from: %w", err)
	}
	return t, nil
}

// trustedProxies parses TrustedProxies.
func (c *AdminConfig) trustedProxies() (realip.Trusted, error) {
	t, err := realip.ParseTrusted(c.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("admin.trusted_proxies: %w", err)
	}
	return t, nil
}

// DBConfig is the db section.
type DBConfig struct {
	// DSN is a SQLite path (or file: URI), mysql://user:pass@tcp(host:port)/db
	// or postgres://user:pass@host:port/db (default STATE_DIR/obmd.db).
	DSN string `yaml:"dsn"`
	// SealKey is the key that seals BMC passwords in the database (default
	// STATE_DIR/seal.key); replicas share it.
	SealKey string `yaml:"seal_key"`
	// Grace is how long live sessions outlast the loss of the database
	// (new logins are refused at once): after it they are cut, as access
	// changes can no longer reach this replica (default 30 s).
	Grace time.Duration `yaml:"grace"`
}

func (c *DBConfig) setDefaults(stateDir string) error {
	if c.DSN == "" {
		c.DSN = DefaultDB(stateDir)
	}
	if c.SealKey == "" {
		c.SealKey = filepath.Join(stateDir, "seal.key")
	}
	if c.Grace < 0 {
		return errors.New("db.grace must not be negative")
	}
	if c.Grace == 0 {
		c.Grace = access.DefaultDBGrace
	}
	return nil
}

// AccessConfig is the access section: access changes (access.Revoker) and
// the look for those made by other replicas (access.Watcher).
type AccessConfig struct {
	// ChangeTimeout bounds an access change made through the admin API:
	// storing it, cutting the sessions it ends, and every other replica's
	// acknowledgement (default 5 s). It also bounds one poll of the
	// database for changes and each login's lookups.
	ChangeTimeout time.Duration `yaml:"change_timeout"`
	// Poll is how often access changes made by other replicas are looked
	// for (default 1 s).
	Poll time.Duration `yaml:"poll"`
}

func (c *AccessConfig) setDefaults() error {
	if c.ChangeTimeout < 0 {
		return errors.New("access.change_timeout must not be negative")
	}
	if c.ChangeTimeout == 0 {
		c.ChangeTimeout = access.DefaultChangeTimeout
	}
	if c.Poll <= 0 {
		c.Poll = access.DefaultPoll
	}
	return nil
}

// CommandsConfig is the commands section (commands.Runner).
type CommandsConfig struct {
	// Timeout bounds one BMC call (default 20 s).
	Timeout time.Duration `yaml:"timeout"`
}

func (c *CommandsConfig) setDefaults() error {
	if c.Timeout <= 0 {
		c.Timeout = commands.DefaultTimeout
	}
	return nil
}

// HistoryConfig is the history section (sol/history's Recorder).
type HistoryConfig struct {
	// Bytes bounds the console history kept per tenancy (default 1 MiB,
	// at least 64 KiB): the oldest output goes first.
	Bytes int `yaml:"bytes"`
	// Retention keeps the history of an ended tenancy (an access change
	// ends it) this long, for admins only (default 0: deleted at once).
	Retention time.Duration `yaml:"retention"`
}

func (c *HistoryConfig) setDefaults() error {
	if c.Bytes < 0 || c.Retention < 0 {
		return errors.New("history.bytes and history.retention must not be negative")
	}
	if c.Bytes == 0 {
		c.Bytes = history.DefaultHistoryBytes
	}
	return nil
}

// ReplicaConfig is the replica section: this replica's name and where the
// other replicas reach it (docs/replicas.md). Replicas authenticate each
// other with the shared host key.
type ReplicaConfig struct {
	// ID names this replica (default: host name and a random suffix, new
	// at each start).
	ID string `yaml:"id"`
	// PeerAddr is where this replica listens for the others (empty:
	// single-replica mode, no leases); PeerAdvertise is the address they
	// dial (default PeerAddr's bound address).
	PeerAddr      string `yaml:"peer_addr"`
	PeerAdvertise string `yaml:"peer_advertise"`
}

func (c *ReplicaConfig) setDefaults() error {
	if c.ID == "" {
		c.ID = defaultReplicaID()
	}
	if c.PeerAdvertise != "" && c.PeerAddr == "" {
		return errors.New("replica.peer_advertise needs replica.peer_addr")
	}
	if c.PeerAddr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.PeerAddr)
	if err != nil {
		return fmt.Errorf("replica.peer_addr: %w", err)
	}
	if c.PeerAdvertise == "" {
		// The others dial the bound address: it must be one they can.
		if everyAddress(host) {
			return fmt.Errorf("replica.peer_addr %s listens on every address: set replica.peer_advertise to the address other replicas dial", c.PeerAddr)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(c.PeerAdvertise)
	if err != nil {
		return fmt.Errorf("replica.peer_advertise: %w", err)
	}
	if everyAddress(host) || port == "" || port == "0" {
		return fmt.Errorf("replica.peer_advertise %s: want the host and port other replicas dial", c.PeerAdvertise)
	}
	return nil
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

func (c *CertsConfig) setDefaults() error {
	if c.Skew < 0 || c.Skew > sshcert.MaxSkew {
		return fmt.Errorf("certs.skew must be from 0 to %v", sshcert.MaxSkew)
	}
	if c.Skew == 0 {
		c.Skew = sshcert.DefaultSkew
	}
	if c.PurgeInterval <= 0 {
		c.PurgeInterval = time.Hour
	}
	return nil
}

// DemoNode is the label of the demo node.
const DemoNode = "demo"

// DemoWebAddr is where the demo's web console listens.
const DemoWebAddr = "127.0.0.1:8081"

// DefaultDB is the SQLite database used when none is configured.
func DefaultDB(stateDir string) string { return filepath.Join(stateDir, "obmd.db") }

// WithDefaults returns c with the unset fields of the daemon's sections at
// their defaults, or an error for a setting obmd cannot use. The defaults
// are each section's (beside its type); those sized at start (connection
// caps from the open-file limit, the lease TTL on Galera) stay zero here,
// as do those the components' constructors apply (console, sessions,
// auth_limits, cluster, the drivers).
func (c Config) WithDefaults() (Config, error) {
	err := c.setDefaults()
	return c, err
}

func (c *Config) setDefaults() error {
	if c.Version == "" {
		c.Version = "dev"
	}
	if err := c.Daemon.setDefaults(); err != nil {
		return err
	}
	state := c.Daemon.StateDir
	var err error
	for _, set := range []func() error{
		func() error { return c.SSH.setDefaults(state) },
		c.Admin.setDefaults,
		func() error { return c.DB.setDefaults(state) },
		c.Access.setDefaults,
		c.Commands.setDefaults,
		c.History.setDefaults,
		c.Replica.setDefaults,
		c.Certs.setDefaults,
		func() error { c.Audit, err = c.Audit.WithDefaults(); return err },
		func() error { c.SSHConsole, err = c.SSHConsole.WithDefaults(); return err },
	} {
		if err := set(); err != nil {
			return err
		}
	}
	if c.Cluster.LeaseTTL < 0 {
		return errors.New("cluster.lease_ttl must not be negative")
	}
	if c.Daemon.Demo && c.Web.Addr == "" {
		c.Web.Addr = DemoWebAddr
	}
	if c.Web, err = c.Web.WithDefaults(c.Admin.TLSCert, c.Admin.TLSKey); err != nil {
		return err
	}
	if c.Web.Addr != "" && c.Web.TLSCert == "" && !c.Web.InsecureHTTP && !loopback(c.Web.Addr) {
		return fmt.Errorf("web address %s is not loopback: configure web.tls_cert/web.tls_key (or admin.tls_cert/admin.tls_key), or set web.insecure_http to send tokens in clear", c.Web.Addr)
	}
	// The console hub, the guessing limiter and the drivers take their
	// sections' defaults in their constructors, but their settings are
	// checked here: one obmd cannot use stops it before it touches the
	// state directory or the database.
	if _, err := c.Console.WithDefaults(); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	if _, err := c.AuthLimits.WithDefaults(); err != nil {
		return fmt.Errorf("auth_limits: %w", err)
	}
	return checkDrivers(*c)
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
