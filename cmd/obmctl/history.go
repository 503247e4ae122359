package main

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/obmd/obmd/bastion/admin/api"
)

// The console history: console-log and tenancies.

func consoleLogFlags() []flagDef {
	return []flagDef{
		{name: "since", arg: "T", usage: "from T on: a duration (10m) or an RFC 3339 time"},
		{name: "lines", kind: intFlag, arg: "N", usage: "only the last N lines"},
		{name: "format", arg: "F", def: "raw", usage: "raw (the bytes as the node sent them), text (lines) or cast (asciicast v2)"},
		{name: "timestamps", kind: boolFlag, usage: "start each line with its time (implies --format text)"},
		{name: "tenancy", kind: intFlag, arg: "E", usage: "a kept tenancy (see tenancies LABEL), not the current one"},
	}
}

// consoleLog is `console-log LABEL [flags]`: the node's console history
// as the admin API returns it, written untouched to stdout. It has no
// JSON form; --timestamps is a text format's.
func consoleLog(c *client, in *input) error {
	if c.asJSON {
		return usageError(in.cmd, "console-log writes the history itself, not JSON (--format cast is JSON lines)")
	}
	format := in.str("format")
	if in.bool("timestamps") {
		if in.given("format") && format != "text" {
			return usageError(in.cmd, "--timestamps stamps text lines: use it with --format text (or alone), not --format %s", format)
		}
		format = "text"
	}
	q := url.Values{"format": {format}}
	if v := in.str("since"); v != "" {
		q.Set("since", v)
	}
	if in.given("lines") {
		q.Set("lines", strconv.Itoa(in.int("lines")))
	}
	if in.bool("timestamps") {
		q.Set("timestamps", "1")
	}
	if in.given("tenancy") {
		q.Set("tenancy", strconv.Itoa(in.int("tenancy")))
	}
	path := "/v1/nodes/" + esc(in.args[0]) + "/console-log?" + q.Encode()
	resp, err := c.send("GET", path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return answerError("GET", path, resp, data)
	}
	if _, err := io.Copy(c.out, resp.Body); err != nil {
		return fmt.Errorf("console-log: %w", err)
	}
	return nil
}

// tenancies is `tenancies LABEL`: the tenancies the node's history keeps.
func tenancies(c *client, in *input) error {
	var out api.Tenancies
	if printed, err := c.call("GET", "/v1/nodes/"+esc(in.args[0])+"/tenancies", nil, &out); printed || err != nil {
		return err
	}
	var rows [][]string
	for _, t := range out.Tenancies {
		ended, purge := "current", ""
		if !t.Current && t.EndedAt != nil {
			ended = t.EndedAt.Format(time.RFC3339)
		}
		if t.PurgeAt != nil {
			purge = t.PurgeAt.Format(time.RFC3339)
		}
		rows = append(rows, []string{strconv.FormatInt(t.Epoch, 10), t.StartedAt.Format(time.RFC3339), ended, strconv.FormatInt(t.Bytes, 10), purge})
	}
	c.table("TENANCY\tSTARTED\tENDED\tBYTES\tPURGED AT", rows)
	return nil
}
