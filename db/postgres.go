package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sirupsen/logrus"
)

// PostgreSQL (through pgx's database/sql driver). The store's SQL is written
// once, with "?" placeholders as SQLite and MySQL take them: the connections
// of a PostgreSQL store rewrite them to $1, $2, ... (pgConn). Text columns
// collate "C" (byte order, as SQLite's BINARY and MySQL's VARBINARY), so
// labels compare and sort the same on every engine.

// openPostgres opens the pools of a store on dsn, a postgres:// URL. The
// DSN's own settings win; unset, the connect timeout is 5 s and the
// application name "obmd". The database must be UTF8. Errors and the log
// never show the password.
func openPostgres(ctx context.Context, dsn string, log logrus.FieldLogger) (*Store, error) {
	secrets := pgPasswords(dsn)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, redact(fmt.Errorf("parse postgres DSN: %w", err), secrets...)
	}
	secrets = append(secrets, cfg.Password)
	if cfg.Database == "" {
		return nil, errors.New("parse postgres DSN: no database name (want postgres://user:pass@host:port/dbname)")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if _, set := cfg.RuntimeParams["application_name"]; !set {
		cfg.RuntimeParams["application_name"] = "obmd"
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	open := func(conns int) (*sql.DB, error) {
		pool := serverPool(pgConnector{stdlib.GetConnector(*cfg)}, conns)
		if err := pool.PingContext(ctx); err != nil {
			_ = pool.Close() // the ping error is the one worth returning
			return nil, redact(fmt.Errorf("ping postgres %s/%s: %w", addr, cfg.Database, err), secrets...)
		}
		return pool, nil
	}
	// Reads and writes in pools of their own, as on MySQL (openMySQL).
	readers, err := open(serverReaders)
	if err != nil {
		return nil, err
	}
	writers, err := open(serverWriters)
	if err != nil {
		_ = readers.Close() // the writers' error is the one worth returning
		return nil, err
	}
	var version, encoding string
	err = readers.QueryRowContext(ctx, `SELECT current_setting('server_version'), current_setting('server_encoding')`).
		Scan(&version, &encoding)
	if err == nil && encoding != "UTF8" {
		// Text is UTF-8 on every engine: another encoding would refuse
		// (or, SQL_ASCII, not check) what the others store.
		err = fmt.Errorf("the database's encoding is %s, want UTF8 (CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0)", encoding)
	}
	if err != nil {
		_ = readers.Close() // the query's error is the one worth returning
		_ = writers.Close()
		return nil, redact(fmt.Errorf("open postgres %s/%s: %w", addr, cfg.Database, err), secrets...)
	}
	log.WithFields(logrus.Fields{"dialect": DialectPostgres, "addr": addr, "database": cfg.Database,
		"server_version": version}).Info("db_open")
	return &Store{dialect: DialectPostgres, w: writers, r: readers, log: log, now: time.Now, pg: cfg}, nil
}

// pgPasswords finds what may be a password in a postgres:// DSN, raw and
// decoded, so that an error about a DSN pgx could not parse can still be
// redacted: the userinfo's password and the password and sslpassword
// parameters.
func pgPasswords(dsn string) []string {
	var out []string
	add := func(raw string) {
		if raw == "" {
			return
		}
		out = append(out, raw)
		if dec, err := url.PathUnescape(raw); err == nil && dec != raw {
			out = append(out, dec)
		}
	}
	rest := dsn[strings.Index(dsn, "://")+len("://"):]
	rest, query, _ := strings.Cut(rest, "?")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if _, pass, ok := strings.Cut(rest[:at], ":"); ok {
			add(pass)
		}
	}
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k, err := url.QueryUnescape(k); err == nil && (k == "password" || k == "sslpassword") {
			add(v)
		}
	}
	return out
}

// pgConnector opens pgx connections that take "?" placeholders (pgConn).
type pgConnector struct{ driver.Connector }

func (c pgConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return pgConn{conn.(*stdlib.Conn)}, nil
}

// pgConn is a pgx connection whose queries are rewritten from "?"
// placeholders to PostgreSQL's numbered ones (rebind) before pgx sees them;
// everything else is pgx's. Its prepared statements and transactions are
// pgx's own: they hold the rewritten text.
type pgConn struct{ *stdlib.Conn }

func (c pgConn) Prepare(query string) (driver.Stmt, error) {
	return c.Conn.PrepareContext(context.Background(), rebind(query))
}

func (c pgConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.PrepareContext(ctx, rebind(query))
}

func (c pgConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.ExecContext(ctx, rebind(query), args)
}

func (c pgConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.QueryContext(ctx, rebind(query), args)
}

// rebind rewrites the "?" placeholders of query to $1, $2, ..., leaving
// alone those in string literals, quoted identifiers and comments.
func rebind(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for i := 0; i < len(query); i++ {
		// The length of a literal, identifier or comment that starts at
		// i, through its closing delimiter; -1: unterminated.
		skip := 0
		switch c := query[i]; {
		case c == '\'' || c == '"':
			if skip = strings.IndexByte(query[i+1:], c); skip >= 0 {
				skip += 2
			}
		case strings.HasPrefix(query[i:], "--"):
			if skip = strings.IndexByte(query[i:], '\n'); skip >= 0 {
				skip++
			}
		case strings.HasPrefix(query[i:], "/*"):
			if skip = strings.Index(query[i:], "*/"); skip >= 0 {
				skip += 2
			}
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		default:
			b.WriteByte(c)
			continue
		}
		if skip < 0 { // unterminated: the rest is its
			skip = len(query) - i
		}
		b.WriteString(query[i : i+skip])
		i += skip - 1
	}
	return b.String()
}

// pgText reports whether PostgreSQL can store v as text: valid UTF-8
// without NUL bytes.
func pgText(v string) bool { return utf8.ValidString(v) && !strings.Contains(v, "\x00") }

// pgCode is the SQLSTATE of a PostgreSQL error, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
