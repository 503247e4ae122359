package redfish

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// maxBody bounds every response body read from a BMC.
const maxBody = 4 << 20

// session is one logged-in Redfish session and the system it drives. It is
// owned by one operation (BMC.do), which alone calls close.
type session struct {
	b   *BMC
	c   *gofish.APIClient // bound to the operation's context
	tr  *http.Transport   // closed by close
	id  string            // the session's URI, for logout
	sys *schemas.ComputerSystem
}

// open connects, logs in and finds the node's system.
//
// One Redfish session per operation, rather than basic auth: every service
// must offer sessions, while basic auth may be disabled by policy; the
// password crosses the wire once per operation instead of with every poll;
// and the session costs the BMC one slot for the operation's length only,
// because close always logs out (under a context of its own, so a cut or
// timed-out operation logs out too).
func (b *BMC) open(ctx context.Context) (*session, error) {
	s, err := b.login(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.findSystem(ctx); err != nil {
		s.close(ctx)
		return nil, err
	}
	return s, nil
}

// login connects and logs in; the session has no system yet.
func (b *BMC) login(ctx context.Context) (*session, error) {
	tr := b.transport()
	c, err := gofish.ConnectContext(ctx, gofish.ClientConfig{
		Endpoint:              b.endpoint,
		Username:              b.user,
		Password:              b.pass,
		HTTPClient:            b.httpClient(tr),
		NoModifyTransport:     true,
		ReuseConnections:      true,
		MaxConcurrentRequests: 1,
	})
	if err != nil {
		tr.CloseIdleConnections()
		return nil, classify(ctx, stepLogin, false, err)
	}
	s := &session{b: b, c: c, tr: tr}
	gs, err := c.GetSession()
	if err != nil || gs.Token == "" {
		// Without a Location there is nothing to log out of; with one but no
		// token, logout is tried anyway.
		if gs != nil {
			s.id = gs.ID
		}
		s.close(ctx)
		return nil, classify(ctx, stepLogin, false, errNoToken)
	}
	s.id = gs.ID
	return s, nil
}

// httpClient is the client of one operation over tr: bounded requests, no
// redirects (one would carry the token, or the password, elsewhere) and
// bounded bodies.
func (b *BMC) httpClient(tr *http.Transport) *http.Client {
	return &http.Client{
		Transport: limitBody{tr},
		Timeout:   b.cfg.RequestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errRedirect
		},
	}
}

