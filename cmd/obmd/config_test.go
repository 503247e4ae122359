package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/daemon"
)

// fakeEnv is a getenv over a map.
func fakeEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeYAML writes a config file and returns its path.
func writeYAML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "obmd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadConfigPrecedence checks defaults < YAML file < OBMD_* env < flags,
// field by field.
func TestLoadConfigPrecedence(t *testing.T) {
	file := writeYAML(t, `
ssh:
  addr: 127.0.0.1:1001
admin:
  addr: 127.0.0.1:1002
daemon:
  state_dir: /file/state
  demo: true
db:
  dsn: /file/obmd.db
auth_limits:
  per_source: 7
console:
  linger: 3s
  open_timeout: 4s
  backoff:
    max: 20s
ipmitool:
  path: /opt/bin/ipmitool
`)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want func(c daemon.Config) daemon.Config // from the file-only config
	}{
		{name: "file only", want: func(c daemon.Config) daemon.Config { return c }},
		{
			name: "env over file",
			env: map[string]string{"OBMD_SSH_ADDR": "127.0.0.1:2001", "OBMD_ADMIN_ADDR": "127.0.0.1:2002",
				"OBMD_STATE_DIR": "/env/state", "OBMD_DB": "mysql://u:p@tcp(db:3306)/obmd", "OBMD_ADMIN_TOKEN": "env-admin",
				"OBMD_CONSOLE_LINGER": "5s", "OBMD_DEMO": "false", "OBMD_AUTH_LIMITS_PER_SOURCE": "9",
				"OBMD_CONSOLE_BACKOFF_MAX": "30s", "OBMD_IPMITOOL_PATH": "/env/ipmitool", "OBMD_SESSIONS_CUT_WAIT": "3s",
				"OBMD_REDFISH_CA_FILE": "/env/ca.pem", "OBMD_WEB_ADDR": "127.0.0.1:2003", "OBMD_WEB_FRAME_ANCESTORS": "https://a.example,https://b.example"},
			want: func(c daemon.Config) daemon.Config {
				c.SSH.Addr, c.Admin.Addr, c.Daemon.StateDir = "127.0.0.1:2001", "127.0.0.1:2002", "/env/state"
				c.DB.DSN, c.Admin.Token, c.Console.Linger, c.Daemon.Demo = "mysql://u:p@tcp(db:3306)/obmd", "env-admin", 5*time.Second, false
				c.AuthLimits.PerSource = 9
				c.Console.Backoff.Max, c.IPMITool.Path, c.Sessions.CutWait = 30*time.Second, "/env/ipmitool", 3*time.Second
				c.Redfish.CAFile = "/env/ca.pem"
				c.Web.Addr, c.Web.FrameAncestors = "127.0.0.1:2003", []string{"https://a.example", "https://b.example"}
				return c
			},
		},
		{
			name: "flags over env",
			env: map[string]string{"OBMD_SSH_ADDR": "127.0.0.1:2001", "OBMD_ADMIN_ADDR": "127.0.0.1:2002",
				"OBMD_STATE_DIR": "/env/state", "OBMD_DB": "/env/obmd.db", "OBMD_DEMO": "true"},
			args: []string{"--ssh-addr", "127.0.0.1:3001", "--admin-addr=127.0.0.1:3002", "--state-dir", "/flag/state",
				"--db", "/flag/obmd.db", "--demo=false"},
			want: func(c daemon.Config) daemon.Config {
				c.SSH.Addr, c.Admin.Addr, c.Daemon.StateDir, c.DB.DSN, c.Daemon.Demo = "127.0.0.1:3001", "127.0.0.1:3002", "/flag/state", "/flag/obmd.db", false
				return c
			},
		},
		{
			name: "flags over file, env unset",
			args: []string{"--state-dir", "/flag/state"},
			want: func(c daemon.Config) daemon.Config { c.Daemon.StateDir = "/flag/state"; return c },
		},
	}
	var base daemon.Config
	base.SSH.Addr, base.Admin.Addr, base.Daemon.StateDir = "127.0.0.1:1001", "127.0.0.1:1002", "/file/state"
	base.DB.DSN, base.Console.Linger, base.Daemon.Demo = "/file/obmd.db", 3*time.Second, true
	base.AuthLimits.PerSource = 7
	base.Console.OpenTimeout, base.Console.Backoff.Max, base.IPMITool.Path = 4*time.Second, 20*time.Second, "/opt/bin/ipmitool"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"OBMD_CONFIG": file}
			for k, v := range tt.env {
				env[k] = v
			}
			got, _, err := loadConfig("serve", tt.args, fakeEnv(env), io.Discard)
			if err != nil {
				t.Fatalf("loadConfig: %v", err)
			}
			if want := tt.want(base); !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

