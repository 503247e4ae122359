package admin

import (
	"strings"
	"testing"
)

func TestValidLabel(t *testing.T) {
	tests := []struct {
		label string
		err   string // "" = valid; else a substring of the error
	}{
		{"n1", ""},
		{"node-17", ""},
		{"rack 3 node 4", ""},
		{"nœud_7.a:b@c", ""},
		{"...", ""},
		{"a..b", ""},
		{strings.Repeat("a", 80), ""},
		{strings.Repeat("é", 40), ""},
		{"", "empty"},
		{strings.Repeat("a", 81), "81 bytes"},
		{strings.Repeat("é", 41), "82 bytes"},
		{".", "reserved"},
		{"..", "reserved"},
		{"a/b", `"/"`},
		{"/", `"/"`},
		{"a\x00b", "control"},
		{"a\nb", "control"},
		{"a\x7fb", "control"},
		{"a\u0085b", "control"},
		{"a\u009bb", "control"},
		{"a\u202eb", "non-printable"},
		{"a\u200bb", "non-printable"},
		{"a\xffb", "UTF-8"},
		{" a", "white space"},
		{"a ", "white space"},
		{"\u3000a", "white space"},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			err := ValidLabel(tt.label)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("got %v, want an error containing %q", err, tt.err)
			case err != nil && strings.ContainsAny(err.Error(), "\x00\n\x7f\u0085\u202e"):
				t.Errorf("error %q echoes raw control characters", err)
			}
		})
	}
}
