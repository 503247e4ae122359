package docs

// Fast tests of how examples are read and compared (no obmd needed), so
// that a change to the harness cannot quietly make every example pass.

import (
	"slices"
	"strings"
	"testing"
)

func TestParseBlocks(t *testing.T) {
	md := strings.Join([]string{
		"text",
		"```sh",
		"echo one \\",
		"  two",
		"# a comment",
		"cat > f <<'EOF'",
		"x",
		"EOF",
		"```",
		"- item",
		"  ```console term=2 timeout=1m",
		"  $ ssh node-17@obm-host",
		"  banner «Enter»",
		"  ```",
		"```yaml",
		"a: 1",
		"```",
		"```sh no-test: needs HIL",
		"hil",
		"```",
		"```sh",
		"echo one \\",
		"```",
	}, "\n")
	blocks, err := parseBlocks("x.md", md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 4 {
		t.Fatalf("got %d blocks, want 4 (the yaml one is text)", len(blocks))
	}
	sh := blocks[0].commands()
	want := [][]string{{"echo one \\", "  two"}, {"cat > f <<'EOF'", "x", "EOF"}}
	if len(sh) != 2 || !slices.Equal(sh[0].typed, want[0]) || !slices.Equal(sh[1].typed, want[1]) {
		t.Errorf("sh commands: got %q, want %q", sh, want)
	}
	con := blocks[1]
	if con.term != "2" || con.timeout.String() != "1m0s" || con.line != 11 {
		t.Errorf("console block: got term %q timeout %v line %d", con.term, con.timeout, con.line)
	}
	if c := con.commands(); len(c) != 1 || c[0].typed[0] != "ssh node-17@obm-host" || !slices.Equal(c[0].expect, []string{"banner «Enter»"}) {
		t.Errorf("console commands: got %q", c)
	}
	if blocks[2].noTest != "needs HIL" {
		t.Errorf("no-test reason: got %q", blocks[2].noTest)
	}
	if blocks[3].id != "x.md: echo one \\ #2" {
		t.Errorf("a repeated first line: got id %q", blocks[3].id)
	}

	for name, bad := range map[string]string{
		"unclosed":           "```sh\necho\n",
		"no-test no reason":  "```sh no-test\necho\n```\n",
		"unknown attribute":  "```sh colour=red\necho\n```\n",
		"transcript as text": "```\n$ echo\n```\n",
	} {
		if _, err := parseBlocks("x.md", bad); err == nil {
			t.Errorf("%s: parsed without an error", name)
		}
	}
}

func TestNormalise(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"\x1b[36mINFO\x1b[0m[2026-12-06T03:04:16Z] x\r", "INFO[<time>] x"},
		{"token: H_87QhvhktfeV2vERuncFqr-Y2egc33K", "token: <token>"},
		{"admin_max_token_conns_per_source=1", "admin_max_token_conns_per_source=1"}, // no digit or capital: no token
		{"SHA256:+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU.", "SHA256:<fingerprint>."},
		{"127.0.0.1:50040 127.0.0.1:2222 took 1.5ms", "127.0.0.1:<port> 127.0.0.1:2222 took <duration>"},
		{"#12 took over; 4   exec  token", "#<id> took over; 4  exec  token"},
		{"12   exec  token", "<id> exec  token"},
		{"timeout 5m, 20s", "timeout 5m, 20s"},
		{"BMC session 0x00000082, code 0xd5", "BMC session 0x<BMC session>, code 0xd5"},
	} {
		if got := normalise(c.in)[0]; got != c.want {
			t.Errorf("normalise(%q): got %q, want %q", c.in, got, c.want)
		}
	}
}

