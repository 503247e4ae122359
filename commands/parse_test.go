package commands

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name, line string
		want       []string
		wantErr    string // substring; "" = no error
	}{
		{"empty", "", nil, ""},
		{"spaces only", "   ", nil, ""},
		{"one word", "power-on", []string{"power-on"}, ""},
		{"words", "  bootdev  pxe --persistent ", []string{"bootdev", "pxe", "--persistent"}, ""},
		{"double quotes", `bootdev "pxe"`, []string{"bootdev", "pxe"}, ""},
		{"single quotes", `help 'power-on'`, []string{"help", "power-on"}, ""},
		{"quoted space", `a "b c" d`, []string{"a", "b c", "d"}, ""},
		{"quote joins word", `ab"c d"e`, []string{"abc de"}, ""},
		{"other quote inside", `"it's"`, []string{"it's"}, ""},
		{"empty quoted word", `a "" b`, []string{"a", "", "b"}, ""},
		{"printable unicode", "héllo", []string{"héllo"}, ""},
		{"unterminated", `bootdev "pxe`, nil, "unterminated"},
		{"tab", "power-on\t--json", nil, `'\t'`},
		{"newline", "power-on\n", nil, `'\n'`},
		{"nul", "power\x00on", nil, `'\x00'`},
		{"escape", "\x1b[2Jpower-on", nil, `'\x1b'`},
		{"del", "power-on\x7f", nil, `'\x7f'`},
		{"c1 csi", "power-on\u009b2J", nil, `\u009b`},
		{"bidi override", "power-on\u202e", nil, `\u202e`},
		{"nbsp", "power-on\u00a0--json", nil, `\u00a0`},
		{"invalid utf8", "power-on\xff", nil, "not valid UTF-8"},
		{"too long", strings.Repeat("a", MaxLineBytes+1), nil, "too long"},
		{"max length ok", strings.Repeat("a", MaxLineBytes), []string{strings.Repeat("a", MaxLineBytes)}, ""},
		{"too many words", strings.Repeat("a ", MaxWords+1), nil, "too many words"},
		{"max words ok", strings.Repeat("a ", MaxWords), strings.Fields(strings.Repeat("a ", MaxWords)), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Split(tt.line)
			if tt.wantErr != "" {
				var ue *UsageError
				if !errors.As(err, &ue) {
					t.Fatalf("got %v (%T), want a *UsageError", err, err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("got %q, want it to contain %q", err, tt.wantErr)
				}
				checkSafe(t, err.Error())
				return
			}
			if err != nil {
				t.Fatalf("got %v, want no error", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// checkSafe fails unless s is one line of printable text.
func checkSafe(t *testing.T, s string) {
	t.Helper()
	for _, r := range s {
		if r != ' ' && !unicode.IsPrint(r) {
			t.Errorf("message %q holds non-printable %U", s, r)
			return
		}
	}
}

func TestQuoteTruncates(t *testing.T) {
	long := strings.Repeat("é", 100)
	got := quote(long)
	if want := `"` + strings.Repeat("é", quoteLimit/2) + `"...`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if got, want := quote("a\x1bb\u202e\xff"), `"a\x1bb\u202e\xff"`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		argv    []string
		want    Command
		wantErr string // substring; "" = no error
		errCmd  Name   // UsageError.Command
	}{
		{"empty is console", nil, Command{Name: CmdConsole}, "", ""},
		{"console", []string{"console"}, Command{Name: CmdConsole}, "", ""},
		{"console read-only", []string{"console", "--read-only"}, Command{Name: CmdConsole, ReadOnly: true}, "", ""},
		{"console ignore-eof", []string{"console", "--ignore-eof", "--read-only"}, Command{Name: CmdConsole, ReadOnly: true, IgnoreEOF: true}, "", ""},
		{"power-status", []string{"power-status"}, Command{Name: CmdPowerStatus}, "", ""},
		{"power-status json", []string{"power-status", "--json"}, Command{Name: CmdPowerStatus, JSON: true}, "", ""},
		{"power-on", []string{"power-on"}, Command{Name: CmdPowerOn}, "", ""},
		{"power-off", []string{"power-off"}, Command{Name: CmdPowerOff}, "", ""},
		{"power-off soft", []string{"power-off", "--soft"}, Command{Name: CmdPowerOff, Soft: true}, "", ""},
		{"power-off json soft", []string{"power-off", "--json", "--soft"}, Command{Name: CmdPowerOff, Soft: true, JSON: true}, "", ""},
		{"power-cycle", []string{"power-cycle"}, Command{Name: CmdPowerCycle}, "", ""},
		{"power-cycle force", []string{"power-cycle", "--force"}, Command{Name: CmdPowerCycle, Force: true}, "", ""},
		{"power-reset", []string{"power-reset"}, Command{Name: CmdPowerReset}, "", ""},
		{"bootdev pxe", []string{"bootdev", "pxe"}, Command{Name: CmdBootdev, Device: "pxe"}, "", ""},
		{"bootdev disk", []string{"bootdev", "disk"}, Command{Name: CmdBootdev, Device: "disk"}, "", ""},
		{"bootdev bios", []string{"bootdev", "bios"}, Command{Name: CmdBootdev, Device: "bios"}, "", ""},
		{"bootdev cdrom", []string{"bootdev", "cdrom"}, Command{Name: CmdBootdev, Device: "cdrom"}, "", ""},
		{"bootdev none", []string{"bootdev", "none"}, Command{Name: CmdBootdev, Device: "none"}, "", ""},
		{"bootdev upper case", []string{"bootdev", "PXE"}, Command{Name: CmdBootdev, Device: "pxe"}, "", ""},
		{"bootdev persistent", []string{"bootdev", "pxe", "--persistent"}, Command{Name: CmdBootdev, Device: "pxe", Persistent: true}, "", ""},
		{"bootdev flag first", []string{"bootdev", "--persistent", "--json", "disk"}, Command{Name: CmdBootdev, Device: "disk", Persistent: true, JSON: true}, "", ""},
		{"console-log", []string{"console-log"}, Command{Name: CmdConsoleLog}, "", ""},
		{"console-log lines", []string{"console-log", "--lines", "20"}, Command{Name: CmdConsoleLog, Lines: 20}, "", ""},
		{"console-log lines=", []string{"console-log", "--lines=100000"}, Command{Name: CmdConsoleLog, Lines: 100000}, "", ""},
		{"console-log lines 1", []string{"console-log", "--json", "--lines", "1"}, Command{Name: CmdConsoleLog, Lines: 1, JSON: true}, "", ""},
		{"console-log since", []string{"console-log", "--since", "10m"}, Command{Name: CmdConsoleLog, SinceAgo: 10 * time.Minute}, "", ""},
		{"console-log since time", []string{"console-log", "--since=2026-12-01T03:00:00Z"},
			Command{Name: CmdConsoleLog, SinceAt: time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)}, "", ""},
		{"console-log history flags", []string{"console-log", "--timestamps", "--follow", "--cast"},
			Command{Name: CmdConsoleLog, Timestamps: true, Follow: true, Cast: true}, "", ""},
		{"console-log bad since", []string{"console-log", "--since", "yesterday"}, Command{Name: CmdConsoleLog}, "--since wants", CmdConsoleLog},
		{"console-log since missing", []string{"console-log", "--since"}, Command{Name: CmdConsoleLog}, "--since needs", CmdConsoleLog},
		{"console-log follow json", []string{"console-log", "--follow", "--json"}, Command{Name: CmdConsoleLog, Follow: true, JSON: true},
			"--json does not go", CmdConsoleLog},
		{"sessions", []string{"sessions"}, Command{Name: CmdSessions}, "", ""},
		{"doctor", []string{"doctor"}, Command{Name: CmdDoctor}, "", ""},
		{"doctor json", []string{"doctor", "--json"}, Command{Name: CmdDoctor, JSON: true}, "", ""},
		{"help", []string{"help"}, Command{Name: CmdHelp}, "", ""},
		{"help topic", []string{"help", "bootdev"}, Command{Name: CmdHelp, Topic: CmdBootdev}, "", ""},
		{"dash h", []string{"-h"}, Command{Name: CmdHelp}, "", ""},
		{"dash dash help", []string{"--help"}, Command{Name: CmdHelp}, "", ""},
		{"command help", []string{"power-cycle", "--help"}, Command{Name: CmdHelp, Topic: CmdPowerCycle}, "", ""},
		{"command -h json", []string{"bootdev", "--json", "-h"}, Command{Name: CmdHelp, Topic: CmdBootdev, JSON: true}, "", ""},
		{"version", []string{"version"}, Command{Name: CmdVersion}, "", ""},
		{"version json", []string{"version", "--json"}, Command{Name: CmdVersion, JSON: true}, "", ""},

		{"unknown", []string{"foo"}, Command{}, `unknown command "foo"; try "help"`, ""},
		{"unknown json", []string{"foo", "--json"}, Command{JSON: true}, `unknown command "foo"`, ""},
		{"unknown escaped", []string{"\x1b[2J"}, Command{}, `unknown command "\x1b[2J"`, ""},
		{"json alone", []string{"--json"}, Command{JSON: true}, "--json must follow a command", ""},
		{"json first", []string{"--json", "power-on"}, Command{JSON: true}, "--json must follow a command", ""},
		{"empty name", []string{""}, Command{}, `unknown command ""`, ""},
		{"extra arg", []string{"power-on", "now"}, Command{Name: CmdPowerOn}, `power-on: unexpected argument "now"`, CmdPowerOn},
		{"bad flag", []string{"power-on", "--force"}, Command{Name: CmdPowerOn}, `power-on: unknown flag "--force"; try "help power-on"`, CmdPowerOn},
		{"soft on cycle", []string{"power-cycle", "--soft"}, Command{Name: CmdPowerCycle}, "unknown flag", CmdPowerCycle},
		{"force on off", []string{"power-off", "--force"}, Command{Name: CmdPowerOff}, "unknown flag", CmdPowerOff},
		{"single dash flag", []string{"power-off", "-s"}, Command{Name: CmdPowerOff}, "unknown flag", CmdPowerOff},
		{"json=", []string{"power-off", "--json=true"}, Command{Name: CmdPowerOff}, "unknown flag", CmdPowerOff},
		{"bootdev missing", []string{"bootdev"}, Command{Name: CmdBootdev}, "bootdev needs a device", CmdBootdev},
		{"bootdev only flags", []string{"bootdev", "--persistent"}, Command{Name: CmdBootdev, Persistent: true}, "bootdev needs a device", CmdBootdev},
		{"bootdev bad", []string{"bootdev", "floppy"}, Command{Name: CmdBootdev}, `unknown device "floppy"`, CmdBootdev},
		{"bootdev mock device", []string{"bootdev", "A"}, Command{Name: CmdBootdev}, "unknown device", CmdBootdev},
		{"bootdev two", []string{"bootdev", "pxe", "disk"}, Command{Name: CmdBootdev, Device: "pxe"}, `unexpected argument "disk"`, CmdBootdev},
		{"lines missing", []string{"console-log", "--lines"}, Command{Name: CmdConsoleLog}, "--lines needs a number", CmdConsoleLog},
		{"lines zero", []string{"console-log", "--lines", "0"}, Command{Name: CmdConsoleLog}, "from 1 to 100000", CmdConsoleLog},
		{"lines too many", []string{"console-log", "--lines", "100001"}, Command{Name: CmdConsoleLog}, "from 1 to 100000", CmdConsoleLog},
		{"lines huge", []string{"console-log", "--lines=99999999999999999999"}, Command{Name: CmdConsoleLog}, "from 1 to 100000", CmdConsoleLog},
		{"lines negative", []string{"console-log", "--lines", "-5"}, Command{Name: CmdConsoleLog}, "from 1 to 100000", CmdConsoleLog},
		{"lines plus", []string{"console-log", "--lines", "+5"}, Command{Name: CmdConsoleLog}, "from 1 to 100000", CmdConsoleLog},
		{"lines word", []string{"console-log", "--lines=ten"}, Command{Name: CmdConsoleLog}, `not "ten"`, CmdConsoleLog},
		{"lines empty", []string{"console-log", "--lines="}, Command{Name: CmdConsoleLog}, "from 1 to 100000", CmdConsoleLog},
		{"lines positional", []string{"console-log", "10"}, Command{Name: CmdConsoleLog}, "unexpected argument", CmdConsoleLog},
		{"console extra", []string{"console", "now"}, Command{Name: CmdConsole}, "unexpected argument", CmdConsole},
		{"doctor extra", []string{"doctor", "sol"}, Command{Name: CmdDoctor}, `doctor: unexpected argument "sol"`, CmdDoctor},
		{"doctor flag", []string{"doctor", "--force"}, Command{Name: CmdDoctor}, "unknown flag", CmdDoctor},
		{"help unknown topic", []string{"help", "foo"}, Command{Name: CmdHelp}, `unknown command "foo"`, ""},
		{"help two topics", []string{"help", "power-on", "power-off"}, Command{Name: CmdHelp, Topic: CmdPowerOn}, "unexpected argument", CmdHelp},
		{"long arg cut", []string{"power-on", strings.Repeat("x", 200)}, Command{Name: CmdPowerOn}, `"...`, CmdPowerOn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.argv)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("got %v (%T), want a *UsageError", err, err)
			}
			if !strings.Contains(ue.Msg, tt.wantErr) {
				t.Errorf("got %q, want it to contain %q", ue.Msg, tt.wantErr)
			}
			if ue.Command != tt.errCmd {
				t.Errorf("got UsageError.Command %q, want %q", ue.Command, tt.errCmd)
			}
			if len(ue.Msg) > 200 {
				t.Errorf("got a %d-byte message, want a short one", len(ue.Msg))
			}
			checkSafe(t, ue.Msg)
			if got := ExitCode(err); got != ExitUsage {
				t.Errorf("got exit code %d, want %d", got, ExitUsage)
			}
		})
	}
}

