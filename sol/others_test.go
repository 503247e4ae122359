package sol

import (
	"slices"
	"testing"
)

func TestOthers(t *testing.T) {
	vs := []ViewerInfo{{Session: "1", Name: "#1"}, {Session: "2", Name: "#2"}, {Session: "3", Name: "#3"}}
	who := func(id string) Who { return Who{Session: id, Name: "#" + id} }
	for _, tc := range []struct {
		writer, self Who
		want         []string
	}{
		{who("2"), who("1"), []string{"#2 (writing)", "#3"}},
		{who("1"), who("1"), []string{"#2", "#3"}},
		{Who{}, who("3"), []string{"#1", "#2"}},
		{who("ab-7"), who("1"), []string{"#2", "#3", "#ab-7 (writing, on another replica)"}},
	} {
		if got := Others(vs, tc.writer, tc.self); !slices.Equal(got, tc.want) {
			t.Errorf("writer %q, self %q: got %q, want %q", tc.writer, tc.self, got, tc.want)
		}
	}
}
