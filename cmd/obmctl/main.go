// Command obmctl administers obmd over its HTTP admin API.
//
// Its commands, their arguments and flags are one table (commands.go),
// which parsing, `obmctl help` and docs/obmctl.md all read. Flags go
// anywhere on the line, before or after the command and its arguments;
// `--` ends them.
//
// The admin token comes from --token-file, OBMD_ADMIN_TOKEN, or
// ./obmd-state/admin-token; never from a flag (argv is visible in ps). A BMC
// password likewise comes from --pass-file, OBMD_BMC_PASS or a prompt.
//
// Exit codes: 0 done; 1 the operation failed (the API refused it, obmd was
// out of reach, a doctor step failed, obmd is not healthy); 2 usage error.
// Errors go to stderr as "obmctl: ..."; with --json, stdout also gets
// {"error": "..."}.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/obmd/obmd/bastion/admin/api"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

// Exit codes, the contract with scripts (as the SSH side's, where they
// overlap).
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// exitError is an error with its exit code.
type exitError struct {
	code int
	msg  string
	// usage, if set, follows the message on stderr (a usage error's).
	usage string
	// printed: stdout already has the JSON answer that tells of the
	// failure (a doctor run that failed), so --json adds no error object.
	printed bool
}

func (e *exitError) Error() string { return e.msg }

// usageError is a usage error of cmd (nil: of obmctl as a whole): msg,
// then the command's usage.
func usageError(cmd *command, format string, a ...any) error {
	u := commandList(commandTable(), "")
	if cmd != nil {
		u = cmd.usageLine()
		if len(cmd.flags) > 0 {
			u += "\n('obmctl help " + cmd.name + "' lists its flags)"
		}
	}
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, a...), usage: u}
}

// run is obmctl: it parses args, runs the command, reports an error and
// returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	in, err := parse(commandTable(), args)
	asJSON := jsonAsked(args) // a line that does not parse: as far as can be told
	if err == nil {
		asJSON = in.bool("json")
		in.stdin, in.stdout, in.stderr, in.getenv = stdin, stdout, stderr, getenv
		err = execute(in)
	}
	if err == nil {
		return exitOK
	}
	var h *helpRequest
	if errors.As(err, &h) {
		fmt.Fprint(stdout, h.text)
		return exitOK
	}
	ee := &exitError{code: exitFailed, msg: err.Error()}
	errors.As(err, &ee)
	msg := oneLine(ee.msg)
	if asJSON && !ee.printed {
		b, _ := json.Marshal(api.Error{Error: msg})
		fmt.Fprintf(stdout, "%s\n", b)
	}
	fmt.Fprintln(stderr, "obmctl:", msg)
	if ee.usage != "" {
		fmt.Fprintln(stderr, ee.usage)
	}
	return ee.code
}

// oneLine keeps an error message on one line.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// execute runs a parsed command line.
func execute(in *input) error {
	base := in.global("url")
	if base == "" {
		base = envOr(in.getenv, "OBMD_URL", "http://127.0.0.1:8080")
	}
	c := &client{base: strings.TrimRight(base, "/"), asJSON: in.bool("json"),
		http: &http.Client{Timeout: 30 * time.Second}, out: in.stdout}
	if in.cmd.needsToken() {
		tok, err := adminToken(in.global("token-file"), in.getenv)
		if err != nil {
			return err
		}
		c.token = tok
	}
	err := in.cmd.run(c, in)
	var ae *apiError
	if errors.As(err, &ae) {
		ae.msg = in.cmd.fieldNames(ae.msg)
	}
	return err
}

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}

func adminToken(file string, getenv func(string) string) (string, error) {
	if file == "" {
		if t := getenv("OBMD_ADMIN_TOKEN"); t != "" {
			return t, nil
		}
		file = "obmd-state/admin-token"
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("admin token: %w (use --token-file or OBMD_ADMIN_TOKEN)", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// client calls the admin API.
type client struct {
	base   string
	token  string
	asJSON bool
	http   *http.Client
	out    io.Writer
}

// apiError is the API's refusal: its {"error": ...} text (run names the
// API's fields in it as the command's user knows them).
type apiError struct{ msg string }

func (e *apiError) Error() string { return e.msg }

// call sends a request and decodes a JSON answer into out (if non-nil);
// with --json it prints the answer instead ("{}" for an empty one) and
// reports printed, so the caller prints nothing more. A non-2xx answer is
// an error carrying the API's {"error": ...} text.
func (c *client) call(method, path string, body any, out any) (printed bool, err error) {
	data, err := c.fetch(method, path, body)
	if err != nil {
		return false, err
	}
	if c.asJSON {
		c.printJSON(data)
		return true, nil
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return false, fmt.Errorf("%s %s: the answer is not what obmctl expects: %w", method, path, err)
		}
	}
	return false, nil
}

// fetch sends a request and returns the answer's body; a non-2xx answer
// becomes an *apiError carrying the API's {"error": ...} text.
func (c *client) fetch(method, path string, body any) ([]byte, error) {
	resp, err := c.send(method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, answerError(method, path, resp, data)
	}
	return data, nil
}

// send sends a request with the admin credential.
func (c *client) send(method, path string, body any) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		return nil, fmt.Errorf("obmd's URL %q: %w", c.base, err)
	}
	if c.token != "" { // none for the probes (health)
		req.SetBasicAuth("admin", c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("cannot reach obmd at %s: %v (is it running? set --url or OBMD_URL)", c.base, err)
	}
	return resp, nil
}

// answerError is the error a non-2xx answer stands for.
func answerError(method, path string, resp *http.Response, data []byte) error {
	var e api.Error
	if json.Unmarshal(data, &e) != nil || e.Error == "" {
		return &apiError{fmt.Sprintf("%s %s: %s", method, path, resp.Status)}
	}
	if resp.StatusCode == http.StatusNotFound && e.Error == "not found" {
		return &apiError{"not found (or the admin token is wrong)"}
	}
	return &apiError{e.Error}
}

// printJSON prints an API answer as it came, ending in a newline; an
// empty answer is "{}".
func (c *client) printJSON(data []byte) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		data = []byte("{}")
	}
	fmt.Fprintf(c.out, "%s\n", data)
}

func esc(label string) string { return url.PathEscape(label) }

func (c *client) table(header string, rows [][]string) {
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
}

// done runs a call whose answer obmctl does not show: with --json the
// API's answer is printed, otherwise line.
func (c *client) done(method, path string, body any, line string) error {
	printed, err := c.call(method, path, body, nil)
	if err == nil && !printed {
		fmt.Fprintln(c.out, line)
	}
	return err
}
