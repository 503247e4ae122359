package ipmi

import (
	"context"
	"fmt"

	"github.com/bougou/go-ipmi/pkg/command/app"
	"github.com/bougou/go-ipmi/pkg/command/transport"
	"github.com/bougou/go-ipmi/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
)

// thisChannel is "the channel this request arrives on" (IPMI v2.0 6.3).
const thisChannel = 0x0e

// activate activates SOL payload instance 1 in s. When the BMC answers that
// SOL is disabled (0x81) or that obmd may not activate it (0xd4: the user's
// SOL payload access may be off) and Options.SOLEnable is auto, it switches
// SOL on (enableSOL), reports what it changed, and activates once more in a
// new session (a BMC may fix a session's user rights when it opens, as
// goipmi-server does). It owns s: it returns the session the payload is
// active in, or closes every session it had. Errors are
// sol.ErrPayloadActive, a *sol.Error wrapping sol.ErrSOLDisabled (SOL is
// off and stays off), or another classified *sol.Error.
func (b *BMC) activate(ctx context.Context, s *session) (*session, *transport.ActivatePayloadResponse, error) {
	res, err := b.activatePayload(ctx, s)
	cc, _ := completionCode(err)
	if (cc == ccPayloadDisabled || cc == ccPrivilege) && b.opts.SOLEnable == sol.SOLEnableAuto {
		if changes := b.enableSOL(ctx, s, cc == ccPayloadDisabled); len(changes) > 0 {
			b.log.WithField("changes", changes).Info("sol_enabled")
			if b.opts.OnSOLEnable != nil {
				b.opts.OnSOLEnable(ctx, sol.SOLEnabled{Node: b.label, Changes: changes})
			}
			b.closeSession(s)
			if s, err = b.dial(ctx); err != nil {
				return nil, nil, err
			}
			res, err = b.activatePayload(ctx, s)
			cc, _ = completionCode(err)
		}
	}
	if err == nil {
		return s, res, nil
	}
	d := s.d
	b.closeSession(s)
	switch cc {
	case ccPayloadActive:
		return nil, nil, sol.ErrPayloadActive
	case ccPayloadDisabled:
		return nil, nil, &sol.Error{Fault: sol.FaultRejected, Code: cc,
			Err: fmt.Errorf("activate SOL on BMC %s (sol_enable %s): %w", b.endpoint(), b.opts.SOLEnable, sol.ErrSOLDisabled)}
	}
	return nil, nil, b.bmcError(ctx, d, true, "activate SOL on", err)
}

func (b *BMC) activatePayload(ctx context.Context, s *session) (*transport.ActivatePayloadResponse, error) {
	return s.c.ActivatePayload(ctx, &transport.ActivatePayloadRequest{
		PayloadType:          types.PayloadTypeSOL,
		PayloadInstance:      solInstance,
		EnableEncryption:     aesCipher(s.suite),
		EnableAuthentication: integrityCipher(s.suite),
	})
}

// enableSOL switches SOL on in s: the SOL Enable parameter when disabled is
// set, and the SOL payload access of the session's user where the BMC keeps
// one and it is off. It returns what it changed (sol.SOLChange*) and logs
// what failed (a BMC without user payload access commands is no failure).
func (b *BMC) enableSOL(ctx context.Context, s *session, disabled bool) []string {
	var changes []string
	var first error
	if disabled {
		if _, err := s.c.SetSOLConfigParam(ctx, thisChannel, types.SOLConfigParamSelector_SOLEnable, []byte{0x01}); err != nil {
			first = b.bmcError(ctx, s.d, true, "enable SOL on", err)
		} else {
			changes = append(changes, sol.SOLChangeEnable)
		}
	}
	changed, err := b.enableUserAccess(ctx, s)
	if changed {
		changes = append(changes, sol.SOLChangeUserAccess)
	}
	if first == nil {
		first = err
	}
	if first != nil {
		b.log.WithError(first).WithField("changes", changes).Warn("sol_enable_failed")
	}
	return changes
}

// userAccess reports the session's user, its channel and whether that user
// may activate SOL there. ok is false when the BMC keeps no such access (it
// rejects the commands, as ipmi_sim does).
func (b *BMC) userAccess(ctx context.Context, s *session) (user, channel uint8, allowed, ok bool, err error) {
	info, err := s.c.GetCurrentSessionInfo(ctx)
	if err != nil {
		return 0, 0, false, false, ignoreCC(b.bmcError(ctx, s.d, true, "get session info from", err), err)
	}
	user, channel = info.UserID&0x3f, info.ChannelNumber&0x0f
	acc, err := s.c.GetUserPayloadAccess(ctx, channel, user)
	if err != nil {
		return user, channel, false, false, ignoreCC(b.bmcError(ctx, s.d, true, "get user payload access from", err), err)
	}
	return user, channel, acc.PayloadTypeSOL, true, nil
}

// enableUserAccess gives the session's user SOL payload access where the
// BMC keeps it and it is off.
func (b *BMC) enableUserAccess(ctx context.Context, s *session) (bool, error) {
	user, channel, allowed, ok, err := b.userAccess(ctx, s)
	if !ok || allowed {
		return false, err
	}
	req := &app.SetUserPayloadAccessRequest{
		ChannelNumber: channel, UserID: user,
		Operation: app.SetUserPayloadAccessOperationEnable, PayloadTypeSOL: true,
	}
	if err := s.c.Exchange(ctx, req, &app.SetUserPayloadAccessResponse{}); err != nil {
		return false, b.bmcError(ctx, s.d, true, "set user payload access on", err)
	}
	b.log.WithFields(logrus.Fields{"user_id": user, "channel": channel}).Debug("sol_user_access_enabled")
	return true, nil
}

// ignoreCC is nil when raw is a completion code (the BMC does not offer
// the command), else classified.
func ignoreCC(classified, raw error) error {
	if _, isCC := completionCode(raw); isCC {
		return nil
	}
	return classified
}