func TestMatchLines(t *testing.T) {
	got := []string{"a", "b", "c", "d"}
	for _, c := range []struct {
		want   []string
		all    bool
		prefix int // -1: no prefix matches
	}{
		{[]string{"a", "b", "c", "d"}, true, 4},
		{[]string{"a", "...", "d"}, true, 4},
		{[]string{"...", "c", "..."}, true, 3},
		{[]string{"a", "..."}, true, 1},
		{[]string{"a", "b"}, false, 2},
		{[]string{"a", "x...", "c"}, false, -1},
		{[]string{"a", "...", "x"}, false, -1},
		{[]string{"", "a", "", "b", "c", "d"}, true, 4}, // blank lines do not count
		{[]string{"...b", "c", "d"}, false, -1},
	} {
		p := patterns(c.want)
		if all := matchAll(p, got); all != c.all {
			t.Errorf("matchAll(%q): got %v, want %v", c.want, all, c.all)
		}
		n, ok := matchPrefix(p, got)
		if !ok {
			n = -1
		}
		if n != c.prefix {
			t.Errorf("matchPrefix(%q): got %d, want %d", c.want, n, c.prefix)
		}
	}
	if !promptPattern("(demo@127.0.0.1) Password (node token): ").MatchString("(demo@127.0.0.1) Password (node token):") {
		t.Error("a prompt does not match itself")
	}
	if promptPattern("sim login: ").MatchString("sim$") {
		t.Error("a prompt matches another")
	}
}

func TestSegmentsAndKeys(t *testing.T) {
	segs := segments([]string{"banner", "«Enter»", "sim login: «echo hi»", "hi", "sim$ «Ctrl-E c .»", "[obmd: detached]"})
	if len(segs) != 4 || segs[1].prompt != "sim login: " || segs[1].input != "echo hi" || segs[3].hasIn ||
		!slices.Equal(segs[0].lines, []string{"banner"}) || !slices.Equal(segs[3].lines, []string{"[obmd: detached]"}) {
		t.Fatalf("segments: got %+v", segs)
	}
	named := func(s string) (string, bool) { return "TOKEN", s == "the token" }
	for in, want := range map[string]string{
		"Enter":           "\r",
		"Ctrl-E c .":      "\x05c.",
		"Ctrl-E c Ctrl-E": "\x05c\x05",
		"Enter ~ .":       "\r~.",
		"the token":       "TOKEN\r",
		"echo hi":         "echo hi\r",
	} {
		if got, err := keys(in, named); err != nil || got != want {
			t.Errorf("keys(%q): got %q, %v, want %q", in, got, err, want)
		}
	}
	if _, err := keys("Ctrl-E cc", named); err == nil {
		t.Error(`keys("Ctrl-E cc"): no error`)
	}
}

func TestEchoEnd(t *testing.T) {
	prompt := "\x1eP0\x1f"
	for _, c := range []struct {
		out  string
		n    int
		end  int
		done bool
	}{
		{"cmd\r\nout\r\n", 1, 5, true},
		{"a\r\nb\r\nout", 2, 6, true},
		{"cmd", 1, 0, false},
		{prompt, 1, 0, true}, // typed without echo (a password): the prompt came back
		{"x" + prompt + "\n", 1, 1, true},
	} {
		end, done := echoEnd([]byte(c.out), c.n)
		if end != c.end || done != c.done {
			t.Errorf("echoEnd(%q, %d): got %d, %v, want %d, %v", c.out, c.n, end, done, c.end, c.done)
		}
	}
	if got := lineEnd("a\nb\nc", 2); got != 4 {
		t.Errorf("lineEnd: got %d, want 4", got)
	}
	if got := lineEnd("a\nb", 2); got != 3 {
		t.Errorf("lineEnd of a last line without newline: got %d, want 3", got)
	}
}

func TestAnchors(t *testing.T) {
	md := "# Tenant guide: your node's console\n## `sessions` and doctor\n## Locked out?\n" +
		"```yaml\n# obmd.yaml\n```\n## Locked out?\n#hashtag\n"
	got := anchors(md)
	for _, a := range []string{"tenant-guide-your-nodes-console", "sessions-and-doctor", "locked-out", "locked-out-1"} {
		if !got[a] {
			t.Errorf("no anchor %q in %v", a, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("got %d anchors, want 4 (a fenced line and #hashtag are no headings): %v", len(got), got)
	}
}
