package daemon

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/obmd/obmd/bastion/cluster"
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

// documentedKeys lists the keys docs/configuration.md documents: the
// backquoted names in the first column of each of its key tables, ".key"
// after "section.…" (or "section.sub.…") meaning "section.key"
// ("section.sub.key").
func documentedKeys(t *testing.T) []string {
	data, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	tables := strings.Split(string(data), "| key (`OBMD_…`) |")
	if len(tables) < 2 {
		t.Fatal("docs/configuration.md has no key table")
	}
	name := regexp.MustCompile("`([^`]+)`")
	var keys []string
	for _, table := range tables[1:] {
		table, _, _ = strings.Cut(table, "\n\n")
		for _, row := range strings.Split(table, "\n")[2:] {
			cols := strings.Split(row, "|")
			if len(cols) < 2 {
				continue
			}
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
				keys = append(keys, k)
			}
		}
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
		if !slices.Contains(documented, k) {
			t.Errorf("docs/configuration.md does not list %s", k)
		}
	}
	for _, k := range documented {
		if !slices.Contains(keys, k) {
			t.Errorf("docs/configuration.md lists %s, which is no key", k)
		}
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
