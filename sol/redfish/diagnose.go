package redfish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/obmd/obmd/sol"
)

var _ sol.Diagnoser = (*BMC)(nil)

// hints says what to do about a failed step, by class.
var hints = map[error]string{
	ErrUnreachable:   "check info.addr (https://host[:port]) and that obmd reaches the BMC's HTTPS port",
	ErrCertificate:   `give obmd the CA that signed the BMC's certificate, or register the node with "insecure": true`,
	ErrProtocol:      "info.addr must be the BMC's Redfish service (HTTPS, with /redfish/v1 on that host)",
	ErrAuth:          "check the user and password registered for the node (info.user, info.pass) and that the account may log in to Redfish",
	ErrSystemMissing: "check info.system against the BMC's systems (/redfish/v1/Systems)",
	ErrNotAllowed:    "the system does not offer the resets obmd uses (On or ForceOn, ForceOff, ForceRestart): check the BMC's firmware and the account's role",
}

// tenantHints says what a tenant, who cannot change the node's
// registration, can do about a failed step, by class.
var tenantHints = map[error]string{
	ErrUnreachable:   "the BMC may be down or cut off from obmd: try again later, and if it lasts, ask obmd's operator to check the node's BMC",
	ErrCertificate:   "ask obmd's operator to check the BMC's certificate for this node",
	ErrProtocol:      "ask obmd's operator to check the Redfish address registered for this node",
	ErrAuth:          "ask obmd's operator to check the BMC user and password registered for this node",
	ErrSystemMissing: "ask obmd's operator to check the Redfish system registered for this node",
	ErrNotAllowed:    "ask obmd's operator: the BMC does not offer the resets obmd uses",
}

const hintBMC = "the BMC failed the request: retry later, or check the BMC"

// fail is a failed step from an *Error: its safe text for tenants, its
// detail (with the BMC's URL) for administrators, the hints of its class.
func fail(name string, e *Error) sol.Check {
	hint, ok := hints[e.Kind]
	if !ok {
		hint = hintBMC
	}
	c := sol.Fail(name, sol.OneLine(e.Detail()), e.Error(), hint).ForTenant(tenantHints[e.Kind])
	c.Err = e
	return c
}

// needed are the reset types obmd's operations use, as alternatives.
var needed = [][]schemas.ResetType{
	{schemas.OnResetType, schemas.ForceOnResetType},
	{schemas.ForceOffResetType},
	{schemas.ForceRestartResetType},
}

// Diagnose checks, in order and read-only (sol.Diagnoser): the BMC's host
// resolves and takes a TCP connection; its service root answers over
// verified TLS (unless the node is insecure) without credentials; obmd
// logs in (a Redfish session, logged out at the end); the node's system
// exists (and its power state); the system offers the resets obmd uses.
// With "sol" details it then runs the IPMI console's diagnosis, its steps
// named "console ...". It stops after the first failed step and never
// resets, patches or enables anything.
func (b *BMC) Diagnose(ctx context.Context) []sol.Check {
	var checks []sol.Check
	add := func(c sol.Check) bool { checks = append(checks, c); return c.OK }
	if !add(b.checkAddress(ctx)) || !add(b.checkServiceRoot(ctx)) {
		return checks
	}
	s, err := b.login(ctx)
	if err != nil {
		add(fail(sol.CheckAuth, classify(ctx, stepLogin, false, err)))
		return checks
	}
	defer s.close(ctx)
	add(sol.PassDetail(sol.CheckAuth, "logged in to "+b.endpoint+" as "+b.user+" (Redfish session)", "logged in (Redfish session)"))
	if err := s.findSystem(ctx); err != nil {
		add(fail(sol.CheckSystem, classify(ctx, stepSystem, false, err)))
		return checks
	}
	text := fmt.Sprintf("system %s, power %s", s.sys.ID, s.sys.PowerState)
	if !stateWord.MatchString(string(s.sys.PowerState)) || !systemWord.MatchString(s.sys.ID) {
		text = "system found"
	}
	if !add(sol.Pass(sol.CheckSystem, text)) || !add(s.checkResets()) {
		return checks
	}
	if b.console != nil {
		for _, c := range b.console.Diagnose(ctx) {
			c.Name = "console " + c.Name
			if !add(c) {
				break
			}
		}
	}
	return checks
}