// transport is a fresh HTTP transport for one operation: no proxy from the
// environment (the BMC network is not the proxy's), TLS 1.2 or later,
// verified against Config.RootCAs unless the node is insecure.
func (b *BMC) transport() *http.Transport {
	return &http.Transport{
		Proxy:       nil,
		DialContext: (&net.Dialer{Timeout: b.cfg.RequestTimeout}).DialContext,
		TLSClientConfig: &tls.Config{
			MinVersion:         tls.VersionTLS12,
			RootCAs:            b.cfg.RootCAs,
			InsecureSkipVerify: b.insecure, //nolint:gosec // the node's registered choice
		},
		TLSHandshakeTimeout:    b.cfg.RequestTimeout,
		MaxIdleConnsPerHost:    1,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// close logs out of the session and closes the transport's connections. The
// logout runs under a context of its own (LogoutTimeout), detached from
// ctx's cancellation, so that a cut operation still frees its session.
func (s *session) close(ctx context.Context) {
	defer s.tr.CloseIdleConnections()
	if s.id == "" {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.b.cfg.LogoutTimeout)
	defer cancel()
	if err := s.c.WithContext(lctx).GetService().DeleteSession(s.id); err != nil {
		e := classify(lctx, "log out", false, err)
		s.b.log.WithField("status", e.Status).WithError(fmt.Errorf("%s", e.Detail())).Warn("redfish_logout_failed")
	}
}

// findSystem loads the node's system: the one named by info.system, or the
// BMC's only one.
func (s *session) findSystem(ctx context.Context) error {
	path := systemsPath + "/" + s.b.system
	if s.b.system == "" {
		var err error
		if path, err = s.onlySystem(ctx); err != nil {
			return err
		}
	}
	sys, err := schemas.GetComputerSystem(s.c, path)
	if err != nil {
		return classify(ctx, stepSystem, false, err)
	}
	s.sys = sys
	return nil
}

// onlySystem returns the path of the BMC's only system.
func (s *session) onlySystem(ctx context.Context) (string, error) {
	resp, err := s.c.Get(systemsPath)
	defer schemas.DeferredCleanupHTTPResponse(resp)
	if err != nil {
		return "", classify(ctx, stepSystem, false, err)
	}
	var coll struct {
		Members []struct {
			ID string `json:"@odata.id"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&coll); err != nil {
		return "", classify(ctx, stepSystem, false, err)
	}
	if len(coll.Members) != 1 {
		return "", &Error{Step: stepSystem, Kind: ErrSystemMissing,
			Note: fmt.Sprintf("the BMC has %d systems and the node's info names none", len(coll.Members)),
			Err:  fmt.Errorf("members of %s: %v", systemsPath, coll.Members)}
	}
	return coll.Members[0].ID, nil
}

// allowed returns the system's allowable reset types (from its
// AllowableValues or ActionInfo); nil when the system does not say.
func (s *session) allowed() []schemas.ResetType {
	types, err := s.sys.GetSupportedResetTypes()
	if err != nil {
		s.b.log.WithError(err).Debug("redfish_reset_types_unknown")
		return nil
	}
	return types
}

// pick returns the first of prefs that the system allows (the first of all
// when the system does not say), or ErrNotAllowed.
func (s *session) pick(prefs ...schemas.ResetType) (schemas.ResetType, error) {
	allowed := s.allowed()
	if len(allowed) == 0 {
		return prefs[0], nil
	}
	for _, p := range prefs {
		if slices.Contains(allowed, p) {
			return p, nil
		}
	}
	return "", &Error{Step: "reset " + string(prefs[0]), Kind: ErrNotAllowed,
		Note: "the system does not offer it", Err: fmt.Errorf("allowable reset types %q", allowed)}
}

// reset posts ComputerSystem.Reset with rt.
func (s *session) reset(ctx context.Context, rt schemas.ResetType) error {
	step := "reset " + string(rt)
	if !s.hasReset() {
		return &Error{Step: step, Kind: ErrNotAllowed, Note: "the system has no reset action"}
	}
	if _, err := s.pick(rt); err != nil {
		return err
	}
	if _, err := s.sys.Reset(rt); err != nil {
		return classify(ctx, step, true, err)
	}
	s.b.log.WithField("reset_type", string(rt)).Debug("redfish_reset_sent")
	return nil
}

// hasReset reports whether the system offers a ComputerSystem.Reset action.
func (s *session) hasReset() bool {
	var raw struct {
		Actions struct {
			Reset struct {
				Target string `json:"target"`
			} `json:"#ComputerSystem.Reset"`
		}
	}
	return json.Unmarshal(s.sys.RawData, &raw) == nil && raw.Actions.Reset.Target != ""
}

// powerTo brings the system to state (On or Off) unless it is there; a
// system already on its way there is only waited for.
func (s *session) powerTo(ctx context.Context, state schemas.PowerState) error {
	switch {
	case s.sys.PowerState == state:
		return nil
	case state == schemas.OnPowerState && s.sys.PowerState == schemas.PoweringOnPowerState,
		state == schemas.OffPowerState && s.sys.PowerState == schemas.PoweringOffPowerState:
		return s.waitPower(ctx, state)
	}
	var (
		rt  schemas.ResetType
		err error
	)
	if state == schemas.OnPowerState {
		rt, err = s.pick(schemas.OnResetType, schemas.ForceOnResetType)
	} else {
		rt, err = s.pick(schemas.ForceOffResetType)
	}
	if err != nil {
		return err
	}
	if err := s.reset(ctx, rt); err != nil {
		return err
	}
	return s.waitPower(ctx, state)
}

// waitPower waits until the system reports state.
func (s *session) waitPower(ctx context.Context, state schemas.PowerState) error {
	return s.wait(ctx, "wait for power "+string(state), func(sys *schemas.ComputerSystem) (bool, string) {
		return sys.PowerState == state, string(sys.PowerState)
	})
}

// setBoot sets the boot override and waits until the system reports it.
func (s *session) setBoot(ctx context.Context, target schemas.BootSource, enabled schemas.BootSourceOverrideEnabled) error {
	const step = "set boot override"
	if a := s.sys.Boot.AllowableBootSourceOverrideTargetValues; len(a) > 0 && !slices.Contains(a, target) {
		return &Error{Step: step, Kind: ErrNotAllowed, Note: "the system does not offer boot target " + string(target),
			Err: fmt.Errorf("allowable boot targets %q", a)}
	}
	if err := s.sys.SetBoot(&schemas.Boot{BootSourceOverrideTarget: target, BootSourceOverrideEnabled: enabled}); err != nil {
		return classify(ctx, step, true, err)
	}
	return s.wait(ctx, "wait for boot override", func(sys *schemas.ComputerSystem) (bool, string) {
		b := sys.Boot
		done := b.BootSourceOverrideTarget == target && b.BootSourceOverrideEnabled == enabled
		if target == schemas.NoneBootSource { // some BMCs disable the override instead
			done = b.BootSourceOverrideTarget == target || b.BootSourceOverrideEnabled == schemas.DisabledBootSourceOverrideEnabled
		}
		return done, string(b.BootSourceOverrideTarget) + " " + string(b.BootSourceOverrideEnabled)
	})
}

// stateWord is what a reported state looks like when it is safe to repeat.
var stateWord = regexp.MustCompile(`^[A-Za-z ]{1,40}$`)

// wait reads the system every PollInterval until done reports true, for at
// most StateTimeout and never past ctx. A read that fails for a passing
// reason (the BMC busy, a dropped connection) is retried; one that cannot
// get better (credentials, certificate, system gone) ends the wait.
func (s *session) wait(ctx context.Context, step string, done func(*schemas.ComputerSystem) (bool, string)) error {
	deadline := time.Now().Add(s.b.cfg.StateTimeout)
	last, lastErr := "", error(nil)
	for {
		sys, err := schemas.GetComputerSystem(s.c, s.sys.ODataID)
		if err == nil {
			s.sys = sys
			ok, seen := done(sys)
			if ok {
				return nil
			}
			last = seen
		} else if ctx.Err() == nil {
			e := classify(ctx, step, false, err)
			switch e.Kind {
			case ErrAuth, ErrCertificate, ErrSystemMissing:
				return e
			}
			lastErr = err
			s.b.log.WithError(fmt.Errorf("%s", e.Detail())).Debug("redfish_poll_failed")
		}
		left := time.Until(deadline)
		if ctx.Err() != nil || left <= 0 {
			return s.waitFailed(ctx, step, last, lastErr)
		}
		t := time.NewTimer(min(s.b.cfg.PollInterval, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return s.waitFailed(ctx, step, last, lastErr)
		case <-t.C:
		}
	}
}

// waitFailed is the error of a wait that ended before the state came.
func (s *session) waitFailed(ctx context.Context, step, last string, lastErr error) error {
	e := &Error{Step: step, Kind: ErrStateTimeout, Err: lastErr}
	if err := ctx.Err(); err != nil {
		e.Err = err
		if errors.Is(err, context.Canceled) {
			e.Kind = err
		}
	}
	if stateWord.MatchString(last) {
		e.Note = "last seen " + last
	}
	return e
}

// limitBody bounds the body of every response to maxBody bytes.
type limitBody struct{ rt http.RoundTripper }

func (l limitBody) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(r)
	if err == nil {
		resp.Body = &limitedBody{rc: resp.Body, left: maxBody + 1}
	}
	return resp, err
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64 // bytes that may still be read, plus one
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.rc.Read(p)
	l.left -= int64(n)
	if l.left <= 0 {
		return n, errBodyTooLarge
	}
	return n, err
}

func (l *limitedBody) Close() error { return l.rc.Close() }
