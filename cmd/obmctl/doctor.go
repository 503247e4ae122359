package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/obmd/obmd/bastion/admin/api"
)

// doctor runs a node's diagnosis and prints one line per step with the
// administrator's detail (it may name the BMC's address), the failed
// step's hint, and a summary; with --json, the API's answer. It exits 1
// when a step failed, with --json too.
func doctor(c *client, in *input) error {
	label := in.args[0]
	data, err := c.fetch("GET", "/v1/nodes/"+esc(label)+"/doctor", nil)
	if err != nil {
		return err
	}
	var rep api.Doctor
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("doctor %s: %w", label, err)
	}
	if c.asJSON {
		c.printJSON(data)
	} else {
		c.doctorText(rep)
	}
	if !rep.OK {
		return &exitError{code: exitFailed, msg: fmt.Sprintf("doctor %s: %s failed", label, rep.Failed), printed: true}
	}
	return nil
}

func (c *client) doctorText(rep api.Doctor) {
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	for _, s := range rep.Checks {
		mark := "ok"
		if !s.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", mark, s.Name, s.Result)
		if !s.OK && s.Hint != "" {
			fmt.Fprintf(w, "\t\twhat to do: %s\n", s.Hint)
		}
	}
	w.Flush()
	if rep.OK {
		fmt.Fprintf(c.out, "%s: doctor: all %d checks passed\n", rep.Node, len(rep.Checks))
	} else {
		fmt.Fprintf(c.out, "%s: doctor: %s failed (doctor stops at the first failure)\n", rep.Node, rep.Failed)
	}
}
