package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/sirupsen/logrus"
)

// Dialect names returned by Store.Dialect.
const (
	DialectSQLite   = "sqlite"
	DialectMySQL    = "mysql"
	DialectPostgres = "postgres"
)

// Store is obmd's persistent state. Safe for concurrent use.
//
// On SQLite, w is a pool of exactly one connection, so writers queue in
// database/sql instead of racing for SQLite's write lock (no SQLITE_BUSY
// between goroutines of one process), and r is a pool of read-only
// connections that WAL lets read while a write is in progress. On MySQL
// and PostgreSQL, w and r are pools of their own on the same server.
type Store struct {
	dialect string
	w       *sql.DB
	r       *sql.DB
	log     logrus.FieldLogger
	now     func() time.Time // tests replace it
	skew    time.Duration    // WithClockSkew's: in now's wall time, not in durations (since)
	audit   auditQueue
	agg     *aggregator // nil: every event is a row (WithAuditAggregation)
	sink    AuditSink   // nil: none (WithAuditSink)
	stmts   stmtCache
	writes  writeWatch
	// conflicts counts writes run again after losing a conflict.
	conflicts atomic.Int64
	suspect   time.Duration   // on a Galera node, its evs.suspect_timeout (GaleraSuspect)
	exclusive bool            // no other process can write the database (Exclusive)
	pg        *pgx.ConnConfig // on PostgreSQL, what its pools connect with (ListenChanges)
}

// Open connects to dsn: a SQLite file path (or "file:..." URI),
// "mysql://user:pass@tcp(host:port)/dbname[?params]", or
// "postgres://user:pass@host:port/dbname[?params]" (or postgresql://).
// Any other URL scheme is refused, as are a MySQL or PostgreSQL DSN
// without its scheme (which would otherwise name a SQLite file). SQLite
// gets WAL and a busy timeout; MySQL gets parseTime. It pings but does not
// migrate.
//
// SQLite defaults (each kept if the DSN sets it): busy_timeout 5 s, foreign
// keys on, WAL, synchronous FULL (an acknowledged revocation survives a power
// loss), BEGIN IMMEDIATE, and the unix-excl VFS (the WAL index in memory:
// see openSQLite; other processes cannot open the file meanwhile). A new database file is created with mode 0600,
// and its directory, if missing, with mode 0700 (not for "file:" URIs,
// which SQLite opens itself).
// MySQL defaults: parseTime, a 5 s dial timeout, clientFoundRows, and on a
// Galera node wsrep_sync_wait=1 (see openMySQL). PostgreSQL defaults: a 5 s
// connect timeout, application_name obmd (see openPostgres). Errors never
// contain the DSN's password.
func Open(ctx context.Context, dsn string, log logrus.FieldLogger, opts ...Option) (*Store, error) {
	if log == nil {
		return nil, errors.New("open database: nil logger")
	}
	if strings.TrimSpace(dsn) == "" {
		return nil, errors.New("open database: empty DSN")
	}
	var (
		s   *Store
		err error
	)
	dialect, rest, err := dialectOf(dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	switch dialect {
	case DialectMySQL:
		s, err = openMySQL(ctx, rest, log)
	case DialectPostgres:
		s, err = openPostgres(ctx, rest, log)
	default:
		s, err = openSQLite(ctx, rest, log)
	}
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(s)
	}
	s.startAuditLater()
	s.startAggregator()
	return s, nil
}

// dsnForms is what Open takes, for its errors.
const dsnForms = "want a SQLite path, a file: URI, mysql://user:pass@tcp(host:port)/dbname " +
	"or postgres://user:pass@host:port/dbname"

// dialectOf says which engine dsn names, and what that engine's opener
// takes: a MySQL DSN without its scheme, a postgres:// URL (postgresql://
// and capitals accepted), or the SQLite path or URI itself. A URL of any
// other scheme is refused, as is a MySQL or PostgreSQL DSN that lacks its
// scheme (user:pass@host/dbname, or MySQL's @tcp(...)): taken as a SQLite
// path, it would create a file named after the server and log its
// password. Errors never quote more of dsn than a scheme.
func dialectOf(dsn string) (dialect, rest string, err error) {
	if scheme, after, ok := strings.Cut(dsn, "://"); ok {
		switch strings.ToLower(scheme) {
		case "mysql":
			return DialectMySQL, after, nil
		case "postgres", "postgresql":
			return DialectPostgres, "postgres://" + after, nil
		case "file":
			return DialectSQLite, dsn, nil
		}
		if validScheme(scheme) {
			return "", "", fmt.Errorf("unknown DSN scheme %q (%s)", scheme, dsnForms)
		}
		return "", "", fmt.Errorf("a DSN of an unknown form (%s)", dsnForms)
	}
	base, _, _ := strings.Cut(dsn, "?")
	if strings.Contains(base, "@tcp(") || strings.Contains(base, "@unix(") {
		return "", "", fmt.Errorf("a MySQL DSN needs the mysql:// scheme (%s)", dsnForms)
	}
	if serverURL(base) {
		return "", "", fmt.Errorf("a DSN of a database server needs its scheme (%s)", dsnForms)
	}
	if pgKeywords(dsn) {
		return "", "", fmt.Errorf("a PostgreSQL DSN must be a postgres:// URL, not keyword=value settings (%s)", dsnForms)
	}
	return DialectSQLite, dsn, nil
}

