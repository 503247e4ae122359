package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/obmd/obmd/bastion/admin/api"
)

// Tokens, keys and principals (who may reach a node), live sessions, the
// audit trail and obmd's health.

func tokenRotate(c *client, in *input) error {
	var out api.Token
	if printed, err := c.call("POST", "/v1/nodes/"+esc(in.args[0])+"/token", nil, &out); printed || err != nil {
		return err
	}
	fmt.Fprintln(c.out, out.Token)
	return nil
}

func tokenRevoke(c *client, in *input) error {
	return c.done("DELETE", "/v1/nodes/"+esc(in.args[0])+"/token", nil, in.args[0]+": token revoked")
}

func keyAdd(c *client, in *input) error {
	data, err := readFileOrStdin(in.args[1], in.stdin)
	if err != nil {
		return fmt.Errorf("read key: %w", err)
	}
	var out api.KeyAdded
	if printed, err := c.call("POST", "/v1/nodes/"+esc(in.args[0])+"/keys", api.AddKey{Key: strings.TrimSpace(string(data))}, &out); printed || err != nil {
		return err
	}
	fmt.Fprintln(c.out, out.Fingerprint)
	return nil
}

// readFileOrStdin reads the file at path, or stdin if path is "-" (at
// most 64 KiB of it: one key line).
func readFileOrStdin(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(io.LimitReader(stdin, 64<<10))
	}
	return os.ReadFile(path)
}

func keyList(c *client, in *input) error {
	var out api.Keys
	if printed, err := c.call("GET", "/v1/nodes/"+esc(in.args[0])+"/keys", nil, &out); printed || err != nil {
		return err
	}
	var rows [][]string
	for _, k := range out.Keys {
		rows = append(rows, []string{k.Fingerprint, k.Comment, k.CreatedAt.Format(time.RFC3339)})
	}
	c.table("FINGERPRINT\tCOMMENT\tADDED", rows)
	return nil
}

func keyRemove(c *client, in *input) error {
	label, fp := in.args[0], in.args[1]
	var out api.Removed
	if printed, err := c.call("DELETE", "/v1/nodes/"+esc(label)+"/keys/"+url.PathEscape(fp), nil, &out); printed || err != nil {
		return err
	}
	if out.Removed {
		fmt.Fprintf(c.out, "%s: key %s removed\n", label, fp)
	} else {
		fmt.Fprintf(c.out, "%s: key %s was not registered\n", label, fp)
	}
	return nil
}

// principals shows (LABEL alone) or sets a node's extra principals.
func principals(c *client, in *input) error {
	label, set := in.args[0], in.args[1:]
	var out api.Node
	var printed bool
	var err error
	switch {
	case in.bool("none") && len(set) > 0:
		return usageError(in.cmd, "principals: --none, or principals to set, not both")
	case in.bool("none"):
		set = []string{}
		fallthrough
	case len(set) > 0:
		list, _ := json.Marshal(set)
		printed, err = c.call("PUT", "/v1/nodes/"+esc(label), api.PutNode{Principals: list}, &out)
	default:
		printed, err = c.call("GET", "/v1/nodes/"+esc(label), nil, &out)
	}
	if printed || err != nil {
		return err
	}
	shown := "none"
	if out.Principals != nil && len(*out.Principals) > 0 {
		shown = strings.Join(*out.Principals, " ")
	}
	fmt.Fprintf(c.out, "%s: principals %s\n", label, shown)
	return nil
}

func sessionList(c *client, in *input) error {
	q := ""
	if len(in.args) == 1 {
		q = "?node=" + url.QueryEscape(in.args[0])
	}
	var out api.Sessions
	if printed, err := c.call("GET", "/v1/sessions"+q, nil, &out); printed || err != nil {
		return err
	}
	var rows [][]string
	for _, s := range out.Sessions {
		rows = append(rows, []string{s.ID, s.Node, s.Kind, s.User, s.Remote, s.Started.Format(time.RFC3339)})
	}
	c.table("ID\tNODE\tKIND\tUSER\tREMOTE\tSTARTED", rows)
	return nil
}

func kick(c *client, in *input) error {
	return c.done("DELETE", "/v1/sessions/"+esc(in.args[0]), nil, in.args[0]+": kicked")
}

func audit(c *client, in *input) error {
	q := url.Values{}
	for _, name := range []string{"node", "since"} {
		if v := in.str(name); v != "" {
			q.Set(name, v)
		}
	}
	if in.given("limit") {
		q.Set("limit", strconv.Itoa(in.int("limit")))
	}
	var out api.AuditEvents
	if printed, err := c.call("GET", "/v1/audit?"+q.Encode(), nil, &out); printed || err != nil {
		return err
	}
	var rows [][]string
	for _, e := range out.Events {
		rows = append(rows, []string{e.At.Format(time.RFC3339), e.Node, e.Actor, e.Action, e.Result,
			strconv.FormatInt(max(e.Count, 1), 10), e.Source, e.Detail})
	}
	c.table("AT\tNODE\tACTOR\tACTION\tRESULT\tCOUNT\tSOURCE\tDETAIL", rows)
	return nil
}

// health checks /healthz and /readyz (no admin token): one line each, or
// with --json one object {"healthz": ..., "readyz": ...} of their
// statuses; exit 1 unless both are OK.
func health(c *client, in *input) error {
	status := map[string]string{}
	var bad []string
	for _, p := range []string{"healthz", "readyz"} {
		resp, err := c.send("GET", "/"+p, nil)
		if err != nil {
			return err
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		s := resp.Status
		if resp.StatusCode != http.StatusOK {
			if e := answerError("GET", "/"+p, resp, data); !strings.HasPrefix(e.Error(), "GET ") {
				s += " (" + e.Error() + ")"
			}
			bad = append(bad, "/"+p)
		}
		status[p] = s
		if !c.asJSON {
			fmt.Fprintf(c.out, "/%s: %s\n", p, s)
		}
	}
	if c.asJSON {
		b, _ := json.Marshal(status)
		fmt.Fprintf(c.out, "%s\n", b)
	}
	if len(bad) > 0 {
		return &exitError{code: exitFailed, msg: strings.Join(bad, " and ") + " not OK", printed: true}
	}
	return nil
}