// checkAddress: the host resolves and accepts a TCP connection.
func (b *BMC) checkAddress(ctx context.Context) sol.Check {
	u, _ := url.Parse(b.endpoint) // built by New
	d := net.Dialer{Timeout: b.cfg.RequestTimeout}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		e := &Error{Step: stepConnect, Kind: ErrUnreachable, Err: err}
		var dns *net.DNSError
		var ne net.Error
		switch {
		case errors.As(err, &dns):
			e.Note = "its name does not resolve"
		case errors.As(err, &ne) && ne.Timeout():
			e.Note = "no answer"
		}
		return fail(sol.CheckAddress, e)
	}
	conn.Close()
	return sol.PassDetail(sol.CheckAddress, u.Host+" accepts TCP connections", "the BMC answers")
}

// checkServiceRoot reads /redfish/v1/ without credentials: TLS as the node
// asks, an answer that is a Redfish service root.
func (b *BMC) checkServiceRoot(ctx context.Context) sol.Check {
	const step = "read service root"
	tr := b.transport()
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.endpoint+"/redfish/v1/", nil)
	if err != nil {
		return fail(sol.CheckServiceRoot, &Error{Step: step, Kind: ErrProtocol, Err: err})
	}
	req.Header.Set("Accept", "application/json")
	resp, err := b.httpClient(tr).Do(req)
	if err != nil {
		return fail(sol.CheckServiceRoot, classify(ctx, stepConnect, false, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(sol.CheckServiceRoot, &Error{Step: step, Kind: statusKind(stepConnect, false, resp.StatusCode), Status: resp.StatusCode})
	}
	var root struct {
		RedfishVersion string
		Systems        struct {
			ID string `json:"@odata.id"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&root); err != nil || root.Systems.ID == "" {
		return fail(sol.CheckServiceRoot, &Error{Step: step, Kind: ErrProtocol, Note: "the answer is not a Redfish service root", Err: err})
	}
	text := "Redfish service root answers"
	if versionWord.MatchString(root.RedfishVersion) {
		text += " (Redfish " + root.RedfishVersion + ")"
	}
	if b.insecure {
		text += "; certificate not verified (insecure)"
	}
	return sol.PassDetail(sol.CheckServiceRoot, text+" at "+b.endpoint, text)
}

// checkResets: the system has a reset action offering what obmd uses.
func (s *session) checkResets() sol.Check {
	const step = "read reset actions"
	if !s.hasReset() {
		return fail(sol.CheckResetActions, &Error{Step: step, Kind: ErrNotAllowed, Note: "the system has no reset action"})
	}
	allowed := s.allowed()
	if len(allowed) == 0 {
		return sol.Pass(sol.CheckResetActions, "reset action offered (the system lists no allowable types)")
	}
	var missing []string
	for _, alts := range needed {
		if !slices.ContainsFunc(alts, func(rt schemas.ResetType) bool { return slices.Contains(allowed, rt) }) {
			missing = append(missing, string(alts[0]))
		}
	}
	names := make([]string, len(allowed))
	for i, rt := range allowed {
		names[i] = string(rt)
	}
	if len(missing) > 0 {
		return fail(sol.CheckResetActions, &Error{Step: step, Kind: ErrNotAllowed,
			Note: "the system does not offer " + strings.Join(missing, ", "), Err: fmt.Errorf("allowable reset types %q", names)})
	}
	text := "reset types " + strings.Join(names, ", ")
	if !resetWords.MatchString(text) {
		text = "the system offers the resets obmd uses"
	}
	return sol.Pass(sol.CheckResetActions, text)
}

// Shapes of what the BMC says that a diagnosis repeats to tenants; anything
// else is left out (a BMC's strings are not obmd's to show).
var (
	systemWord  = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,64}$`)
	versionWord = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$`)
	resetWords  = regexp.MustCompile(`^reset types [A-Za-z, ]{1,300}$`)
)
