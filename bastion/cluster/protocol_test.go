package cluster

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/protocol.golden's sections of unreleased versions")

// goldenFile lists the peer protocol version by version: what each
// version sends, with the form of each payload. A section whose heading
// names a release ("shipped in v0.9.0") is frozen: replicas of that
// release speak it.
const goldenFile = "testdata/protocol.golden"

// TestProtocolGolden: the messages of every version this release speaks
// are those of the golden file. A change to a message of a version that
// has shipped (a field added to a payload, a message dropped or added)
// fails it: such a change is a new version (protocol.go).
func TestProtocolGolden(t *testing.T) {
	data, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	sections := goldenSections(string(data))
	changed := false
	for v := MinProtocolVersion; v <= ProtocolVersion; v++ {
		got := listProtocol(v)
		s, ok := sections[v]
		switch {
		case !ok && *updateGolden:
			sections[v] = goldenSection{heading: fmt.Sprintf("## protocol %d (unreleased)", v), body: got}
			changed = true
		case !ok:
			t.Errorf("%s has no section for protocol %d (go test -run TestProtocolGolden -update adds it)", goldenFile, v)
		case s.body == got:
		case s.shipped() != "":
			t.Errorf("protocol %d shipped in %s, and this code speaks it differently: a change of the peer protocol "+
				"is a new version (bump ProtocolVersion, and register the new form in messages since it).\ngot:\n%s\nwant:\n%s",
				v, s.shipped(), got, s.body)
		case *updateGolden:
			s.body = got
			sections[v] = s
			changed = true
		default:
			t.Errorf("protocol %d (unreleased) differs from %s (go test -run TestProtocolGolden -update rewrites it).\ngot:\n%s\nwant:\n%s",
				v, goldenFile, got, s.body)
		}
	}
	if changed {
		if err := os.WriteFile(goldenFile, []byte(renderGolden(string(data), sections)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProtocolRegistered: every message type named in the package's code
// is in messages (so in the golden file).
func TestProtocolRegistered(t *testing.T) {
	known := map[string]bool{peerUser: true}
	for _, m := range messages {
		known[m.name] = true
	}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, p := range pkgs {
		ast.Inspect(p, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !(strings.HasSuffix(s, "@obmd") || strings.HasPrefix(s, "obmd-")) {
				return true
			}
			found++
			if !known[s] {
				t.Errorf("%s: %q looks like a peer message type, and messages does not list it", fset.Position(lit.Pos()), s)
			}
			return true
		})
	}
	if found < len(known)-1 {
		t.Errorf("found %d message names in the code, want at least %d: the scan is broken", found, len(known)-1)
	}
}

// TestIdent: each version's identification string names it, and a peer
// speaks the lower of the two highest versions.
func TestIdent(t *testing.T) {
	for v := 1; v <= ProtocolVersion+1; v++ {
		got, err := identVersion([]byte(identFor(v)))
		if err != nil || got != v {
			t.Errorf("identVersion(%q): got %d, %v, want %d", identFor(v), got, err, v)
		}
	}
	if identFor(1) != "SSH-2.0-obmd-peer" {
		t.Errorf("protocol 1's identification: got %q, want v0.9.0's", identFor(1))
	}
	for _, bad := range []string{"SSH-2.0-OpenSSH_9.2", "SSH-2.0-obmd-peer v", "SSH-2.0-obmd-peer v1", "SSH-2.0-obmd-peer v0",
		"SSH-2.0-obmd-peer vx", "SSH-2.0-obmd-peer2", "SSH-2.0-obmd-peer v2 x"} {
		if v, err := identVersion([]byte(bad)); err == nil {
			t.Errorf("identVersion(%q): got %d, want an error", bad, v)
		}
	}
	c := &Cluster{proto: ProtocolVersion}
	for theirs, want := range map[int]int{1: 1, ProtocolVersion: ProtocolVersion, ProtocolVersion + 3: ProtocolVersion} {
		if got, err := c.negotiate([]byte(identFor(theirs))); err != nil || got != want {
			t.Errorf("negotiate with a peer speaking up to %d: got %d, %v, want %d", theirs, got, err, want)
		}
	}
}

// goldenSection is one version's part of the golden file.
type goldenSection struct {
	heading string // "## protocol N (...)"
	body    string
}

var shippedRE = regexp.MustCompile(`\(shipped in (v[0-9][^)]*)\)`)

// shipped is the release that shipped the section's version, "" if none.
func (s goldenSection) shipped() string {
	if m := shippedRE.FindStringSubmatch(s.heading); m != nil {
		return m[1]
	}
	return ""
}

var headingRE = regexp.MustCompile(`(?m)^## protocol (\d+)\b.*$`)

// goldenSections splits the golden file into its versions' sections.
func goldenSections(data string) map[int]goldenSection {
	out := map[int]goldenSection{}
	locs := headingRE.FindAllStringSubmatchIndex(data, -1)
	for i, l := range locs {
		v, _ := strconv.Atoi(data[l[2]:l[3]])
		end := len(data)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		out[v] = goldenSection{heading: data[l[0]:l[1]], body: strings.TrimLeft(data[l[1]:end], "\n")}
	}
	return out
}

// renderGolden is the golden file with sections: its preamble (everything
// before the first section) kept.
func renderGolden(data string, sections map[int]goldenSection) string {
	var b strings.Builder
	if loc := headingRE.FindStringIndex(data); loc != nil {
		b.WriteString(data[:loc[0]])
	} else {
		b.WriteString(data)
	}
	for _, v := range slices.Sorted(maps.Keys(sections)) {
		s := sections[v]
		b.WriteString(s.heading + "\n\n" + s.body)
	}
	return b.String()
}

// listProtocol lists what protocol version v sends: the identification,
// then every message with its payload's and reply's forms, one a line,
// ending with an empty line.
func listProtocol(v int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "identification %q, user %q\n", identFor(v), peerUser)
	for _, m := range messages {
		if m.since > v || m.until != 0 && m.until <= v {
			continue
		}
		fmt.Fprintf(&b, "%s %s (%s)\n", m.kind, m.name, m.dir)
		if m.payload != nil {
			fmt.Fprintf(&b, "    payload: %s\n", form(m.payload))
		}
		if m.reply != nil {
			fmt.Fprintf(&b, "    reply: %s\n", form(m.reply))
		}
	}
	b.WriteString("\n")
	return b.String()
}

// form is how a payload or reply is encoded.
func form(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case rawBytes:
		return "raw bytes"
	case jsonOf:
		return "JSON " + jsonForm(reflect.TypeOf(x.v))
	}
	return "SSH wire " + sshForm(reflect.TypeOf(v))
}

// sshForm is a struct as ssh.Marshal encodes it: its fields in order.
func sshForm(t reflect.Type) string {
	var fields []string
	for i := range t.NumField() {
		f := t.Field(i)
		fields = append(fields, f.Name+" "+f.Type.String())
	}
	return "{" + strings.Join(fields, ", ") + "}"
}

// jsonForm is a type as encoding/json writes it: objects with their keys
// ("?" when omitted if empty), arrays, and the scalar kinds.
func jsonForm(t reflect.Type) string {
	if t == reflect.TypeOf(time.Time{}) {
		return "time"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonForm(t.Elem())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "base64"
		}
		return "[" + jsonForm(t.Elem()) + "]"
	case reflect.Struct:
		var keys []string
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if tag == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if strings.Contains(opts, "omit") {
				name += "?"
			}
			keys = append(keys, name+": "+jsonForm(f.Type))
		}
		return "{" + strings.Join(keys, ", ") + "}"
	}
	return t.Kind().String()
}