func TestUsageListsEveryCommand(t *testing.T) {
	u := Usage()
	for _, name := range []Name{CmdPowerStatus, CmdPowerOn, CmdPowerOff, CmdPowerCycle, CmdPowerReset,
		CmdBootdev, CmdConsole, CmdConsoleLog, CmdSessions, CmdDoctor, CmdHelp, CmdVersion} {
		if !strings.Contains(u, "\n  "+string(name)) {
			t.Errorf("usage lacks %s:\n%s", name, u)
		}
		if cu := CommandUsage(name); !strings.HasPrefix(cu, "usage: "+string(name)) {
			t.Errorf("got %q, want the usage of %s", cu, name)
		}
	}
	for _, flag := range []string{"--soft", "--force", "--persistent", "--read-only", "--lines N", "--json", "pxe|disk|bios|cdrom|none"} {
		if !strings.Contains(u, flag) {
			t.Errorf("usage lacks %s", flag)
		}
	}
	if got := CommandUsage("nope"); got != u {
		t.Errorf("got %q, want the whole usage for an unknown command", got)
	}
	for _, text := range append([]string{u}, commandUsages()...) {
		for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			if len(line) > 80 {
				t.Errorf("usage line too long (%d): %q", len(line), line)
			}
		}
	}
}

// commandUsages is the help of the automation commands.
func commandUsages() []string {
	var all []string
	for _, name := range []Name{CmdWaitFor, CmdSend, CmdExpect, CmdPowerOn, CmdPowerCycle} {
		all = append(all, CommandUsage(name))
	}
	return all
}
