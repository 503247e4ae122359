package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/obmd/obmd/bastion/daemon"
)

// loadConfig builds the configuration: defaults (in daemon), then the YAML
// file, then OBMD_* variables, then flags (each flag's variable, then the
// flag itself). Flag usage and parse errors go to out.
func loadConfig(cmd string, args []string, getenv func(string) string, out io.Writer) (daemon.Config, logOptions, error) {
	var cfg daemon.Config
	lo := logOptions{level: "info", format: "auto"}
	fs := flag.NewFlagSet("obmd "+cmd, flag.ContinueOnError)
	fs.SetOutput(out)
	file := fs.String("config", getenv("OBMD_CONFIG"), "YAML configuration file (env OBMD_CONFIG)")
	// The flags: the setting each sets (its key, if it has one), and its
	// variable (the key's own OBMD_SECTION_KEY, or a shorter one kept from
	// before the sections).
	flags := []struct {
		name, key, env, usage string
		set                   func(string) error
	}{
		{"ssh-addr", "ssh.addr", "OBMD_SSH_ADDR", "SSH listen address (default 127.0.0.1:2222)", str(&cfg.SSH.Addr)},
		{"admin-addr", "admin.addr", "OBMD_ADMIN_ADDR", "admin HTTP listen address (default 127.0.0.1:8080)", str(&cfg.Admin.Addr)},
		{"state-dir", "daemon.state_dir", "OBMD_STATE_DIR", "keys, admin token, default database (default ./obmd-state)", str(&cfg.Daemon.StateDir)},
		{"db", "db.dsn", "OBMD_DB", "SQLite path, mysql://user:pass@tcp(host:port)/db or postgres://user:pass@host:port/db (default STATE_DIR/obmd.db)", str(&cfg.DB.DSN)},
		{"demo", "daemon.demo", "OBMD_DEMO", "register node \"demo\" on the built-in simulator and print its token", boolean(&cfg.Daemon.Demo)},
		{"log-level", "", "OBMD_LOG_LEVEL", "debug, info, warn, error (default info)", str(&lo.level)},
		{"log-format", "", "OBMD_LOG_FORMAT", "auto, text or json (default auto: text on a terminal)", str(&lo.format)},
	}
	given := map[string]*string{}
	for _, f := range flags {
		usage := fmt.Sprintf("%s (env %s)", f.usage, f.env)
		if f.key != "" {
			usage = f.key + ": " + usage
		}
		if f.name == "demo" {
			given[f.name] = new(string)
			fs.BoolFunc(f.name, usage, func(v string) error { *given[f.name] = v; return nil })
			continue
		}
		given[f.name] = fs.String(f.name, "", usage)
	}
	if err := fs.Parse(args); err != nil {
		return cfg, lo, err
	}
	if fs.NArg() > 0 {
		return cfg, lo, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *file != "" {
		data, err := os.ReadFile(*file)
		if err != nil {
			return cfg, lo, fmt.Errorf("config file: %w", err)
		}
		if err := decodeYAML(data, &cfg); err != nil {
			return cfg, lo, fmt.Errorf("config file %s: %w", *file, err)
		}
	}
	flagEnv := map[string]bool{}
	for _, f := range flags {
		flagEnv[f.env] = true
	}
	if err := movedEnv(getenv, flagEnv); err != nil {
		return cfg, lo, err
	}
	if err := applyEnv(reflect.ValueOf(&cfg).Elem(), "OBMD_", getenv); err != nil {
		return cfg, lo, err
	}
	for _, f := range flags {
		// A flag's two variables (OBMD_DB and OBMD_DB_DSN) name one
		// setting: set to different values, neither is taken. The values
		// stay out of the message (a DSN holds a password).
		if long := envName(f.key); f.key != "" && long != f.env && getenv(long) != "" && getenv(f.env) != "" && getenv(long) != getenv(f.env) {
			return cfg, lo, fmt.Errorf("%s and %s are both set, to different values: set one", f.env, long)
		}
		if v := getenv(f.env); v != "" {
			if err := f.set(v); err != nil {
				return cfg, lo, fmt.Errorf("%s: %w", f.env, err)
			}
		}
	}
	// Only flags given on the command line override: --demo=false must win
	// over OBMD_DEMO=1, and an absent flag must not reset the file's value.
	var err error
	fs.Visit(func(fl *flag.Flag) {
		for _, f := range flags {
			if f.name == fl.Name && err == nil {
				if err = f.set(*given[f.name]); err != nil {
					err = fmt.Errorf("--%s: %w", f.name, err)
				}
			}
		}
	})
	return cfg, lo, err
}

// str and boolean set a flag's setting from its text.
func str(p *string) func(string) error { return func(v string) error { *p = v; return nil } }

func boolean(p *bool) func(string) error {
	return func(v string) error {
		b, err := strconv.ParseBool(v)
		*p = b
		return err
	}
}

// decodeYAML decodes one YAML document into cfg, refusing unknown keys and
// values of the wrong kind with errors in the file's terms (checkKeys). An
// empty file (or one with only comments) sets nothing; a second document
// is refused rather than silently ignored.
func decodeYAML(data []byte, cfg *daemon.Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("want one document, found more (a \"---\" line?)")
	}
	if err := checkKeys(&doc, reflect.TypeOf(*cfg)); err != nil {
		return err
	}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true) // checkKeys found nothing: this is a safety net
	return strict.Decode(cfg)
}

// applyEnv sets each field of v from OBMD_<YAML KEY> (nested structs:
// OBMD_<SECTION>_<KEY>), e.g. OBMD_SSH_ADDR, OBMD_AUTH_LIMITS_PER_SOURCE;
// a list from comma-separated items (OBMD_ADMIN_TRUSTED_PROXIES=10.0.0.5,10.0.1.0/24,
// OBMD_IPMI_OPTIONS_CIPHER_ORDER=17,3).
func applyEnv(v reflect.Value, prefix string, getenv func(string) string) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		name := prefix + strings.ToUpper(tag)
		f := v.Field(i)
		if f.Kind() == reflect.Struct {
			if err := applyEnv(f, name+"_", getenv); err != nil {
				return err
			}
			continue
		}
		raw := getenv(name)
		if raw == "" {
			continue
		}
		if err := setField(f, raw); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func setField(f reflect.Value, raw string) error {
	switch {
	case f.Type() == reflect.TypeOf(time.Duration(0)):
		d, err := time.ParseDuration(raw)
		if err != nil {
			return err
		}
		f.SetInt(int64(d))
	case f.Kind() == reflect.String:
		f.SetString(raw)
	case f.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return err
		}
		f.SetBool(b)
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
		var list []string
		for _, v := range strings.Split(raw, ",") {
			if v = strings.TrimSpace(v); v != "" {
				list = append(list, v)
			}
		}
		f.Set(reflect.ValueOf(list))
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Int:
		list := reflect.MakeSlice(f.Type(), 0, 4)
		for _, v := range strings.Split(raw, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return err
			}
			list = reflect.Append(list, reflect.ValueOf(n).Convert(f.Type().Elem()))
		}
		f.Set(list)
	case f.Kind() == reflect.Int:
		n, err := strconv.Atoi(raw)
		if err != nil {
			return err
		}
		f.SetInt(int64(n))
	default:
		return fmt.Errorf("cannot set a %s from the environment", f.Type())
	}
	return nil
}
