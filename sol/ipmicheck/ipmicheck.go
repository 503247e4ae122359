// Package ipmicheck words the steps of a diagnosis (sol.Diagnoser, doctor)
// of an IPMI BMC from the facts a driver gathered, so that both IPMI
// drivers (sol/ipmi, sol/ipmitool) report the same steps in the same words,
// each with an administrator's detail and a tenant's text (sol.Check).
package ipmicheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/rmcp"
)

// Hints, for administrators and tenants alike (they name no address).
const (
	HintAddress     = "check the node's BMC address and port (info.addr, info.port) and that obmd reaches the BMC's IPMI port (UDP 623)"
	HintCredentials = "check the BMC user and password registered for the node (info.user, info.pass) and that this user may log in over LAN as administrator"
	HintCipher      = "leave info.cipher unset so that obmd tries suites 17 then 3, or pin a suite the BMC offers"
	HintPower       = "the BMC answers but not to chassis commands: check the user's privilege and the BMC's firmware"
	HintSOLDisabled = "set sol_enable: auto so that obmd switches SOL on, or switch it on at the BMC (ipmitool sol set enabled true)"
	HintSOLHeld     = "another SOL session holds the console: end it, or open the console through obmd, which takes the payload over"
)

const answers = "the BMC answers"

// Address is the first step: host resolves and answers an RMCP presence
// ping within timeout. decided is false when the ping went unanswered:
// some BMCs ignore pings, so the session attempt decides (BySession).
func Address(ctx context.Context, host string, port int, timeout time.Duration) (c sol.Check, decided bool) {
	endpoint := net.JoinHostPort(host, strconv.Itoa(port))
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := rmcp.Ping(pctx, host, port)
	var dns *net.DNSError
	switch {
	case err == nil:
		return sol.PassDetail(sol.CheckAddress, endpoint+" answers RMCP ping", answers), true
	case errors.As(err, &dns):
		return sol.Fail(sol.CheckAddress, err.Error(), sol.FaultUnreachable.String()+" (its name does not resolve)", HintAddress), true
	case errors.Is(err, syscall.ECONNREFUSED):
		return sol.Fail(sol.CheckAddress, endpoint+": "+err.Error(), sol.FaultUnreachable.String()+" (nothing listens on its IPMI port)", HintAddress), true
	}
	return sol.Check{}, false
}

// BySession decides an undecided address step from the session attempt's
// error: no answer or unreachable fails it, anything else (even a refusal)
// proves the BMC answers.
func BySession(endpoint string, err error) sol.Check {
	var e *sol.Error
	if errors.As(err, &e) && (e.Fault == sol.FaultNoAnswer || e.Fault == sol.FaultUnreachable) ||
		errors.Is(err, context.DeadlineExceeded) {
		return sol.FailErr(sol.CheckAddress, err, HintAddress)
	}
	return sol.PassDetail(sol.CheckAddress, endpoint+" answers IPMI (not RMCP ping)", answers)
}

// Driver is one IPMI driver's side of a diagnosis: where its BMC is and
// how it answers each question. Run asks them in order.
type Driver struct {
	Host        string
	Port        int
	PingTimeout time.Duration // bound on the presence ping
	// Open opens a session with the node's cipher suite (negotiated as
	// usual) and tells what it learnt; close ends the session.
	Open func(ctx context.Context) (s Session, close func(), err error)
	// Power and SOL answer the power and SOL steps in the open session.
	Power func(ctx context.Context) sol.Check
	SOL   func(ctx context.Context) sol.Check
}

// Run is the diagnosis of an IPMI BMC (sol.Diagnoser): address (presence
// ping, else the session attempt decides), authentication, power, SOL,
// stopping after the first step that fails.
func Run(ctx context.Context, d Driver) []sol.Check {
	var checks []sol.Check
	add := func(c sol.Check) bool { checks = append(checks, c); return c.OK }
	endpoint := net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
	addr, decided := Address(ctx, d.Host, d.Port, d.PingTimeout)
	if decided && !add(addr) {
		return checks
	}
	s, closeSession, err := d.Open(ctx)
	if !decided && !add(BySession(endpoint, err)) {
		return checks
	}
	if err != nil {
		add(AuthFailed(err))
		return checks
	}
	defer closeSession()
	if add(Auth(s)) && add(d.Power(ctx)) {
		add(d.SOL(ctx))
	}
	return checks
}

