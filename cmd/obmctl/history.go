package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// nodeSet is `node set LABEL --capture always|attached|default`: the
// node's console capture, without its BMC info.
func (c *client) nodeSet(args []string) error {
	label, fs, err := labelFlags(args, "node set")
	if err != nil {
		return err
	}
	capture := fs.String("capture", "", "always, attached or default")
	if err := fs.Parse(args[1:]); err != nil {
		return usageErr("%v", err)
	}
	if fs.NArg() > 0 || *capture == "" {
		return usageErr("node set LABEL --capture always|attached|default")
	}
	v, err := captureValue(*capture)
	if err != nil {
		return err
	}
	if err := c.call("PUT", "/v1/nodes/"+esc(label)+"/capture", map[string]string{"capture": v}, nil); err != nil {
		return done(err)
	}
	fmt.Fprintf(c.out, "%s: capture %s\n", label, *capture)
	return nil
}

// labelFlags is the label a command takes first, and the flag set of the
// rest (not parsed yet).
func labelFlags(args []string, name string) (string, *flag.FlagSet, error) {
	if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
		return "", nil, usageErr("%s needs a label first", name)
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return args[0], fs, nil
}

// captureValue maps --capture to the API's value ("default" is "").
func captureValue(s string) (string, error) {
	switch s {
	case "always", "attached":
		return s, nil
	case "default":
		return "", nil
	}
	return "", usageErr("--capture wants always, attached or default, not %q", s)
}

// consoleLog is `console-log LABEL [--since T] [--lines N] [--format F]
// [--timestamps] [--tenancy EPOCH]`: the node's console history as the
// admin API returns it, written untouched to stdout.
func (c *client) consoleLog(args []string) error {
	label, fs, err := labelFlags(args, "console-log")
	if err != nil {
		return err
	}
	since := fs.String("since", "", "10m, or an RFC 3339 time")
	lines := fs.Int("lines", 0, "only the last N lines")
	format := fs.String("format", "raw", "raw, text or cast")
	stamps := fs.Bool("timestamps", false, "text: each line's time")
	tenancy := fs.Int64("tenancy", 0, "a kept tenancy (see tenancies LABEL)")
	if err := fs.Parse(args[1:]); err != nil {
		return usageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	q := url.Values{"format": {*format}}
	if *since != "" {
		q.Set("since", *since)
	}
	if *lines > 0 {
		q.Set("lines", strconv.Itoa(*lines))
	}
	if *stamps {
		q.Set("timestamps", "1")
	}
	if *tenancy > 0 {
		q.Set("tenancy", strconv.FormatInt(*tenancy, 10))
	}
	return c.stream("/v1/nodes/" + esc(label) + "/console-log?" + q.Encode())
}

// stream GETs path and copies a successful answer to stdout as it is.
func (c *client) stream(path string) error {
	req, err := http.NewRequest("GET", c.base+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth("admin", c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return c.call("GET", path, nil, nil) // the same answer, as an error
	}
	if _, err := io.Copy(c.out, resp.Body); err != nil {
		return fmt.Errorf("console-log: %w", err)
	}
	return nil
}