// TestLoadConfigDefaults checks that nothing configured gives the documented
// defaults once the daemon fills them in.
func TestLoadConfigDefaults(t *testing.T) {
	cfg, lo, err := loadConfig("serve", nil, fakeEnv(nil), io.Discard)
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if lo != (logOptions{level: "info", format: "auto"}) {
		t.Errorf("log options: got %+v, want info/auto", lo)
	}
	cfg, err = cfg.WithDefaults()
	if err != nil {
		t.Fatalf("WithDefaults: %v", err)
	}
	want := map[string][2]string{
		"ssh_addr":   {cfg.SSH.Addr, "127.0.0.1:2222"},
		"admin_addr": {cfg.Admin.Addr, "127.0.0.1:8080"},
		"state_dir":  {cfg.Daemon.StateDir, "./obmd-state"},
		"db":         {cfg.DB.DSN, filepath.Join("obmd-state", "obmd.db")},
		"host_key":   {cfg.SSH.HostKey, filepath.Join("obmd-state", "ssh_host_ed25519_key")},
		"seal_key":   {cfg.DB.SealKey, filepath.Join("obmd-state", "seal.key")},
		"admin_tok":  {cfg.Admin.Token, ""},
	}
	for k, v := range want {
		if v[0] != v[1] {
			t.Errorf("%s: got %q, want %q", k, v[0], v[1])
		}
	}
	// The database and keys follow the state directory.
	cfg, _, err = loadConfig("serve", nil, fakeEnv(map[string]string{"OBMD_STATE_DIR": "/var/lib/obmd"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ = cfg.WithDefaults(); cfg.DB.DSN != "/var/lib/obmd/obmd.db" || cfg.DB.SealKey != "/var/lib/obmd/seal.key" {
		t.Errorf("OBMD_STATE_DIR: got db %q, seal key %q, want them in /var/lib/obmd", cfg.DB.DSN, cfg.DB.SealKey)
	}
}

// TestLoadConfigLogOptions checks env and flags for logging.
func TestLoadConfigLogOptions(t *testing.T) {
	_, lo, err := loadConfig("serve", []string{"--log-format", "text"},
		fakeEnv(map[string]string{"OBMD_LOG_LEVEL": "debug", "OBMD_LOG_FORMAT": "json"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (logOptions{level: "debug", format: "text"}); lo != want {
		t.Errorf("got %+v, want %+v", lo, want)
	}
}

// TestLoadConfigErrors checks that bad input is refused with a message that
// names what is wrong.
func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string // written to a file passed with --config when set
		env     map[string]string
		args    []string
		wantErr []string // substrings of the error
	}{
		{name: "unknown yaml key", yaml: "ssh:\n  addr: 127.0.0.1:1\nsssh_port: 22\n", wantErr: []string{`line 3: unknown key "sssh_port"`}},
		{name: "misspelt yaml key", yaml: "ssh:\n  adr: 127.0.0.1:1\n", wantErr: []string{`line 2: unknown key "adr" in section "ssh" (did you mean "addr"?)`}},
		{name: "misspelt section", yaml: "sshh:\n  addr: 127.0.0.1:1\n", wantErr: []string{`line 1: unknown key "sshh" (did you mean "ssh"?)`}},
		{name: "unknown nested yaml key", yaml: "auth_limits:\n  per_sauce: 3\n",
			wantErr: []string{`line 2: unknown key "per_sauce" in section "auth_limits" (did you mean "per_source"?)`}},
		{name: "two unknown keys", yaml: "console:\n  lingr: 2s\nadmin:\n  fail_dealy: 1s\n",
			wantErr: []string{`line 2: unknown key "lingr" in section "console" (did you mean "linger"?)`, "\n", `line 4: unknown key "fail_dealy" in section "admin" (did you mean "fail_delay"?)`}},
		{name: "bad yaml duration", yaml: "console:\n  linger: soon\n", wantErr: []string{`line 2: console.linger: "soon" is not a duration (such as 30s, 2m or 1h)`}},
		{name: "bad yaml int", yaml: "console:\n  scrollback: lots\n", wantErr: []string{`line 2: console.scrollback: "lots" is not a whole number`}},
		{name: "bad yaml bool", yaml: "daemon:\n  demo: maybe\n", wantErr: []string{`line 2: daemon.demo: "maybe" is not true or false`}},
		{name: "bad yaml list", yaml: "admin:\n  trusted_proxies: 10.0.0.1\n", wantErr: []string{`line 2: admin.trusted_proxies: "10.0.0.1" is not a list ("- item" lines, or [a, b])`}},
		{name: "section not a mapping", yaml: "console: 2s\n", wantErr: []string{`line 1: "console" must hold keys`}},
		{name: "yaml not a mapping", yaml: "- a\n- b\n", wantErr: []string{"obmd.yaml", "the file must hold keys"}},
		{name: "two yaml documents", yaml: "ssh:\n  addr: a:1\n---\nadmin:\n  addr: b:2\n", wantErr: []string{"one document"}},
		{name: "missing file", args: []string{"--config", "/nonexistent/obmd.yaml"}, wantErr: []string{"/nonexistent/obmd.yaml"}},
		{name: "bad env duration", env: map[string]string{"OBMD_DAEMON_SHUTDOWN_TIMEOUT": "10"}, wantErr: []string{"OBMD_DAEMON_SHUTDOWN_TIMEOUT", "10"}},
		{name: "bad env bool", env: map[string]string{"OBMD_DEMO": "maybe"}, wantErr: []string{"OBMD_DEMO", "maybe"}},
		{name: "bad env int", env: map[string]string{"OBMD_AUTH_LIMITS_PER_NODE": "x"}, wantErr: []string{"OBMD_AUTH_LIMITS_PER_NODE"}},
		{name: "unknown flag", args: []string{"--ssh-port", "22"}, wantErr: []string{"ssh-port"}},
		{name: "stray argument", args: []string{"now"}, wantErr: []string{`"now"`}},
		// Keys from before the sections: refused with their new place
		// (TestMovedKeysRefused).
		{name: "old ssh_addr", yaml: "ssh_addr: 127.0.0.1:22\n", wantErr: []string{"line 1: ssh_addr is now ssh.addr"}},
		{name: "old db", yaml: "console:\n  linger: 1s\ndb: /var/lib/obmd/obmd.db\n", wantErr: []string{"line 3: db is now db.dsn"}},
		{name: "old login_grace_time", yaml: "login_grace_time: 5s\n", wantErr: []string{"line 1: login_grace_time is now ssh.login_grace_time"}},
		{name: "old fail_delay", yaml: "fail_delay: 1s\n", wantErr: []string{"line 1: fail_delay is now ssh.fail_delay and admin.fail_delay"}},
		{name: "old alias", yaml: "max_sessions_per_node: 3\n", wantErr: []string{"line 1: max_sessions_per_node is now sessions.max_per_node"}},
		{name: "old key in a merge", yaml: "<<: {ssh_addr: 127.0.0.1:22}\n", wantErr: []string{"line 1: ssh_addr is now ssh.addr"}},
		{name: "misspelt key in a merge", yaml: "x: &x {adr: 127.0.0.1:1}\nssh:\n  <<: [*x]\n",
			wantErr: []string{`unknown key "x"`, `line 1: unknown key "adr" in section "ssh" (did you mean "addr"?)`}},
		{name: "old variable", env: map[string]string{"OBMD_LOGIN_GRACE_TIME": "5s"},
			wantErr: []string{"OBMD_LOGIN_GRACE_TIME is now OBMD_SSH_LOGIN_GRACE_TIME (ssh.login_grace_time)"}},
		{name: "old tls variable", env: map[string]string{"OBMD_TLS_CERT": "c.pem"},
			wantErr: []string{"OBMD_TLS_CERT is now OBMD_ADMIN_TLS_CERT (admin.tls_cert)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range tt.env {
				env[k] = v
			}
			if tt.yaml != "" {
				env["OBMD_CONFIG"] = writeYAML(t, tt.yaml)
			}
			_, _, err := loadConfig("serve", tt.args, fakeEnv(env), io.Discard)
			if err == nil {
				t.Fatalf("got no error, want one mentioning %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got error %q, want it to mention %q", err, w)
				}
			}
			// The file's terms, never Go's.
			for _, goWord := range []string{"daemon.Config", "not found in type", "!!", "unmarshal", "time.Duration"} {
				if strings.Contains(err.Error(), goWord) {
					t.Errorf("got error %q, want no %q in it", err, goWord)
				}
			}
		})
	}
}

// TestLoadConfigEmptyFile checks that a config file with only comments is a
// valid, empty configuration.
func TestLoadConfigEmptyFile(t *testing.T) {
	for _, body := range []string{"", "# nothing set yet\n"} {
		cfg, _, err := loadConfig("serve", []string{"--config", writeYAML(t, body)}, fakeEnv(nil), io.Discard)
		if err != nil {
			t.Errorf("file %q: got %v, want no error", body, err)
		}
		if !reflect.DeepEqual(cfg, daemon.Config{}) {
			t.Errorf("file %q: got %+v, want the zero config", body, cfg)
		}
	}
}

// TestConfigPlainHTTPOffLoopback checks that plain HTTP on an admin address
// that is not loopback is refused unless TLS or insecure_http is configured.
func TestConfigPlainHTTPOffLoopback(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "loopback v4", env: map[string]string{"OBMD_ADMIN_ADDR": "127.0.0.1:8080"}},
		{name: "loopback v6", env: map[string]string{"OBMD_ADMIN_ADDR": "[::1]:8080"}},
		{name: "localhost", env: map[string]string{"OBMD_ADMIN_ADDR": "localhost:8080"}},
		{name: "all addresses", env: map[string]string{"OBMD_ADMIN_ADDR": "0.0.0.0:8080"}, wantErr: "not loopback"},
		{name: "empty host", env: map[string]string{"OBMD_ADMIN_ADDR": ":8080"}, wantErr: "not loopback"},
		{name: "public address", env: map[string]string{"OBMD_ADMIN_ADDR": "192.0.2.7:8080"}, wantErr: "not loopback"},
		{name: "insecure_http", env: map[string]string{"OBMD_ADMIN_ADDR": "0.0.0.0:8080", "OBMD_ADMIN_INSECURE_HTTP": "true"}},
		{name: "tls", env: map[string]string{"OBMD_ADMIN_ADDR": "0.0.0.0:8080", "OBMD_ADMIN_TLS_CERT": "c.pem", "OBMD_ADMIN_TLS_KEY": "k.pem"}},
		{name: "tls cert without key", env: map[string]string{"OBMD_ADMIN_TLS_CERT": "c.pem"}, wantErr: "admin.tls_cert and admin.tls_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := loadConfig("serve", nil, fakeEnv(tt.env), io.Discard)
			if err != nil {
				t.Fatalf("loadConfig: %v", err)
			}
			_, err = cfg.WithDefaults()
			if tt.wantErr == "" && err != nil {
				t.Errorf("got %v, want no error", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("got %v, want an error mentioning %q", err, tt.wantErr)
			}
			// daemon.New applies the same check.
			if _, nerr := daemon.New(cfg, discardLogger()); (nerr == nil) != (err == nil) {
				t.Errorf("daemon.New: got %v, want the WithDefaults result %v", nerr, err)
			}
		})
	}
}

