package ipmitool

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmicheck"
)

var _ sol.Diagnoser = (*BMC)(nil)

// Diagnose checks, in order and read-only, as the native driver does but
// with one ipmitool run per question: the BMC's address resolves and
// answers (RMCP presence ping, else the session attempt itself);
// authentication (`session info active`: cipher suite, privilege); the
// power status; SOL enabled (`sol info`, `sol payload status`) and its
// payload free, held by obmd, or held by another session (Get Payload
// Activation Status and Get Payload Instance Info as raw commands, then
// `session info id`). It stops after the first failed step and never
// powers, enables or deactivates anything.
func (b *BMC) Diagnose(ctx context.Context) []sol.Check {
	var suite int
	var s session
	return ipmicheck.Run(ctx, ipmicheck.Driver{
		Host: b.info.Addr, Port: b.port, PingTimeout: min(b.cfg.CallTimeout/3, 2*b.cfg.KeepaliveTimeout),
		Open: func(ctx context.Context) (ipmicheck.Session, func(), error) {
			info := ipmicheck.Session{User: b.info.User, Endpoint: b.endpoint()}
			var err error
			suite, err = b.withSuite(ctx, func(ctx context.Context, suite int) error {
				var err error
				s, err = b.currentSession(ctx, suite)
				info.Tried = append(info.Tried, ipmicheck.Attempt{Suite: suite, Err: err})
				if b.cipher < 0 && sol.Refused(err) {
					info.Refused = append(info.Refused, suite)
				}
				return err
			})
			info.Suite, info.Privilege = suite, s.privilege
			return info, func() {}, err // every ipmitool run closes its own session
		},
		Power: func(ctx context.Context) sol.Check { return b.powerCheck(ctx, suite) },
		SOL:   func(ctx context.Context) sol.Check { return b.solCheck(ctx, suite, s) },
	})
}

func (b *BMC) powerCheck(ctx context.Context, suite int) sol.Check {
	out, err := b.runSuite(ctx, suite, "power", "status")
	if err != nil {
		return sol.FailErr(sol.CheckPower, err, ipmicheck.HintPower).ForTenant(ipmicheck.TenantHintPower)
	}
	switch strings.TrimSpace(string(out)) {
	case "Chassis Power is on":
		return ipmicheck.Power(true)
	case "Chassis Power is off":
		return ipmicheck.Power(false)
	}
	return sol.Fail(sol.CheckPower, fmt.Sprintf("unexpected ipmitool output %q", firstLine(out)),
		"the BMC's power status could not be read", ipmicheck.HintPower).ForTenant(ipmicheck.TenantHintPower)
}

var solEnabled = regexp.MustCompile(`(?m)^Enabled\s*:\s*(true|false)`)

// solCheck reads SOL Enable, the user's payload access and the payload.
func (b *BMC) solCheck(ctx context.Context, suite int, s session) sol.Check {
	if b.iface != "lanplus" {
		return sol.Fail(sol.CheckSOL, "SOL needs the lanplus interface (info.interface "+b.iface+")",
			"this node's console needs the lanplus interface", "register the node with interface lanplus (or none)").
			ForTenant("ask obmd's operator to register this node with the lanplus interface")
	}
	var off []string
	out, err := b.runSuite(ctx, suite, "sol", "info")
	switch m := solEnabled.FindSubmatch(out); {
	case err != nil && !rejected(err):
		return ipmicheck.FailAddress(sol.CheckSOL, err, b.port)
	case m != nil && string(m[1]) == "false":
		off = append(off, ipmicheck.OffDisabled)
	}
	if s.user != "" && s.channel != "" {
		out, err := b.runSuite(ctx, suite, "sol", "payload", "status", s.channel, s.user)
		if m := payloadStatus.FindSubmatch(out); err == nil && m != nil && string(m[1]) == "disabled" {
			off = append(off, ipmicheck.OffAccess)
		}
	}
	if c, ok := ipmicheck.SOLOff(off, b.opts.SOLEnable); ok {
		return c
	}
	return b.payloadCheck(ctx, suite)
}

// rejected reports whether err is the BMC answering with an error (so the
// question has no answer here, but the BMC is there).
func rejected(err error) bool {
	var e *sol.Error
	return errors.As(err, &e) && e.Fault == sol.FaultRejected
}

// payloadCheck asks who holds SOL payload instance 1: Get Payload
// Activation Status (NetFn App 0x4a: capacity, then the bit mask of active
// instances) and Get Payload Instance Info (0x4b: the owner's session ID).
func (b *BMC) payloadCheck(ctx context.Context, suite int) sol.Check {
	out, err := b.runSuite(ctx, suite, "raw", "0x06", "0x4a", "0x01")
	if err != nil {
		return ipmicheck.FailAddress(sol.CheckSOL, err, b.port)
	}
	status := hexBytes(out)
	active := len(status) >= 2 && status[1]&0x01 != 0
	var id uint32
	if active {
		if out, err := b.runSuite(ctx, suite, "raw", "0x06", "0x4b", "0x01", "0x01"); err == nil {
			if info := hexBytes(out); len(info) >= 4 {
				id = uint32(info[0]) | uint32(info[1])<<8 | uint32(info[2])<<16 | uint32(info[3])<<24
			}
		}
	}
	held := b.opts.Held(ctx, b.label)
	owner := ""
	if active && !held {
		owner = b.sessionOwner(ctx, suite, id)
	}
	return ipmicheck.Payload(active, id, held, owner)
}

var (
	sessionIP   = regexp.MustCompile(`(?m)^console ip\s*:\s*(\S+)`)
	sessionPort = regexp.MustCompile(`(?m)^console port\s*:\s*([0-9]+)`)
)

// sessionOwner names the user and remote console of BMC session id, for
// administrators only: "" if the BMC does not say.
func (b *BMC) sessionOwner(ctx context.Context, suite int, id uint32) string {
	if id == 0 {
		return ""
	}
	out, err := b.runSuite(ctx, suite, "session", "info", "id", fmt.Sprintf("0x%08x", id))
	if err != nil {
		return ""
	}
	m := sessionUser.FindSubmatch(out)
	if m == nil {
		return ""
	}
	who := "user " + string(m[1])
	if ip := sessionIP.FindSubmatch(out); ip != nil {
		who += " from " + string(ip[1])
		if p := sessionPort.FindSubmatch(out); p != nil {
			who += ":" + string(p[1])
		}
	}
	return who
}

// hexBytes parses ipmitool's raw output (" 01 01 00").
func hexBytes(out []byte) []byte {
	var b []byte
	for _, f := range strings.Fields(string(out)) {
		n, err := strconv.ParseUint(f, 16, 8)
		if err != nil {
			return nil
		}
		b = append(b, byte(n))
	}
	return b
}