// serverURL reports whether a DSN without a scheme reads as a server's URL
// without it, user[:pass]@host[:port]/dbname or user:pass@host, rather than
// a relative SQLite path (a file may be named "obmd@site.db").
func serverURL(base string) bool {
	first, _, slash := strings.Cut(base, "/")
	user, _, at := strings.Cut(first, "@")
	return at && !strings.HasPrefix(base, "file:") && (slash || strings.Contains(user, ":"))
}

// validScheme reports whether s is a URL scheme (RFC 3986): a letter, then
// letters, digits, "+", "-" or ".", of a length worth quoting.
func validScheme(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range s {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// pgKeywords reports whether dsn reads as libpq keyword=value settings
// ("host=db user=obmd password=..."): words separated by spaces, each of
// them key=value, one of the keys one that names a server or a secret.
func pgKeywords(dsn string) bool {
	words := strings.Fields(dsn)
	named := false
	for _, w := range words {
		k, _, ok := strings.Cut(w, "=")
		if !ok {
			return false
		}
		switch k {
		case "host", "hostaddr", "port", "dbname", "user", "password", "sslmode":
			named = true
		}
	}
	return named
}

// openMySQL opens a pool on dsn. On a Galera node (wsrep_on) every
// connection also sets wsrep_sync_wait=1 unless the DSN sets it: Galera
// applies a write committed through another node a little later on this
// one, and without a causality wait a read here could still see the access
// that write took away (a rotated token would still log in). With it, each
// read (and the BEGIN of each transaction) first waits until this node has
// applied everything the cluster had committed when the read began. Writes
// need no wait: certification refuses one based on a row that changed
// elsewhere, and retryConflicts runs it again.
func openMySQL(ctx context.Context, dsn string, log logrus.FieldLogger) (*Store, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, redact(fmt.Errorf("parse mysql DSN: %w", err), passwordOf(dsn))
	}
	if cfg.DBName == "" {
		return nil, errors.New("parse mysql DSN: no database name (want mysql://user:pass@tcp(host:port)/dbname)")
	}
	cfg.ParseTime = true
	cfg.ClientFoundRows = true // RowsAffected counts matched rows, as on SQLite
	cfg.Logger = driverLog{log}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	pool, err := mysqlPool(ctx, cfg, serverReaders)
	if err != nil {
		return nil, err
	}
	galera, err := isGalera(ctx, pool)
	if err != nil {
		_ = pool.Close() // the query's error is the one worth returning
		return nil, redact(fmt.Errorf("open mysql %s/%s: %w", cfg.Addr, cfg.DBName, err), cfg.Passwd)
	}
	if _, set := cfg.Params[syncWait]; galera && !set {
		_ = pool.Close() // opened again with the wait on every connection
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params[syncWait] = "1"
		if pool, err = mysqlPool(ctx, cfg, serverReaders); err != nil {
			return nil, err
		}
	}
	// Writes have a pool of their own: in one pool a write (an access
	// change, a lease, a group commit) would wait for a connection behind
	// every read in flight, which a burst of logins makes hundreds, and
	// its time in progress (CheckWrites) would say the database is stuck.
	writers, err := mysqlPool(ctx, cfg, serverWriters)
	if err != nil {
		_ = pool.Close() // the writers' error is the one worth returning
		return nil, err
	}
	f := logrus.Fields{"dialect": DialectMySQL, "addr": cfg.Addr, "database": cfg.DBName}
	var suspect time.Duration
	if galera {
		if suspect, err = galeraSuspect(ctx, pool); err != nil {
			_ = pool.Close() // the query's error is the one worth returning
			_ = writers.Close()
			return nil, redact(fmt.Errorf("open mysql %s/%s: %w", cfg.Addr, cfg.DBName, err), cfg.Passwd)
		}
	}
	s := &Store{dialect: DialectMySQL, w: writers, r: pool, log: log, now: time.Now, suspect: suspect}
	if galera {
		f["galera"], f[syncWait], f["evs_suspect_timeout"] = true, cfg.Params[syncWait], suspect.String()
		f["stall_bound"] = s.StallBound().String()
	}
	log.WithFields(f).Info("db_open")
	return s, nil
}

// driverLog takes the MySQL driver's messages ("closing bad idle
// connection", a broken pipe when a server went away) into the store's
// log at Debug instead of bare lines on stderr: the failure they go with
// reaches the caller as an error anyway.
type driverLog struct{ log logrus.FieldLogger }

func (d driverLog) Print(v ...any) { d.log.WithField("detail", fmt.Sprint(v...)).Debug("mysql_driver") }

// syncWait is Galera's causality-wait variable (openMySQL).
const syncWait = "wsrep_sync_wait"

// The connections a MySQL or PostgreSQL store opens at most: for reads,
// and for writes (transactions and single-statement writes), in pools of
// their own.
const (
	serverReaders = 16
	serverWriters = 8
)

// serverPool is a pool of at most conns connections to a database server
// (MySQL, PostgreSQL), which it does not open yet.
func serverPool(c driver.Connector, conns int) *sql.DB {
	pool := sql.OpenDB(c)
	pool.SetMaxOpenConns(conns)
	pool.SetMaxIdleConns(conns / 2)
	// Below the idle timeouts of common proxies and of the servers' own
	// (MySQL's wait_timeout).
	pool.SetConnMaxLifetime(3 * time.Minute)
	pool.SetConnMaxIdleTime(time.Minute)
	return pool
}

// mysqlPool opens and pings a pool of at most conns connections on cfg.
func mysqlPool(ctx context.Context, cfg *mysql.Config, conns int) (*sql.DB, error) {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, redact(fmt.Errorf("configure mysql: %w", err), cfg.Passwd)
	}
	pool := serverPool(conn, conns)
	if err := pool.PingContext(ctx); err != nil {
		_ = pool.Close() // the ping error is the one worth returning
		return nil, redact(fmt.Errorf("ping mysql %s/%s: %w", cfg.Addr, cfg.DBName, err), cfg.Passwd)
	}
	return pool, nil
}