// TestEveryConfigFieldFromEnv walks daemon.Config and sets each field
// through its OBMD_* variable, so that a new field of a type applyEnv cannot
// set (or without a yaml name) is caught here rather than by an operator.
func TestEveryConfigFieldFromEnv(t *testing.T) {
	env := map[string]string{}
	var walk func(typ reflect.Type, prefix, path string)
	walk = func(typ reflect.Type, prefix, path string) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "-" {
				continue
			}
			if tag == "" {
				t.Errorf("%s%s has no yaml name, so no OBMD_ variable", path, f.Name)
				continue
			}
			name := prefix + strings.ToUpper(tag)
			switch {
			case f.Type == reflect.TypeOf(time.Duration(0)):
				env[name] = "3s"
			case f.Type.Kind() == reflect.Struct:
				walk(f.Type, name+"_", path+f.Name+".")
			case f.Type.Kind() == reflect.String:
				env[name] = "v"
			case f.Type.Kind() == reflect.Bool:
				env[name] = "true"
			case f.Type.Kind() == reflect.Int:
				env[name] = "3"
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.String:
				env[name] = "10.0.0.5, 10.0.1.0/24"
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Int:
				env[name] = "17, 3"
			default:
				t.Errorf("%s%s (%s): OBMD_ variables cannot set a %s", path, f.Name, name, f.Type)
			}
		}
	}
	walk(reflect.TypeOf(daemon.Config{}), "OBMD_", "")
	cfg, _, err := loadConfig("serve", nil, fakeEnv(env), io.Discard)
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	var check func(v reflect.Value, path string)
	check = func(v reflect.Value, path string) {
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if f.Tag.Get("yaml") == "-" {
				continue
			}
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
				check(v.Field(i), path+f.Name+".")
				continue
			}
			if v.Field(i).IsZero() {
				t.Errorf("%s%s: not set from its OBMD_ variable", path, f.Name)
			}
		}
	}
	check(reflect.ValueOf(cfg), "")
}

