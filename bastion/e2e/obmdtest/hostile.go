package obmdtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode"

	gossh "golang.org/x/crypto/ssh"
)

// RawControl reports the first raw control character (other than \n, \r, \t)
// in s, or "".
func RawControl(s string) string {
	for _, r := range s {
		if r != '\n' && r != '\r' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
			return fmt.Sprintf("%U", r)
		}
	}
	return ""
}

// NoRawInLogs checks every logged string value for raw control characters.
func NoRawInLogs(t *testing.T, o *Daemon) {
	t.Helper()
	for _, line := range strings.Split(o.Logs.String(), "\n") {
		var fields map[string]any
		if json.Unmarshal([]byte(line), &fields) != nil {
			continue
		}
		for k, v := range fields {
			if s, ok := v.(string); ok && RawControl(s) != "" {
				t.Errorf("log field %s=%q holds a raw control character", k, s)
			}
		}
	}
}

// Connect is an authenticated x/crypto connection as user with a
// token, closed at the test's end.
func (o *Daemon) Connect(t testing.TB, user, token string) *gossh.Client {
	t.Helper()
	c, err := o.Dial(user, gossh.Password(token))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