// isGalera reports whether the server is a Galera node with replication on.
// MySQL, and MariaDB built without wsrep, do not know the variable.
func isGalera(ctx context.Context, pool *sql.DB) (bool, error) {
	var on sql.NullInt64
	err := pool.QueryRowContext(ctx, `SELECT @@wsrep_on`).Scan(&on)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1193 { // ER_UNKNOWN_SYSTEM_VARIABLE
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ask for wsrep_on: %w", err)
	}
	return on.Valid && on.Int64 == 1, nil
}

// passwordOf extracts the password from a DSN that mysql.ParseDSN rejected,
// so that its error can still be redacted: user:pass@... up to the last '@'.
func passwordOf(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return ""
	}
	userinfo := dsn[:at]
	if i := strings.Index(userinfo, ":"); i >= 0 {
		return userinfo[i+1:]
	}
	return ""
}

// redact returns err, or a plain error with each of secrets masked if
// err's text contains one. The chain is dropped in that case: an
// unwrapped cause would still print the password.
func redact(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	for _, s := range secrets {
		if s != "" {
			text = strings.ReplaceAll(text, s, "xxxxx")
		}
	}
	if text == err.Error() {
		return err
	}
	return errors.New(text)
}

func openSQLite(ctx context.Context, dsn string, log logrus.FieldLogger) (*Store, error) {
	base, query, _ := strings.Cut(dsn, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("parse sqlite DSN: %w", err)
	}
	// The driver passes a plain path's query to SQLite only for its own
	// keys (vfs, _pragma, ...): "/x/obmd.db?mode=memory" is the file.
	uri := strings.HasPrefix(base, "file:")
	memory := base == ":memory:" || uri && (strings.HasPrefix(base, "file::memory:") || q.Get("mode") == "memory")
	if !memory && !uri {
		if err := createPrivate(base); err != nil {
			return nil, err
		}
	}
	addPragma(q, "busy_timeout", "5000")
	addPragma(q, "foreign_keys", "1")
	if !memory {
		addPragma(q, "journal_mode", "WAL")
	}
	addPragma(q, "synchronous", "FULL")
	if q.Get("_txlock") == "" {
		q.Set("_txlock", "immediate")
	}
	if !memory && q.Get("vfs") == "" {
		// The wal-index in this process's heap, not in a memory-mapped
		// -shm file: a store to a mapped page of a frozen (or hung)
		// filesystem faults and waits in the kernel, where neither a
		// context nor the Go runtime can reach it (a stop-the-world then
		// waits too, and the whole daemon stops). With unix-excl every
		// access is a system call: reads keep working from the page
		// cache, a stuck write blocks only its own goroutine, and the
		// writes in progress show it (CheckWrites). It also locks the
		// file against other processes, which SQLite mode assumes anyway
		// (one replica).
		q.Set("vfs", "unix-excl")
	}

	w, err := sql.Open("sqlite", base+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", base, err)
	}
	// One writer connection: see Store. Kept open forever, which is also
	// what keeps a :memory: database alive.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := w.PingContext(ctx); err != nil {
		_ = w.Close() // the ping error is the one worth returning
		return nil, fmt.Errorf("open sqlite %s: %w", base, err)
	}
	s := &Store{dialect: DialectSQLite, w: w, r: w, log: log, now: time.Now,
		exclusive: memory || q.Get("vfs") == "unix-excl" && !(uri && unlocked(q))}
	if !memory {
		// Each :memory: connection would be a database of its own, so
		// memory stores read through the writer.
		rq := cloneValues(q)
		rq.Add("_pragma", "query_only(1)")
		r, err := sql.Open("sqlite", base+"?"+rq.Encode())
		if err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("open sqlite %s: %w", base, err)
		}
		n := min(max(4, runtime.GOMAXPROCS(0)), 16)
		r.SetMaxOpenConns(n)
		r.SetMaxIdleConns(n)
		r.SetConnMaxLifetime(0)
		r.SetConnMaxIdleTime(0)
		if err := openAll(ctx, r, n); err != nil {
			_ = r.Close()
			_ = w.Close()
			return nil, fmt.Errorf("open sqlite %s: %w", base, err)
		}
		s.r = r
	}
	log.WithFields(logrus.Fields{"dialect": DialectSQLite, "path": base}).Info("db_open")
	return s, nil
}