// Session is what a driver learnt of the session it opened.
type Session struct {
	Suite     int    // cipher suite; -1 for IPMI v1.5
	Refused   []int  // suites refused before it, when negotiated
	Privilege string // as the BMC reports it ("ADMINISTRATOR"); "" if unknown
	User      string // obmd's BMC user (administrators only)
	Endpoint  string // host:port (administrators only)
}

// Auth is the authentication step of an opened session.
func Auth(s Session) sol.Check {
	priv := strings.ToLower(s.Privilege)
	if priv == "" {
		priv = "unknown"
	}
	text := "logged in with IPMI v1.5, privilege " + priv
	if s.Suite >= 0 {
		text = fmt.Sprintf("logged in with cipher suite %d, privilege %s", s.Suite, priv)
	}
	for i, r := range s.Refused {
		sep := ", "
		if i == 0 {
			sep = " ("
		}
		text += fmt.Sprintf("%ssuite %d refused", sep, r)
		if i == len(s.Refused)-1 {
			text += ")"
		}
	}
	return sol.PassDetail(sol.CheckAuth, text+" as "+s.User+" at "+s.Endpoint, text)
}

// AuthFailed is the authentication step of a session the BMC refused.
func AuthFailed(err error) sol.Check {
	hint := HintCredentials
	var e *sol.Error
	if errors.As(err, &e) && e.Fault == sol.FaultCipher {
		hint = HintCipher
	}
	return sol.FailErr(sol.CheckAuth, err, hint)
}

// Power is the power step.
func Power(on bool) sol.Check {
	if on {
		return sol.Pass(sol.CheckPower, "power is "+sol.PowerOn)
	}
	return sol.Pass(sol.CheckPower, "power is "+sol.PowerOff)
}

// Facts of SOL Enable and the user's payload access; reasons it is off.
const (
	OffDisabled = "SOL is disabled on the BMC"
	OffAccess   = "obmd's BMC user may not activate SOL"
)

// SOLOff is the SOL step when SOL is off (off lists the OffDisabled and
// OffAccess that hold): a failure under sol_enable never, else a pass
// saying obmd switches it on. ok is false when nothing is off.
func SOLOff(off []string, policy sol.SOLEnablePolicy) (c sol.Check, ok bool) {
	if len(off) == 0 {
		return sol.Check{}, false
	}
	text := strings.Join(off, "; ")
	if policy == sol.SOLEnableNever {
		return sol.Fail(sol.CheckSOL, text+" (sol_enable: never)", text, HintSOLDisabled), true
	}
	return sol.Pass(sol.CheckSOL, text+"; obmd switches it on when a console opens (sol_enable: auto)"), true
}

// Payload is the SOL step when SOL is on: who holds payload instance 1.
// id is the owner's BMC session ID (0: the BMC does not say), held whether
// obmd holds the node's link, owner the owner's user and remote console as
// the BMC tells (administrators only; "" if it does not).
func Payload(active bool, id uint32, held bool, owner string) sol.Check {
	if !active {
		return sol.Pass(sol.CheckSOL, "SOL is enabled; its payload is free")
	}
	who := "another session"
	if id != 0 {
		who = fmt.Sprintf("BMC session 0x%08x", id)
	}
	if held {
		return sol.Pass(sol.CheckSOL, "SOL is enabled; its payload is held by obmd's console ("+who+")")
	}
	detail := "SOL payload held by " + who
	if owner != "" {
		detail += " (" + owner + ")"
	}
	return sol.Fail(sol.CheckSOL, detail, "SOL payload held by "+who+", not obmd", HintSOLHeld)
}
