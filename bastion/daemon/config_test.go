package daemon

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/obmd/obmd/bastion/cluster"
	"github.com/obmd/obmd/sol"
)

// yamlKeys lists the keys of the configuration file a struct type takes,
// sections as "section.key", and the exported fields without a yaml tag
// (which the YAML decoder would take under a name no one documented).
func yamlKeys(t reflect.Type, prefix string) (keys, untagged []string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case tag == "-":
			continue
		case tag == "":
			untagged = append(untagged, prefix+f.Name)
			continue
		}
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
			k, u := yamlKeys(f.Type, prefix+tag+".")
			keys, untagged = append(keys, k...), append(untagged, u...)
			continue
		}
		keys = append(keys, prefix+tag)
	}
	return keys, untagged
}

// docRow is a row of a key table of docs/configuration.md: its keys and
// their defaults, one item of the default column per key (or one for all).
type docRow struct {
	keys     []string
	defaults []string
}

// documentedRows reads the key tables of docs/configuration.md: the
// backquoted names in the first column of each, ".key" after "section.…"
// (or "section.sub.…") meaning "section.key" ("section.sub.key"), and the
// default column split at ", ".
func documentedRows(t *testing.T) []docRow {
	data, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	tables := strings.Split(string(data), "| key (`OBMD_…`) |")
	if len(tables) < 2 {
		t.Fatal("docs/configuration.md has no key table")
	}
	name := regexp.MustCompile("`([^`]+)`")
	var rows []docRow
	for _, table := range tables[1:] {
		table, _, _ = strings.Cut(table, "\n\n")
		for _, line := range strings.Split(table, "\n")[2:] {
			cols := strings.Split(line, "|")
			if len(cols) < 4 {
				continue
			}
			var row docRow
			section := ""
			for _, m := range name.FindAllStringSubmatch(cols[1], -1) {
				k := m[1]
				switch {
				case strings.HasPrefix(k, "OBMD_"):
					continue
				case strings.HasPrefix(k, "."):
					k = section + k
				case strings.Contains(k, "."):
					section = k[:strings.LastIndex(k, ".")]
				}
				row.keys = append(row.keys, k)
			}
			if len(row.keys) == 0 {
				continue
			}
			row.defaults = strings.Split(strings.TrimSpace(cols[3]), ", ")
			rows = append(rows, row)
		}
	}
	return rows
}

func documentedKeys(t *testing.T) []string {
	var keys []string
	for _, r := range documentedRows(t) {
		keys = append(keys, r.keys...)
	}
	return keys
}

// TestConfigurationDocListsEveryKey: docs/configuration.md lists every
// key of the configuration file, and no key that is not one; every
// setting has a key.
func TestConfigurationDocListsEveryKey(t *testing.T) {
	keys, untagged := yamlKeys(reflect.TypeOf(Config{}), "")
	if len(untagged) > 0 {
		t.Errorf("settings without a yaml key (tag them, or yaml:\"-\"): %v", untagged)
	}
	documented := documentedKeys(t)
	for _, k := range keys {
		if n := count(documented, k); n != 1 {
			t.Errorf("docs/configuration.md lists %s %d times, want once", k, n)
		}
	}
	for _, k := range documented {
		if !slices.Contains(keys, k) {
			t.Errorf("docs/configuration.md lists %s, which is no key", k)
		}
	}
}

func count(list []string, s string) (n int) {
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}

