package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/stmcginnis/gofish/schemas"
)

// TestClassify: errors are classed by step and cause, and their text never
// carries the BMC's address or what the BMC said in prose.
func TestClassify(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	httpErr := func(status int, body string) error { return schemas.ConstructError(status, []byte(body)) }
	urlErr := func(err error) error {
		return &url.Error{Op: "Get", URL: "https://10.0.0.5:8443/redfish/v1/", Err: err}
	}
	idrac := `{"error":{"code":"Base.1.8.GeneralError","message":"at https://10.0.0.5","@Message.ExtendedInfo":[{"MessageId":"IDRAC.2.8.SYS403"}]}}`
	tests := []struct {
		name   string
		ctx    context.Context
		step   string
		action bool
		err    error
		kind   error
		text   string
	}{
		{"401", live, stepLogin, false, httpErr(401, ""), ErrAuth, "log in: BMC refused the credentials (HTTP 401)"},
		{"403", live, "reset On", true, httpErr(403, ""), ErrAuth, ""},
		{"404 system", live, stepSystem, false, httpErr(404, ""), ErrSystemMissing, ""},
		{"404 login", live, stepLogin, false, httpErr(404, ""), ErrProtocol, ""},
		{"404 action", live, "reset On", true, httpErr(404, ""), ErrNotAllowed, ""},
		{"409 action", live, "reset On", true, httpErr(409, idrac), ErrNotAllowed,
			"reset On: action not allowed by the BMC (HTTP 409 IDRAC.2.8.SYS403)"},
		{"409 read", live, "wait for power On", false, httpErr(409, ""), ErrBMC, ""},
		{"400 action", live, "set boot override", true, httpErr(400, ""), ErrNotAllowed, ""},
		{"500", live, "reset On", true, httpErr(500, "boom at 10.0.0.5"), ErrBMC, "reset On: BMC request failed (HTTP 500)"},
		{"bad message id", live, "reset On", true, httpErr(400, `{"error":{"code":"see https://10.0.0.5/x"}}`),
			ErrNotAllowed, "reset On: action not allowed by the BMC (HTTP 400)"},
		{"refused", live, stepLogin, false, urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}),
			ErrUnreachable, "log in: BMC unreachable"},
		{"dns", live, stepLogin, false, urlErr(&net.DNSError{Name: "bmc.example", Err: "no such host"}), ErrUnreachable, ""},
		{"eof", live, stepLogin, false, urlErr(io.EOF), ErrUnreachable, ""},
		{"redirect", live, stepLogin, false, urlErr(errRedirect), ErrProtocol, ""},
		{"json", live, stepSystem, false, &json.SyntaxError{}, ErrProtocol, ""},
		{"too large", live, stepSystem, false, urlErr(errBodyTooLarge), ErrProtocol, ""},
		{"other", live, stepSystem, false, errors.New("odd at 10.0.0.5"), ErrBMC, "find system: BMC request failed"},
		{"cancelled", cancelled, stepLogin, false, urlErr(context.Canceled), context.Canceled, "log in: cancelled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := classify(tt.ctx, tt.step, tt.action, tt.err)
			if !errors.Is(e, tt.kind) {
				t.Errorf("kind: got %v, want %v", e.Kind, tt.kind)
			}
			if !errors.Is(e, tt.err) {
				t.Errorf("the underlying error is not in the chain")
			}
			if tt.text != "" && e.Error() != tt.text {
				t.Errorf("text: got %q, want %q", e.Error(), tt.text)
			}
			if msg := e.Error(); strings.Contains(msg, "10.0.0.5") || strings.Contains(msg, "bmc.example") {
				t.Errorf("text %q names the BMC", msg)
			}
			if !strings.HasPrefix(e.Detail(), e.Error()) {
				t.Errorf("Detail %q does not start with the text", e.Detail())
			}
		})
	}
	if e := classify(live, "x", false, &Error{Step: "y", Kind: ErrAuth}); e.Step != "y" {
		t.Errorf("an *Error is classed again: got step %q, want y", e.Step)
	}
}

// TestLimitedBody: a body up to maxBody reads whole; one byte more fails.
func TestLimitedBody(t *testing.T) {
	for _, n := range []int{0, maxBody} {
		got, err := io.ReadAll(&limitedBody{rc: io.NopCloser(bytes.NewReader(make([]byte, n))), left: maxBody + 1})
		if err != nil || len(got) != n {
			t.Errorf("%d bytes: got %d, %v; want all, nil", n, len(got), err)
		}
	}
	_, err := io.ReadAll(&limitedBody{rc: io.NopCloser(bytes.NewReader(make([]byte, maxBody+1))), left: maxBody + 1})
	if !errors.Is(err, errBodyTooLarge) {
		t.Errorf("maxBody+1 bytes: got %v, want errBodyTooLarge", err)
	}
}