// TestLoadConfigNestedList: a list's items are checked as their type, with
// the key that holds them.
func TestLoadConfigNestedList(t *testing.T) {
	_, _, err := loadConfig("serve", []string{"--config", writeYAML(t, "ipmi_options:\n  cipher_order: [17, three]\n")}, fakeEnv(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), `line 2: ipmi_options.cipher_order: "three" is not a whole number`) {
		t.Errorf("got %v, want the item and its key named", err)
	}
}

// TestMovedKeysRefused: a key of the flat schema from before the sections,
// in the file or as a variable, is refused with the key (or variable) that
// replaced it, never read nor ignored (the "old" cases of
// TestLoadConfigErrors); the flags' variables (OBMD_DB, OBMD_STATE_DIR,
// OBMD_DEMO) and those whose name did not change (OBMD_ADMIN_TOKEN is
// admin.token's) still work.
func TestMovedKeysRefused(t *testing.T) {
	cfg, _, err := loadConfig("serve", nil, fakeEnv(map[string]string{"OBMD_DB": "/x/obmd.db", "OBMD_STATE_DIR": "/x",
		"OBMD_DEMO": "true", "OBMD_ADMIN_TOKEN": "t", "OBMD_DB_GRACE": "7s", "OBMD_CONSOLE_CAPTURE": "always"}), io.Discard)
	if err != nil {
		t.Fatalf("kept variables: %v", err)
	}
	if cfg.DB.DSN != "/x/obmd.db" || cfg.Daemon.StateDir != "/x" || !cfg.Daemon.Demo || cfg.Admin.Token != "t" ||
		cfg.DB.Grace != 7*time.Second || cfg.Console.Capture != "always" {
		t.Errorf("kept variables: got %+v", cfg)
	}
}

