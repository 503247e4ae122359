package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/daemon"
)

// TestConfigYAMLDecoding pins what obmd relies on from its YAML library
// beyond unknown keys (TestLoadConfigErrors): a repeated key is refused
// with both lines named, durations are Go durations and a bare number is
// not one, merge keys lend their keys, and YAML 1.1 words are booleans.
func TestConfigYAMLDecoding(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		check   func(daemon.Config) bool // when the file is valid
		wantErr []string                 // substrings of the error otherwise
	}{
		{name: "repeated key", yaml: "auth_limits:\n  per_source: 3\nauth_limits:\n  per_node: 4\n",
			wantErr: []string{`line 3: mapping key "auth_limits" already defined at line 1`}},
		{name: "repeated nested key", yaml: "console:\n  linger: 2s\n  linger: 3s\n",
			wantErr: []string{`line 3: mapping key "linger" already defined at line 2`}},
		{name: "duration", yaml: "console:\n  linger: 1m30s\nauth_limits:\n  window: 1.5h\n",
			check: func(c daemon.Config) bool {
				return c.Console.Linger == 90*time.Second && c.AuthLimits.Window == 90*time.Minute
			}},
		{name: "milliseconds", yaml: "console:\n  linger: 500ms\n",
			check: func(c daemon.Config) bool { return c.Console.Linger == 500*time.Millisecond }},
		{name: "bare number is no duration", yaml: "console:\n  linger: 10\n",
			wantErr: []string{`line 2: console.linger: "10" is not a duration`}},
		{name: "merge key", yaml: "auth_limits:\n  <<: {per_source: 3, per_node: 9}\n  per_node: 4\n",
			check: func(c daemon.Config) bool { return c.AuthLimits.PerSource == 3 && c.AuthLimits.PerNode == 4 }},
		{name: "yes is true", yaml: "console:\n  drop_slow_viewers: yes\n",
			check: func(c daemon.Config) bool { return c.Console.DropSlow }},
		{name: "off is false", yaml: "console:\n  drop_slow_viewers: off\n",
			check: func(c daemon.Config) bool { return !c.Console.DropSlow }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := loadConfig("serve", []string{"--config", writeYAML(t, tt.yaml)}, fakeEnv(nil), io.Discard)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				if !tt.check(cfg) {
					t.Errorf("got %+v, want what %q says", cfg, tt.yaml)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error, want one mentioning %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got error %q, want it to mention %q", err, w)
				}
			}
		})
	}
}
