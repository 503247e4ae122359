package main

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkKeys walks a configuration file's YAML against t (daemon.Config)
// before it is decoded, so that its errors speak of the file's keys and
// lines rather than Go types: an unknown key ("line 3: unknown key
// \"ssh_adr\" (did you mean \"ssh_addr\"?)") or a value of the wrong kind
// ("line 5: console.linger: \"soon\" is not a duration (such as 2s or
// 1m)"). It returns every such error, one a line.
func checkKeys(doc *yaml.Node, t reflect.Type) error {
	var errs []error
	walkKeys(doc, t, "", &errs)
	return errors.Join(errs...)
}

func walkKeys(n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	for n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Tag == "!!null" {
		return
	}
	switch {
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if moved := movedKeys()[path]; moved != nil { // "db: FILE" before db.dsn
				*errs = append(*errs, fmt.Errorf("line %d: %s is now %s", n.Line, path, strings.Join(moved, " and ")))
				return
			}
			*errs = append(*errs, fmt.Errorf("line %d: %s must hold keys (key: value lines)", n.Line, section(path)))
			return
		}
		keys := yamlKeys(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // a merge key: its keys are the section's own
				if v.Kind == yaml.SequenceNode { // <<: [*a, *b]
					for _, m := range v.Content {
						walkKeys(m, t, path, errs)
					}
				} else {
					walkKeys(v, t, path, errs)
				}
				continue
			}
			f, ok := keys[k.Value]
			if !ok {
				*errs = append(*errs, unknownKey(k, path, keys))
				continue
			}
			walkKeys(v, f, join(path, k.Value), errs)
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for _, item := range n.Content {
			walkKeys(item, t.Elem(), path, errs)
		}
	default:
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			*errs = append(*errs, fmt.Errorf("line %d: %s: %s is not %s", n.Line, path, printableValue(n), kind(t)))
		}
	}
}

// yamlKeys are the keys of struct type t, as yaml.v3 names its fields: the
// tag's name, or the field's name in lower case; "-" is no key; inline
// structs lend theirs.
func yamlKeys(t reflect.Type) map[string]reflect.Type {
	keys := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
			continue
		case strings.Contains(","+opts+",", ",inline,"):
			for k, v := range yamlKeys(f.Type) {
				keys[k] = v
			}
			continue
		case name == "":
			name = strings.ToLower(f.Name)
		}
		keys[name] = f.Type
	}
	return keys
}