// TestFlagVariablesAgree: a flag's short variable and its key's
// (OBMD_DB and OBMD_DB_DSN) name one setting; set to different values,
// obmd refuses to guess which is meant, without echoing either (a DSN
// holds a password). Set to the same value, or one of them, it is taken.
func TestFlagVariablesAgree(t *testing.T) {
	for _, pair := range [][2]string{{"OBMD_DB", "OBMD_DB_DSN"}, {"OBMD_STATE_DIR", "OBMD_DAEMON_STATE_DIR"}, {"OBMD_DEMO", "OBMD_DAEMON_DEMO"}} {
		short, long := pair[0], pair[1]
		a, b := "mysql://obmd:hunter2@tcp(db1:3306)/obmd", "/var/lib/obmd/obmd.db"
		if short == "OBMD_DEMO" {
			a, b = "true", "false"
		}
		_, _, err := loadConfig("serve", nil, fakeEnv(map[string]string{short: a, long: b}), io.Discard)
		if want := short + " and " + long + " are both set, to different values"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s and %s differ: got %v, want an error mentioning %q", short, long, err, want)
		} else if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), b) {
			t.Errorf("%s and %s differ: the error %q shows a value", short, long, err)
		}
		for _, env := range []map[string]string{{short: a, long: a}, {short: a}, {long: a}} {
			cfg, _, err := loadConfig("serve", nil, fakeEnv(env), io.Discard)
			got := map[string]string{"OBMD_DB": cfg.DB.DSN, "OBMD_STATE_DIR": cfg.Daemon.StateDir, "OBMD_DEMO": fmt.Sprint(cfg.Daemon.Demo)}[short]
			if err != nil || got != a {
				t.Errorf("%v: got %q, %v; want %q", env, got, err, a)
			}
		}
	}
}