// codeDefaults is every key's default as the code sets it: the daemon's
// sections (WithDefaults) and each component's own (its section type's
// WithDefaults, which its constructor applies), with the state directory
// named STATE_DIR where a default follows it.
func codeDefaults(t *testing.T) map[string]string {
	base, err := Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	inState, err := Config{Daemon: DaemonConfig{StateDir: "STATE_DIR"}}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Config{&base, &inState} {
		var errs [6]error
		c.Console, errs[0] = c.Console.WithDefaults()
		c.Sessions = c.Sessions.WithDefaults()
		c.AuthLimits, errs[5] = c.AuthLimits.WithDefaults()
		c.Cluster, errs[1] = c.Cluster.WithDefaults()
		c.IPMI, c.Redfish = c.IPMI.WithDefaults(), c.Redfish.WithDefaults()
		c.IPMITool, errs[2] = c.IPMITool.WithDefaults()
		c.IPMIOptions, errs[3] = c.IPMIOptions.WithDefaults(func(int) bool { return true })
		// The web console's settings take their defaults once it is on.
		web := c.Web
		web.Addr = "127.0.0.1:0"
		web, errs[4] = web.WithDefaults("", "")
		web.Addr = c.Web.Addr
		c.Web = web
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatal(err)
		}
	}
	a, b := map[string]string{}, map[string]string{}
	flatten(reflect.ValueOf(base), "", a)
	flatten(reflect.ValueOf(inState), "", b)
	for k, v := range b {
		if strings.Contains(v, "STATE_DIR/") {
			a[k] = v
		}
	}
	return a
}

// flatten puts each key's value under v, as docs/configuration.md writes
// a default, into m.
func flatten(v reflect.Value, prefix string, m map[string]string) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct {
			flatten(fv, prefix+tag+".", m)
			continue
		}
		m[prefix+tag] = docValue(fv)
	}
}

// docValue is a value as the doc's default column writes it: a duration
// as Go prints it without trailing zero units (2m, not 2m0s), "none" for
// an empty string or list.
func docValue(v reflect.Value) string {
	switch {
	case v.Type() == reflect.TypeOf(time.Duration(0)):
		d := time.Duration(v.Int())
		if d == 0 {
			return "0"
		}
		s := d.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	case v.Kind() == reflect.String:
		if v.String() == "" {
			return "none"
		}
		return v.String()
	case v.Kind() == reflect.Slice:
		if v.Len() == 0 {
			return "none"
		}
		var items []string
		for i := 0; i < v.Len(); i++ {
			items = append(items, fmt.Sprint(v.Index(i).Interface()))
		}
		return strings.Join(items, ",")
	}
	return fmt.Sprint(v.Interface())
}

// docDefault is the value an item of the default column states: its
// backquoted text, or its text up to an explanation (": ...", " (...)"),
// sizes in KiB and MiB as bytes.
func docDefault(item string) string {
	item = strings.TrimSpace(item)
	if rest, ok := strings.CutPrefix(item, "`"); ok {
		v, _, _ := strings.Cut(rest, "`")
		return strings.ReplaceAll(v, `\x05`, "\x05")
	}
	for _, sep := range []string{":", " ("} {
		item, _, _ = strings.Cut(item, sep)
	}
	for unit, n := range map[string]int{" KiB": 1 << 10, " MiB": 1 << 20} {
		if v, ok := strings.CutSuffix(item, unit); ok {
			if i, err := strconv.Atoi(v); err == nil {
				return strconv.Itoa(i * n)
			}
		}
	}
	return item
}

// TestConfigurationDocDefaults: the default docs/configuration.md gives
// each key is the code's (replica.id's is new at each start: "random").
func TestConfigurationDocDefaults(t *testing.T) {
	code := codeDefaults(t)
	for _, r := range documentedRows(t) {
		if len(r.defaults) != len(r.keys) && len(r.defaults) != 1 {
			t.Errorf("%v: %d defaults for %d keys (%q)", r.keys, len(r.defaults), len(r.keys), r.defaults)
			continue
		}
		for i, k := range r.keys {
			item := r.defaults[0]
			if len(r.defaults) > 1 {
				item = r.defaults[i]
			}
			want, ok := code[k]
			if !ok {
				continue // TestConfigurationDocListsEveryKey
			}
			if k == "replica.id" {
				want = "random"
			}
			if got := docDefault(item); got != want {
				t.Errorf("%s: docs/configuration.md says %q (%q), the code %q", k, got, item, want)
			}
		}
	}
}

