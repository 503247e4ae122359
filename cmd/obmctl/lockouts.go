package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/obmd/obmd/bastion/admin/api"
)

// lockouts is `lockouts`: the guessing limits in effect, then the
// addresses locked out and the nodes under attack.
func lockouts(c *client, in *input) error {
	var out api.Lockouts
	if printed, err := c.call("GET", "/v1/lockouts", nil, &out); printed || err != nil {
		return err
	}
	l := out.Limits
	fmt.Fprintf(c.out, "limits: %d failures from one address within %s lock it out for %s; "+
		"%d on one node within %s make it refuse the addresses that failed on it for %s\n",
		l.PerSource, l.Window, l.Lockout, l.PerNode, l.Window, l.Lockout)
	if len(out.Sources) == 0 && len(out.Nodes) == 0 {
		fmt.Fprintln(c.out, "nothing is locked out")
		return nil
	}
	if len(out.Sources) > 0 {
		var rows [][]string
		for _, s := range out.Sources {
			rows = append(rows, []string{s.Source, strconv.Itoa(s.Failures), strconv.Itoa(s.Refused), s.Until.Format(time.RFC3339)})
		}
		c.table("SOURCE\tFAILURES\tREFUSED\tUNTIL", rows)
	}
	if len(out.Nodes) > 0 {
		var rows [][]string
		for _, n := range out.Nodes {
			node := n.Node
			if n.Unknown {
				node = "(names that are no node)"
			}
			rows = append(rows, []string{node, strconv.Itoa(n.Failures), strconv.Itoa(n.Refused), n.Until.Format(time.RFC3339),
				strings.Join(n.Sources, " ")})
		}
		c.table("NODE\tFAILURES\tREFUSED\tUNTIL\tREFUSES", rows)
	}
	if out.More {
		fmt.Fprintln(c.out, "(more not shown)")
	}
	return nil
}

// unlock is `unlock ADDR`.
func unlock(c *client, in *input) error {
	var out api.Unlocked
	if printed, err := c.call("DELETE", "/v1/lockouts/"+esc(in.args[0]), nil, &out); printed || err != nil {
		return err
	}
	if out.WasLocked {
		fmt.Fprintf(c.out, "%s: unlocked\n", out.Source)
	} else {
		fmt.Fprintf(c.out, "%s: was not locked out\n", out.Source)
	}
	return nil
}