// TestMovedKeysExist: every key a moved key points to is a key.
func TestMovedKeysExist(t *testing.T) {
	for old, moved := range movedKeys() {
		for _, k := range moved {
			section, key, _ := strings.Cut(k, ".")
			sec, ok := yamlKeys(reflect.TypeOf(daemon.Config{}))[section]
			if !ok {
				t.Errorf("%s: %s is no section", old, section)
				continue
			}
			if _, ok := yamlKeys(sec)[key]; !ok {
				t.Errorf("%s: %s is no key", old, k)
			}
		}
		if _, ok := yamlKeys(reflect.TypeOf(daemon.Config{}))[old]; ok && old != "db" {
			t.Errorf("%s moved, but is still a key", old)
		}
	}
}

// TestDocsNameNoMovedKey: the docs name no key of the flat schema as if
// obmd read it (`linger`, `console_capture: always`), but where they say
// it is refused (the table of configuration.md that lists them, and lines
// that say so). "db" and "demo" are also a section and a node.
func TestDocsNameNoMovedKey(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range append(pages, "../../README.md", "../../bench/README.md") {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if before, rest, ok := strings.Cut(text, "## Keys from before the sections"); ok {
			_, after, _ := strings.Cut(rest, "\n## ")
			text = before + after
		}
		for n, line := range strings.Split(text, "\n") {
			if strings.Contains(line, "Before the sections") || strings.Contains(line, "refuse") {
				continue
			}
			for old := range movedKeys() {
				if old == "db" || old == "demo" {
					continue
				}
				if strings.Contains(line, "`"+old+"`") || strings.Contains(line, "`"+old+":") {
					t.Errorf("%s, line %d of the page as checked: names %s, which obmd refuses (now %s)",
						strings.TrimPrefix(page, "../../"), n+1, old, strings.Join(movedKeys()[old], " and "))
				}
			}
		}
	}
}

// TestDocsYAMLExamples: every YAML example of the docs (and README) is a
// configuration file obmd reads, so none shows a key it would refuse.
func TestDocsYAMLExamples(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, page := range append(pages, "../../README.md") {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		blocks := strings.Split(string(data), "```yaml\n")
		for i, b := range blocks[1:] {
			body, _, _ := strings.Cut(b, "```")
			var cfg daemon.Config
			if err := decodeYAML([]byte(body), &cfg); err != nil {
				t.Errorf("%s, YAML example %d: %v", filepath.Base(page), i+1, err)
			}
			n++
		}
	}
	if n == 0 {
		t.Error("found no YAML example")
	}
}