// TestComponentSettingsChecked: WithDefaults (and so New, before any I/O)
// refuses a setting the console hub or a driver would refuse at start, or
// a negative guessing limit (which the limiter took as its default),
// naming its section, and takes the defaults of none of them.
func TestComponentSettingsChecked(t *testing.T) {
	for _, tt := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Console.Capture = "sometimes" }, `console: capture "sometimes"`},
		{func(c *Config) { c.Console.ScreenRebuild = 32 << 20 }, "console: screen_rebuild"},
		{func(c *Config) { c.Console.Backoff.Min, c.Console.Backoff.Max = time.Minute, time.Second }, "console: backoff max"},
		{func(c *Config) { c.IPMIOptions.CipherOrder = []int{17, 99} }, "ipmi settings: new IPMI driver: cipher order: unsupported cipher suite 99"},
		{func(c *Config) { c.IPMIOptions.CipherOrder = []int{3, 3} }, "suite 3 listed twice"},
		{func(c *Config) { c.IPMIOptions.SOLEnable = "sometimes" }, `sol_enable "sometimes"`},
		{func(c *Config) { c.AuthLimits.PerSource = -1 }, "auth_limits: per_source, per_node, window and lockout must not be negative"},
	} {
		c := Config{Daemon: DaemonConfig{StateDir: t.TempDir()}}
		tt.set(&c)
		if _, err := c.WithDefaults(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("WithDefaults: got %v, want an error mentioning %q", err, tt.want)
		}
		if _, err := New(c, logrus.New()); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New: got %v, want an error mentioning %q", err, tt.want)
		}
	}
	c, err := Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Console, sol.Config{}) || c.IPMIOptions.CipherOrder != nil {
		t.Errorf("got console %+v, cipher order %v; want them left to their constructors", c.Console, c.IPMIOptions.CipherOrder)
	}
}

// TestCertsConfig: certs.skew is bounded (0 takes sshcert's default),
// certs.purge_interval defaults to an hour.
func TestCertsConfig(t *testing.T) {
	for _, skew := range []time.Duration{-time.Second, 11 * time.Minute} {
		c := Config{Daemon: DaemonConfig{StateDir: t.TempDir()}}
		c.Certs.Skew = skew
		if _, err := c.WithDefaults(); err == nil || !strings.Contains(err.Error(), "certs.skew") {
			t.Errorf("skew %v: got %v, want an error naming certs.skew", skew, err)
		}
	}
	c, err := Config{Daemon: DaemonConfig{StateDir: t.TempDir()}}.WithDefaults()
	if err != nil || c.Certs.PurgeInterval != time.Hour {
		t.Errorf("defaults: got %v, purge interval %v; want 1h", err, c.Certs.PurgeInterval)
	}
	d := &Daemon{cfg: c}
	p, err := d.certPolicy()
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	if p.Skew() != time.Minute {
		t.Errorf("policy skew: got %v, want 1m", p.Skew())
	}
}

// TestLeaseTTLFromGalera: lease_ttl left unset on a Galera cluster
// outlasts the eviction of a dead node, twice (evs.suspect_timeout + 1 s)
// and at least the default; one configured below that is kept, with a
// warning; off Galera the configured value (0: the cluster's default).
func TestLeaseTTLFromGalera(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	for _, c := range []struct {
		configured, suspect, want time.Duration
		warn                      bool
	}{
		{0, 5 * time.Second, 12 * time.Second, false},
		{0, time.Second, cluster.DefaultLeaseTTL, false},
		{0, 0, 0, false},
		{3 * time.Second, 0, 3 * time.Second, false},
		{20 * time.Second, 5 * time.Second, 20 * time.Second, false},
		{3 * time.Second, 5 * time.Second, 3 * time.Second, true},
	} {
		hook.Reset()
		got := leaseTTL(c.configured, c.suspect, log)
		warned := hook.LastEntry() != nil && hook.LastEntry().Message == "lease_ttl_below_galera_eviction"
		if got != c.want || warned != c.warn {
			t.Errorf("leaseTTL(%v, suspect %v): got %v (warned %v), want %v (warned %v)", c.configured, c.suspect, got, warned, c.want, c.warn)
		}
	}
}
