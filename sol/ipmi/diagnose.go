package ipmi

import (
	"context"
	"net"
	"strconv"

	"github.com/bougou/go-ipmi/pkg/command/app"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmicheck"
)

var _ sol.Diagnoser = (*BMC)(nil)

// Diagnose checks, in order and read-only (sol.Diagnoser): the BMC's
// address resolves and answers (RMCP presence ping, else the session
// attempt itself); authentication (which cipher suite, which privilege);
// the power status; SOL enabled and its payload free, held by obmd, or held
// by another session (which one, when the BMC says). It stops after the
// first failed step. It never powers, enables or deactivates anything; it
// may remember the cipher suite that worked, as any session does.
func (b *BMC) Diagnose(ctx context.Context) []sol.Check {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	defer cancel()
	var s *session
	return ipmicheck.Run(ctx, ipmicheck.Driver{
		Host: b.addr, Port: b.port, PingTimeout: min(b.cfg.CallTimeout/3, 2*b.cfg.AttemptTimeout),
		Open: func(ctx context.Context) (ipmicheck.Session, func(), error) {
			info := ipmicheck.Session{Privilege: types.PrivilegeLevelAdministrator.String(), User: b.user, Endpoint: b.endpoint()}
			var err error
			s, err = b.dialNoting(ctx, func(suite int, err error) {
				info.Tried = append(info.Tried, ipmicheck.Attempt{Suite: suite, Err: err})
				if b.cipher < 0 && sol.Refused(err) {
					info.Refused = append(info.Refused, suite)
				}
			})
			if err != nil {
				return info, nil, err
			}
			info.Suite = s.suite
			if si, err := s.c.GetCurrentSessionInfo(ctx); err == nil && si.OperatingPrivilegeLevel != 0 {
				info.Privilege = si.OperatingPrivilegeLevel.String()
			}
			return info, func() { b.closeSession(s) }, nil
		},
		Power: func(ctx context.Context) sol.Check { return b.checkPower(ctx, s) },
		SOL:   func(ctx context.Context) sol.Check { return b.checkSOL(ctx, s) },
	})
}

func (b *BMC) checkPower(ctx context.Context, s *session) sol.Check {
	st, err := s.c.GetChassisStatus(ctx)
	if err != nil {
		return sol.FailErr(sol.CheckPower, b.bmcError(ctx, s.d, true, "get chassis status from", err), ipmicheck.HintPower).
			ForTenant(ipmicheck.TenantHintPower)
	}
	return ipmicheck.Power(st.PowerIsOn)
}

// checkSOL reads SOL Enable and the user's payload access, then who holds
// the payload. A question the BMC rejects (a completion code) has no
// answer and is skipped; one it does not answer fails the step.
func (b *BMC) checkSOL(ctx context.Context, s *session) sol.Check {
	var off []string
	res, err := s.c.GetSOLConfigParam(ctx, thisChannel, types.SOLConfigParamSelector_SOLEnable, 0, 0)
	switch {
	case err == nil && len(res.ParamData) > 0 && res.ParamData[0]&0x01 == 0:
		off = append(off, ipmicheck.OffDisabled)
	case err != nil && !isCC(err):
		return ipmicheck.FailAddress(sol.CheckSOL, b.bmcError(ctx, s.d, true, "get SOL configuration from", err), b.port)
	}
	if _, _, allowed, ok, _ := b.userAccess(ctx, s); ok && !allowed {
		off = append(off, ipmicheck.OffAccess)
	}
	if c, ok := ipmicheck.SOLOff(off, b.opts.SOLEnable); ok {
		return c
	}
	st, err := s.c.GetPayloadActivationStatus(ctx, types.PayloadTypeSOL)
	if err != nil {
		return ipmicheck.FailAddress(sol.CheckSOL, b.bmcError(ctx, s.d, true, "get SOL payload status from", err), b.port)
	}
	var id uint32
	if st.Instance01Activated {
		if info, err := s.c.GetPayloadInstanceInfo(ctx, types.PayloadTypeSOL, solInstance); err == nil {
			id = info.SessionID
		}
	}
	held := b.opts.Held(ctx, b.label)
	owner := ""
	if st.Instance01Activated && !held {
		owner = b.sessionOwner(ctx, s, id)
	}
	return ipmicheck.Payload(st.Instance01Activated, id, held, owner)
}

func isCC(err error) bool {
	_, ok := completionCode(err)
	return ok
}

// sessionOwner names the user and remote console of BMC session id, for
// administrators only (another party's address): "" if the BMC does not say.
func (b *BMC) sessionOwner(ctx context.Context, s *session, id uint32) string {
	if id == 0 {
		return ""
	}
	info, err := s.c.GetSessionInfo(ctx, &app.GetSessionInfoRequest{SessionIndex: 0xff, SessionID: id})
	if err != nil || info.UserID == 0 {
		return ""
	}
	who := "user " + strconv.Itoa(int(info.UserID&0x3f))
	if info.RemoteConsoleIPAddr != nil && !info.RemoteConsoleIPAddr.IsUnspecified() {
		who += " from " + net.JoinHostPort(info.RemoteConsoleIPAddr.String(), strconv.Itoa(int(info.RemoteConsolePort)))
	}
	return who
}