// TestProtocol1Forms: a payload whose form changed in protocol 2 is sent
// to a protocol 1 peer as its registered protocol 1 form, each field of
// that form carried (none dropped by the conversion), and read back from
// it; in protocol 2 it round-trips whole.
func TestProtocol1Forms(t *testing.T) {
	check := func(name string, m any, wire1 []byte, back1, back2 any, v1 any) {
		t.Helper()
		rv := reflect.ValueOf(v1)
		for i := range rv.NumField() {
			if rv.Field(i).IsZero() {
				t.Errorf("%s in protocol 1: field %s dropped", name, rv.Type().Field(i).Name)
			}
		}
		if want := gossh.Marshal(v1); !bytes.Equal(wire1, want) {
			t.Errorf("%s in protocol 1: sent %x, want its protocol 1 form %x", name, wire1, want)
		}
		v2 := reflect.ValueOf(m)
		b1 := reflect.ValueOf(back1)
		for i := range v2.NumField() {
			f := v2.Type().Field(i)
			_, inV1 := rv.Type().FieldByName(f.Name)
			if got := b1.Field(i); inV1 && !reflect.DeepEqual(got.Interface(), v2.Field(i).Interface()) ||
				!inV1 && !got.IsZero() {
				t.Errorf("%s read in protocol 1: %s = %v", name, f.Name, got)
			}
		}
		if !reflect.DeepEqual(back2, m) {
			t.Errorf("%s in protocol 2: got %+v, want %+v", name, back2, m)
		}
	}
	open := consoleOpen{Label: "n1", From: "rep-a", Epoch: 7, Take: true}
	openNoTake := open
	openNoTake.Take = false
	w1, err := marshalConsoleOpen(openNoTake, 1)
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := parseConsoleOpen(w1, 1)
	w2, _ := marshalConsoleOpen(open, 2)
	b2, _ := parseConsoleOpen(w2, 2)
	check("consoleOpen", open, w1, b1, b2, open.v1())
	if _, err := marshalConsoleOpen(open, 1); err == nil {
		t.Error("consoleOpen with Take in protocol 1: got no error")
	}

	role := roleMsg{Op: 3, Viewer: 9, Session: "s-1", Name: "alice", Want: true}
	rb1, _ := parseIn[roleMsg, roleMsgV1](marshalIn[roleMsgV1](role, 1), 1)
	rb2, _ := parseIn[roleMsg, roleMsgV1](marshalIn[roleMsgV1](role, 2), 2)
	check("roleMsg", role, marshalIn[roleMsgV1](role, 1), rb1, rb2, role.v1())

	roles := rolesMsg{Writer: 4, Session: "s-2", Name: "bob", Seq: 11, Lender: 5}
	sb1, _ := parseIn[rolesMsg, rolesMsgV1](marshalIn[rolesMsgV1](roles, 1), 1)
	sb2, _ := parseIn[rolesMsg, rolesMsgV1](marshalIn[rolesMsgV1](roles, 2), 2)
	check("rolesMsg", roles, marshalIn[rolesMsgV1](roles, 1), sb1, sb2, roles.v1())
}
