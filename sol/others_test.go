package sol

import (
	"slices"
	"testing"
)

func TestOthers(t *testing.T) {
	vs := []ViewerInfo{{Name: "#1"}, {Name: "#2"}, {Name: "#3"}}
	for _, tc := range []struct {
		writer, self string
		want         []string
	}{
		{"#2", "#1", []string{"#2 (writing)", "#3"}},
		{"#1", "#1", []string{"#2", "#3"}},
		{"", "#3", []string{"#1", "#2"}},
		{"ab-7", "#1", []string{"#2", "#3", "ab-7 (writing, on another replica)"}},
	} {
		if got := Others(vs, tc.writer, tc.self); !slices.Equal(got, tc.want) {
			t.Errorf("writer %q, self %q: got %q, want %q", tc.writer, tc.self, got, tc.want)
		}
	}
}
