// Package ipmicheck words the steps of an IPMI BMC's diagnosis (doctor), the
// same for both IPMI drivers.
//
// It words the steps (sol.Diagnoser) from the facts a driver gathered, so
// that both IPMI drivers (sol/ipmi, sol/ipmitool) report the same steps in
// the same words, each with an administrator's detail and a tenant's text
// (sol.Check).
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

// Hints for administrators: they name the registration's fields and
// obmd's settings, never an address (AddressHint names the port).
const (
	HintCredentials = "check the BMC user and password registered for the node (info.user, info.pass) and that this user may log in over LAN as administrator"
	HintCipher      = "leave info.cipher unset so that obmd tries suites 17 then 3, or pin a suite the BMC offers"
	HintPower       = "the BMC answers but not to chassis commands: check the user's privilege and the BMC's firmware"
	HintSOLDisabled = "set sol_enable: auto so that obmd switches SOL on, or switch it on at the BMC (ipmitool sol set enabled true)"
	HintSOLHeld     = "another SOL session holds the console: end it, or open the console through obmd, which takes the payload over"
)

// Hints for tenants, who cannot change a node's registration or obmd's
// settings: what they can do is ask the operator (HintSOLHeld serves both).
const (
	TenantHintAddress     = "the BMC may be down or cut off from obmd: try again later, and if it lasts, ask obmd's operator to check the node's BMC"
	TenantHintCredentials = "ask obmd's operator to check the BMC user and password registered for this node"
	TenantHintCipher      = "ask obmd's operator to check the IPMI cipher suite registered for this node"
	TenantHintPower       = "ask obmd's operator to check the privilege of the BMC user registered for this node"
	TenantHintSOLDisabled = "ask obmd's operator to switch serial-over-LAN on for this node"
)

// AddressHint is the administrator's hint for a BMC that does not answer
// at its registered port.
func AddressHint(port int) string {
	return fmt.Sprintf("check the node's BMC address and port (info.addr, info.port) and that obmd reaches UDP port %d there", port)
}

// addressFail is a failed address step (or a failed question that says
// the BMC stopped answering) at port.
func addressFail(c sol.Check, port int) sol.Check {
	c.Hint, c.TenantHint = AddressHint(port), TenantHintAddress
	return c
}

// FailAddress is a failed step from err, a BMC that stopped answering the
// driver's questions at port.
func FailAddress(name string, err error, port int) sol.Check {
	return addressFail(sol.FailErr(name, err, ""), port)
}

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
		return unreachable(err, sol.OneLine(err.Error()), "its name does not resolve", port), true
	case errors.Is(err, syscall.ECONNREFUSED):
		return unreachable(err, endpoint+": "+sol.OneLine(err.Error()), "nothing listens on its IPMI port", port), true
	}
	return sol.Check{}, false
}

// unreachable is a failed address step: err, the BMC unreachable because
// of why.
func unreachable(err error, detail, why string, port int) sol.Check {
	c := sol.Fail(sol.CheckAddress, detail, sol.FaultUnreachable.String()+" ("+why+")", "")
	c.Err = err
	return addressFail(c, port)
}

// BySession decides an undecided address step from the session attempt's
// error: no answer or unreachable fails it, anything else (even a refusal)
// proves the BMC answers.
func BySession(endpoint string, port int, err error) sol.Check {
	var e *sol.Error
	if errors.As(err, &e) && (e.Fault == sol.FaultNoAnswer || e.Fault == sol.FaultUnreachable) ||
		errors.Is(err, context.DeadlineExceeded) {
		return FailAddress(sol.CheckAddress, err, port)
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
	if !decided && !add(BySession(endpoint, d.Port, err)) {
		return checks
	}
	if err != nil {
		add(AuthFailed(s, err))
		return checks
	}
	defer closeSession()
	if add(Auth(s)) && add(d.Power(ctx)) {
		add(d.SOL(ctx))
	}
	return checks
}

// Session is what a driver learnt of the session it opened, or tried to.
type Session struct {
	Suite     int       // cipher suite; -1 for IPMI v1.5
	Refused   []int     // suites refused before it, when negotiated
	Tried     []Attempt // every session attempt, in order (for a failure's detail)
	Privilege string    // as the BMC reports it ("ADMINISTRATOR"); "" if unknown
	User      string    // obmd's BMC user (administrators only)
	Endpoint  string    // host:port (administrators only)
}

// Attempt is one try at opening a session: its cipher suite and how it
// failed (nil: it opened).
type Attempt struct {
	Suite int
	Err   error
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

// AuthFailed is the authentication step of a session the BMC refused (err,
// after the attempts s.Tried). Its detail is one line: who logged in
// where, then each suite tried and how the BMC answered it, in the
// library's last words (a suite refused is never blamed on the
// credentials, nor the reverse).
func AuthFailed(s Session, err error) sol.Check {
	c := sol.FailErr(sol.CheckAuth, err, HintCredentials).ForTenant(TenantHintCredentials)
	var e *sol.Error
	if errors.As(err, &e) && e.Fault == sol.FaultCipher {
		c = c.ForTenant(TenantHintCipher)
		c.Hint = HintCipher
	}
	if len(s.Tried) == 0 {
		return c
	}
	parts := make([]string, 0, len(s.Tried))
	for _, a := range s.Tried {
		if a.Err != nil {
			parts = append(parts, fmt.Sprintf("suite %d: %s", a.Suite, attemptText(a.Err)))
		}
	}
	c.Detail = fmt.Sprintf("%s (as %s at %s): %s", sol.TenantText(err), s.User, s.Endpoint, strings.Join(parts, "; "))
	return c
}

// attemptText is how the BMC answered one session attempt: its class, and
// the library's last words about it.
func attemptText(err error) string {
	text := sol.TenantText(err)
	var e *sol.Error
	if errors.As(err, &e) && e.Fault == sol.FaultCipher {
		text = "the BMC refused the cipher suite"
	}
	if cause := lastWords(err); cause != "" {
		text += " (" + cause + ")"
	}
	return text
}

// lastWords is the end of an error's chain, on one line: what the library
// (go-ipmi, ipmitool) said last, without the context around it ("RAKP2
// authentication code mismatch: RAKP authentication failed").
func lastWords(err error) string {
	s := sol.OneLine(err.Error())
	if i := strings.LastIndex(s, "err: "); i >= 0 {
		return s[i+len("err: "):]
	}
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return ""
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
		return sol.Fail(sol.CheckSOL, text+" (sol_enable: never)", text, HintSOLDisabled).ForTenant(TenantHintSOLDisabled), true
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