// unknownKey is the error of key k, unknown in the section at path, with
// the nearest known key when one is near enough to be a typo of it.
func unknownKey(k *yaml.Node, path string, keys map[string]reflect.Type) error {
	if moved := movedKeys()[join(path, k.Value)]; moved != nil {
		return fmt.Errorf("line %d: %s is now %s", k.Line, k.Value, strings.Join(moved, " and "))
	}
	where := ""
	if path != "" {
		where = " in section " + fmt.Sprintf("%q", path)
	}
	msg := fmt.Sprintf("line %d: unknown key %q%s", k.Line, k.Value, where)
	best, bestD := "", max(2, len(k.Value)/3)+1 // farther is no typo
	for name := range keys {
		if d := distance(k.Value, name); d < bestD || d == bestD && best != "" && name < best {
			best, bestD = name, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	return errors.New(msg)
}

// distance is the Levenshtein distance between a and b (bytes).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// kind says what a value of type t must be, in a configuration file's
// words.
func kind(t reflect.Type) string {
	switch {
	case t == reflect.TypeOf(time.Duration(0)):
		return "a duration (such as 30s, 2m or 1h)"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "a whole number"
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		return "a whole number, 0 or more"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Slice:
		return "a list (\"- item\" lines, or [a, b])"
	case t.Kind() == reflect.Map:
		return "a map of keys and values"
	}
	return "a valid value"
}

// printableValue is a YAML value as an error quotes it: a scalar quoted, a
// list or map named.
func printableValue(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a section of keys"
	}
	v := n.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("%q", v)
}

// section names the section at path for a message ("the file" at the top).
func section(path string) string {
	if path == "" {
		return "the file"
	}
	return fmt.Sprintf("%q", path)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// movedKeys maps each top-level key of the flat schema (before sections)
// to the keys that replaced it. Such a key is refused with its new place
// rather than read (or ignored): one name for each setting.
func movedKeys() map[string][]string {
	return map[string][]string{
		"ssh_addr": {"ssh.addr"}, "host_key": {"ssh.host_key"}, "escape": {"ssh.escape"},
		"fail_delay":       {"ssh.fail_delay", "admin.fail_delay"},
		"login_grace_time": {"ssh.login_grace_time"}, "max_conns": {"ssh.max_conns"},
		"max_unauthenticated":            {"ssh.max_unauthenticated"},
		"max_unauthenticated_per_source": {"ssh.max_unauthenticated_per_source"},
		"max_conns_per_source":           {"ssh.max_conns_per_source"},
		"proxy_protocol_from":            {"ssh.proxy_protocol_from"},
		"ssh_legacy_algorithms":          {"ssh.legacy_algorithms"},

		"admin_addr": {"admin.addr"}, "admin_token": {"admin.token"},
		"tls_cert": {"admin.tls_cert"}, "tls_key": {"admin.tls_key"}, "insecure_http": {"admin.insecure_http"},
		"admin_read_header_timeout":         {"admin.read_header_timeout"},
		"admin_read_timeout":                {"admin.read_timeout"},
		"admin_idle_timeout":                {"admin.idle_timeout"},
		"admin_max_conns":                   {"admin.max_conns"},
		"admin_max_unauth_conns":            {"admin.max_unauth_conns"},
		"admin_max_unauth_conns_per_source": {"admin.max_unauth_conns_per_source"},
		"admin_max_token_conns_per_source":  {"admin.max_token_conns_per_source"},
		"admin_proxy_protocol_from":         {"admin.proxy_protocol_from"},
		"trusted_proxies":                   {"admin.trusted_proxies"},

		"state_dir": {"daemon.state_dir"}, "shutdown_timeout": {"daemon.shutdown_timeout"}, "demo": {"daemon.demo"},
		"db": {"db.dsn"}, "seal_key": {"db.seal_key"}, "db_grace": {"db.grace"},
		"change_timeout": {"access.change_timeout"}, "epoch_poll": {"access.poll"},
		"power_timeout": {"commands.timeout"},
		"history_bytes": {"history.bytes"}, "history_retention": {"history.retention"},
		"replica_id": {"replica.id"}, "peer_addr": {"replica.peer_addr"},
		"peer_advertise": {"replica.peer_advertise"}, "lease_ttl": {"cluster.lease_ttl"},

		"scrollback": {"console.scrollback"}, "linger": {"console.linger"},
		"viewer_queue": {"console.viewer_queue"}, "drop_slow_viewers": {"console.drop_slow_viewers"},
		"console_capture":              {"console.capture"},
		"max_sessions_per_node":        {"sessions.max_per_node"},
		"max_sessions_per_source":      {"sessions.max_per_source"},
		"max_http_sessions_per_source": {"sessions.max_per_source_http"},
	}
}

// envName is the OBMD_ variable of a key ("ssh.addr": OBMD_SSH_ADDR).
func envName(key string) string {
	return "OBMD_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// movedEnv refuses the variables of moved keys (OBMD_LOGIN_GRACE_TIME),
// naming the new ones, but for those that are still a variable: of the new
// key (OBMD_ADMIN_TOKEN is admin.token's) or of a flag (OBMD_DB, --db's).
func movedEnv(getenv func(string) string, flagEnv map[string]bool) error {
	var errs []error
	for old, moved := range movedKeys() {
		name := envName(old)
		var now []string
		for _, m := range moved {
			now = append(now, envName(m))
		}
		if getenv(name) == "" || flagEnv[name] || slices.Contains(now, name) {
			continue
		}
		errs = append(errs, fmt.Errorf("%s is now %s (%s)", name, strings.Join(now, " and "), strings.Join(moved, " and ")))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}
