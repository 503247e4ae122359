package commands

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/obmd/obmd/sol"
)

// ActionDoctor is the audit action of a doctor run.
const ActionDoctor = "doctor"

// CheckError is a doctor run whose last step failed: Check. Its text is the
// administrator's (the step's Detail, which may name the BMC's address):
// for obmd's log and the audit record; Message gives the tenant's.
type CheckError struct {
	Check sol.Check
}

func (e *CheckError) Error() string { return e.Check.Name + ": " + e.Check.Detail }

// doctor runs the node's diagnosis (sol.Diagnoser), bounded by the
// timeout, and audits it. It takes no power operation's busy slot (a
// diagnosis changes nothing on the node), but one of its own: a second run
// on the node while one is in flight fails with ErrDoctorBusy. A run whose
// last step failed returns the result (Checks, Text) and a *CheckError; a
// node whose driver cannot diagnose fails with sol.ErrNotSupported.
func (r *Runner) doctor(ctx context.Context, req Request) (Result, error) {
	res := Result{Node: req.Node, Command: CmdDoctor}
	node := clean(req.Node, 0)
	slot := "doctor\x00" + req.Node // no label holds a NUL
	if !r.acquire(slot) {
		err := &opError{verb: "doctor", node: node, err: ErrDoctorBusy}
		r.note(ctx, req, ActionDoctor, ResultBusy, ErrDoctorBusy.Error(), err, "doctor")
		return res, err
	}
	defer r.release(slot)
	start := r.cfg.Now()
	checks, err := bounded(ctx, r.cfg.Timeout, func(ctx context.Context) ([]sol.Check, error) {
		bmc, err := r.resolve(ctx, req)
		if err != nil {
			return nil, err
		}
		d, ok := bmc.(sol.Diagnoser)
		var checks []sol.Check
		if ok {
			checks = d.Diagnose(ctx)
		}
		if len(checks) == 0 {
			return nil, fmt.Errorf("diagnose: %w", sol.ErrNotSupported)
		}
		return checks, nil
	})
	res.Took = r.cfg.Now().Sub(start)
	took := "took " + res.Took.Round(time.Millisecond).String()
	if err != nil {
		r.note(ctx, req, ActionDoctor, ResultError, err.Error()+"; "+took, err, "doctor")
		return res, &opError{verb: "doctor", node: node, err: err}
	}
	res.Checks = checks
	res.Text = doctorText(node, checks)
	if last := checks[len(checks)-1]; !last.OK {
		err := &CheckError{Check: last}
		logged := error(err) // the log gets the failure's whole chain
		if last.Err != nil {
			logged = fmt.Errorf("%s: %w", last.Name, last.Err)
		}
		r.note(ctx, req, ActionDoctor, ResultError, err.Error()+"; "+took, logged, "doctor")
		return res, &opError{verb: "doctor", node: node, err: err}
	}
	r.note(ctx, req, ActionDoctor, ResultOK, fmt.Sprintf("%d checks passed; %s", len(checks), took), nil, "doctor")
	return res, nil
}

// doctorText is a diagnosis as a tenant reads it: one line per step (what
// was checked, ok or FAIL, the result and, on failure, what to do), then a
// line that sums it up. Only the steps' tenant texts and hints: never the
// BMC's address.
func doctorText(node string, checks []sol.Check) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, c := range checks {
		mark, text := "ok", clean(c.Tenant, maxDetail)
		if !c.OK {
			mark = "FAIL"
			text += "; what to do: " + clean(c.HintFor(true), maxDetail)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, clean(c.Name, 64), text)
	}
	tw.Flush() // writes to a strings.Builder cannot fail
	if sol.Passed(checks) {
		fmt.Fprintf(&b, "%s: doctor: all %d checks passed\n", node, len(checks))
	} else {
		fmt.Fprintf(&b, "%s: doctor: %s failed (doctor stops at the first failure)\n", node, clean(checks[len(checks)-1].Name, 64))
	}
	return b.String()
}

// checkJSON is one step of a diagnosis in a tenant's --json output.
type checkJSON struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Result string `json:"result"`
	Hint   string `json:"hint,omitempty"`
}

// tenantChecks is checks as --json shows them to a tenant.
func tenantChecks(checks []sol.Check) []checkJSON {
	out := make([]checkJSON, len(checks))
	for i, c := range checks {
		out[i] = checkJSON{Name: c.Name, OK: c.OK, Result: c.Tenant, Hint: c.HintFor(true)}
	}
	return out
}
