// Command obmd is the SSH console-and-power bastion daemon.
//
//	obmd serve   [flags]   run the daemon
//	obmd migrate [flags]   apply database migrations and exit
//	obmd version           print the version
//
// Configuration: defaults, then the YAML file (--config or OBMD_CONFIG), then
// OBMD_* environment variables, then flags. See docs/configuration.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/sirupsen/logrus"
	"golang.org/x/term"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db"
)

// version is set at build time: -ldflags "-X main.version=..."
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-v":
		fmt.Println("obmd", version)
		return 0
	case "serve", "migrate":
	case "help", "-h", "--help":
		fmt.Fprintln(stderr, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "obmd: unknown command %q\n%s\n", args[0], usage)
		return 2
	}
	cfg, logOpts, err := loadConfig(args[0], args[1:], os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "obmd: %v\n", err)
		return 2
	}
	cfg.Version = version
	log, err := newLogger(logOpts, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "obmd: %v\n", err)
		return 2
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		log.WithError(err).Error("obmd_config_invalid")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The first signal starts a graceful stop; a second one, now handled
	// by default again, ends obmd at once.
	context.AfterFunc(ctx, stop)

	if args[0] == "migrate" {
		return migrate(ctx, cfg, log)
	}
	if soft, hard, was, err := raiseOpenFileLimit(); err != nil {
		log.WithError(err).Warn("open_files_limit_not_raised")
	} else if soft > 0 {
		log.WithFields(logrus.Fields{"soft": soft, "hard": hard, "was": was}).Info("open_files_limit")
	}
	d, err := daemon.New(cfg, log)
	if err != nil {
		log.WithError(err).Error("obmd_config_invalid")
		return 2
	}
	err = d.Start(ctx)
	if t := d.NewAdminToken(); t != "" {
		// Shown once, to whoever started obmd (even if the start failed
		// later: it is not shown again); never logged.
		fmt.Fprintf(stderr, "obmd: generated the admin token: %s\n      (stored in %s; use it as HTTP basic admin:<token>)\n",
			t, filepath.Join(cfg.Daemon.StateDir, "admin-token"))
	}
	if err != nil {
		log.WithError(err).Error("obmd_start_failed")
		return 1
	}
	if t := d.DemoToken(); t != "" {
		io.WriteString(stderr, demoText(d.SSHAddr(), t, d.HostKeyFingerprint()))
		if a := d.WebAddr(); a != "" {
			fmt.Fprintf(stderr, "The web console (log in with the token): http://%s/nodes/%s\n\n", a, daemon.DemoNode)
		}
	}
	if err := d.Run(ctx); err != nil {
		log.WithError(err).Error("obmd_failed")
		return 1
	}
	return 0
}

// migrate applies the migrations to cfg.DB.DSN (cfg has its defaults). db.Open
// creates the directory of a SQLite database; nothing is created for MySQL
// or PostgreSQL (not even the state directory).
func migrate(ctx context.Context, cfg daemon.Config, log logrus.FieldLogger) int {
	store, err := db.Open(ctx, cfg.DB.DSN, log)
	if err != nil {
		log.WithError(err).Error("obmd_migrate_failed")
		return 1
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.WithError(err).Error("obmd_migrate_failed")
		return 1
	}
	cur, latest, err := store.SchemaVersion(ctx)
	if err != nil {
		log.WithError(err).Error("obmd_migrate_failed")
		return 1
	}
	log.WithFields(logrus.Fields{"version": cur, "latest": latest, "db": store.Dialect()}).Info("obmd_migrated")
	return 0
}

type logOptions struct {
	level, format string
}

// newLogger logs text on a terminal and JSON otherwise (format "auto").
func newLogger(o logOptions, w io.Writer) (*logrus.Logger, error) {
	log := logrus.New()
	log.SetOutput(w)
	lvl, err := logrus.ParseLevel(o.level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	log.SetLevel(lvl)
	format := o.format
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			format = "text"
		}
	}
	switch format {
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	case "text":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	default:
		return nil, fmt.Errorf("log format %q: want auto, text or json", o.format)
	}
	return log, nil
}

// demoText is what --demo prints once obmd listens, after its start-up
// log: the demo node's token, obmd's host key fingerprint (the first ssh
// asks whether to trust it), and command lines that work as printed on a
// machine that has never reached obmd: the sshpass line, which cannot
// answer that question, accepts a host key it has never seen
// (StrictHostKeyChecking=accept-new; a changed one is still refused).
func demoText(sshAddr, token, fingerprint string) string {
	host, port := splitAddr(sshAddr)
	target := fmt.Sprintf("-p %s %s@%s", port, daemon.DemoNode, host)
	return fmt.Sprintf("\nobmd: demo node %q is on the built-in simulator; its token (new at each start) is:\n\n    %s\n\n"+
		"obmd's SSH host key: ED25519 key fingerprint is %s\n"+
		"(the first ssh asks whether to trust it: check that it shows this fingerprint, then answer yes)\n\n"+
		"Try:\n"+
		"    ssh %s    # password: the token; Ctrl-E c . leaves the console\n"+
		"    sshpass -p %s ssh -o StrictHostKeyChecking=accept-new %s power-status\n\n",
		daemon.DemoNode, token, fingerprint, target, token, target)
}

// splitAddr splits a listener's address for an ssh command line: the host
// without IPv6 brackets ("ssh demo@::1" works, "demo@[::1]" does not).
func splitAddr(a string) (host, port string) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return a, ""
	}
	return host, port
}

const usage = `usage: obmd serve [flags]     run the daemon (obmd serve -h lists flags)
       obmd migrate [flags]   apply database migrations and exit
       obmd version           print the version`