// openAll opens all n connections of pool now, to be kept for good (the
// pool's limits keep them: n idle, no lifetime). Opening a SQLite
// connection writes to the filesystem (as root, SQLite fchowns the WAL file
// it opens), and that write waits in the kernel while the filesystem is
// frozen: a pool that opened connections as load grew would hang the
// reads that needed one then, where reads through an open connection still
// work.
func openAll(ctx context.Context, pool *sql.DB, n int) error {
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close() // back to the idle pool
		}
	}()
	for range n {
		c, err := pool.Conn(ctx)
		if err == nil {
			err = c.PingContext(ctx)
		}
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// addPragma adds "_pragma=name(value)" unless the DSN already sets name.
func addPragma(q url.Values, name, value string) {
	for _, p := range q["_pragma"] {
		p = strings.ToLower(strings.TrimSpace(p))
		if strings.HasPrefix(p, name+"(") || strings.HasPrefix(p, name+"=") || p == name {
			return
		}
	}
	q.Add("_pragma", name+"("+value+")")
}

func cloneValues(q url.Values) url.Values {
	c := make(url.Values, len(q))
	for k, v := range q {
		c[k] = append([]string(nil), v...)
	}
	return c
}

// createPrivate creates path with mode 0600 if it does not exist, so token
// hashes and sealed BMC info are not world-readable; SQLite gives its -wal
// and -shm files the same mode. A missing directory is created 0700, as
// obmd's state directory is.
func createPrivate(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create sqlite database directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create sqlite database: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create sqlite database: %w", err)
	}
	return nil
}

// unlocked says whether a file: URI's query tells SQLite to take no lock
// (nolock, or immutable, which implies it): another process may then
// write the file whatever the VFS.
func unlocked(q url.Values) bool {
	for _, k := range []string{"nolock", "immutable"} {
		if v, ok := q[k]; ok && !slices.Contains([]string{"0", "no", "false", "off"}, strings.ToLower(v[0])) {
			return true
		}
	}
	return false
}

// Dialect is "sqlite", "mysql" or "postgres".
func (s *Store) Dialect() string { return s.dialect }

// Exclusive says whether this process is the database's only writer: a
// SQLite database in memory or opened with the unix-excl VFS (the
// default), which locks the file against every other process, unless a
// file: URI turns locking off (nolock, immutable). Then every change of
// the database is one this process made.
func (s *Store) Exclusive() bool { return s.exclusive }

// Ping checks the database answers a query on obmd's schema (readiness).
// A protocol-level ping is not enough: MySQL answers it on a pooled
// connection whose database has been dropped or whose grants are gone.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	err := s.r.QueryRowContext(ctx, `SELECT 1 FROM nodes LIMIT 1`).Scan(&one)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("ping %s: %w", s.dialect, err)
	}
	return nil
}

// Close commits the counted and the deferred audit events (see Audit),
// then closes the pool.
func (s *Store) Close() error {
	s.stopAggregator() // queues what it counted
	s.stopAuditLater() // commits the deferred audit events first
	errs := []error{s.waitProbe(), s.closeStmts()}
	if s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close %s: %w", s.dialect, err)
	}
	return nil
}
