package ipmitool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/obmd/obmd/sol"
)

// solOffError: `sol activate` found SOL switched off on the BMC (ipmitool
// read SOL Enable as false and did not even try: "SOL payload disabled"),
// or the BMC refused obmd's user the payload (0xd4, "Insufficient
// privilege level": its SOL payload access may be off). A disabled SOL is
// sol.ErrSOLDisabled to callers; a refused one is the BMC rejecting the
// request.
type solOffError struct {
	disabled bool
	policy   sol.SOLEnablePolicy
	endpoint string
}

func (e *solOffError) Error() string {
	if e.disabled {
		return fmt.Sprintf("BMC %s: ipmitool: SOL payload disabled (sol_enable %s)", e.endpoint, e.policy)
	}
	return fmt.Sprintf("BMC %s: ipmitool: SOL activation refused: insufficient privilege (sol_enable %s)", e.endpoint, e.policy)
}

// Unwrap classifies the error for callers (and tenants).
func (e *solOffError) Unwrap() error {
	if e.disabled {
		return sol.ErrSOLDisabled
	}
	return &sol.Error{Fault: sol.FaultRejected, Code: 0xd4, Err: errors.New("SOL activation refused: insufficient privilege")}
}

// solOff is the solOffError that ipmitool's stderr shows, or nil.
func solOff(stderr []byte, policy sol.SOLEnablePolicy) error {
	switch {
	case bytes.Contains(stderr, []byte("SOL payload disabled")):
		return &solOffError{disabled: true, policy: policy}
	case bytes.Contains(stderr, []byte("Error activating SOL payload: Insufficient privilege")):
		return &solOffError{policy: policy}
	}
	return nil
}

// retryEnabled handles an activation with suite that failed with err: when
// SOL was off (solOffError) and Options.SOLEnable is auto, it switches SOL
// on, reports and logs what it changed, and runs start again. It returns
// the error that stands.
func (b *BMC) retryEnabled(ctx context.Context, suite int, err error, start func(context.Context, int) error) error {
	var off *solOffError
	if !errors.As(err, &off) || b.opts.SOLEnable != sol.SOLEnableAuto {
		return err
	}
	changes := b.enableSOL(ctx, suite, off.disabled)
	if len(changes) == 0 {
		return err
	}
	b.log.WithField("changes", changes).Info("sol_enabled")
	if b.opts.OnSOLEnable != nil {
		b.opts.OnSOLEnable(ctx, sol.SOLEnabled{Node: b.label, Changes: changes})
	}
	return start(ctx, suite)
}

// enableSOL switches SOL on at the BMC with cipher suite suite: SOL Enable
// when disabled is set (`sol set enabled true`), and the SOL payload access
// of obmd's user on its channel where the BMC keeps one and it is off
// (`sol payload enable`). It returns what it changed (sol.SOLChange*) and
// logs what failed (a BMC without payload access commands is no failure).
func (b *BMC) enableSOL(ctx context.Context, suite int, disabled bool) []string {
	var changes []string
	if disabled {
		if _, err := b.runSuite(ctx, suite, "sol", "set", "enabled", "true"); err != nil {
			b.log.WithError(err).Warn("sol_enable_failed")
		} else {
			changes = append(changes, sol.SOLChangeEnable)
		}
	}
	user, channel, allowed, ok := b.userAccess(ctx, suite)
	if ok && !allowed {
		if _, err := b.runSuite(ctx, suite, "sol", "payload", "enable", channel, user); err != nil {
			b.log.WithError(err).Warn("sol_enable_failed")
		} else {
			changes = append(changes, sol.SOLChangeUserAccess)
		}
	}
	return changes
}

var (
	sessionUser    = regexp.MustCompile(`(?m)^user id\s*:\s*([0-9]+)`)
	sessionChannel = regexp.MustCompile(`(?m)^channel number\s*:\s*0x([0-9a-fA-F]+)`)
	sessionPriv    = regexp.MustCompile(`(?m)^privilege level\s*:\s*(\S+)`)
	payloadStatus  = regexp.MustCompile(`is (enabled|disabled)\s*$`)
)

// session is what `session info active` says of obmd's own session.
type session struct {
	user, channel, privilege string
}

func (b *BMC) currentSession(ctx context.Context, suite int) (session, error) {
	out, err := b.runSuite(ctx, suite, "session", "info", "active")
	if err != nil {
		return session{}, err
	}
	var s session
	if m := sessionUser.FindSubmatch(out); m != nil {
		s.user = string(m[1])
	}
	if m := sessionChannel.FindSubmatch(out); m != nil {
		if n, err := strconv.ParseUint(string(m[1]), 16, 8); err == nil {
			s.channel = strconv.Itoa(int(n))
		}
	}
	if m := sessionPriv.FindSubmatch(out); m != nil {
		s.privilege = string(m[1])
	}
	return s, nil
}

// userAccess reports obmd's BMC user and its channel, and whether that user
// may activate SOL there; ok is false when the BMC (or ipmitool) does not
// say, as with ipmi_sim, which has no payload access commands.
func (b *BMC) userAccess(ctx context.Context, suite int) (user, channel string, allowed, ok bool) {
	s, err := b.currentSession(ctx, suite)
	if err != nil || s.user == "" || s.channel == "" {
		return "", "", false, false
	}
	out, err := b.runSuite(ctx, suite, "sol", "payload", "status", s.channel, s.user)
	if err != nil {
		return s.user, s.channel, false, false
	}
	m := payloadStatus.FindSubmatch(out)
	if m == nil {
		return s.user, s.channel, false, false
	}
	return s.user, s.channel, string(m[1]) == "enabled", true
}
