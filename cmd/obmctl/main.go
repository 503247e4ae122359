// Command obmctl administers obmd over its HTTP admin API.
//
//	obmctl [global flags] node ls | node show LABEL | node add LABEL ... | node set LABEL --capture C | node rm LABEL
//	obmctl [global flags] console-log LABEL [--since T] [--lines N] [--format raw|text|cast] [--timestamps] [--tenancy E]
//	obmctl [global flags] doctor LABEL
//	obmctl [global flags] token rotate LABEL | token revoke LABEL
//	obmctl [global flags] key add LABEL FILE|- | key ls LABEL | key rm LABEL FINGERPRINT
//	obmctl [global flags] ca add NAME FILE|- | ca ls | ca rm FINGERPRINT | ca revoke ... | ca revoked
//	obmctl [global flags] principals LABEL [PRINCIPAL ...|--none]
//	obmctl [global flags] sessions [LABEL] | kick ID | audit [--node N] [--since T] [--limit N]
//	obmctl [global flags] health
//
// The admin token comes from --token-file, OBMD_ADMIN_TOKEN, or
// ./obmd-state/admin-token; never from a flag (argv is visible in ps). A BMC
// password likewise comes from --pass-file, OBMD_BMC_PASS or a prompt.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

// exitError carries an exit code: 1 for failures, 2 for usage.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, a ...any) error {
	return &exitError{code: 2, msg: fmt.Sprintf(format, a...) + "\n" + usage}
}

const usage = `usage: obmctl [--url URL] [--token-file FILE] [--json] COMMAND
  node ls                       list nodes
  node show LABEL               one node (never its BMC password)
  node add LABEL --type T --addr A [--user U] [--port P] [--cipher C] [--interface I] [--capture C]
                                register (or change) a node; the BMC password comes from
                                --pass-file FILE, OBMD_BMC_PASS, or a prompt. T: ipmi,
                                ipmitool, redfish, mock or sim; --cipher unset: negotiated (17, then 3)
  node add LABEL --type redfish --addr https://HOST[:PORT] --user U [--system S] [--insecure]
        [--sol] [--sol-port P] [--sol-cipher C] [--capture C]
                                a Redfish node; --sol: its console over IPMI SOL on the same host
  node set LABEL --capture C    console capture: always (recorded with nobody attached),
                                attached, or default (always for ipmi and ipmitool)
  console-log LABEL [--since T] [--lines N] [--format raw|text|cast] [--timestamps] [--tenancy E]
                                the console history of the current (or a kept) tenancy
  node rm LABEL                 delete a node (cuts its sessions)
  doctor LABEL                  check the node's BMC step by step (exit 1 if a step fails)
  token rotate LABEL            issue a new token (printed once; cuts the node's sessions)
  token revoke LABEL            revoke the token (cuts the node's sessions)
  key add LABEL FILE|-          allow an authorized_keys line (one key) on the node
  key ls LABEL                  list a node's keys
  key rm LABEL FINGERPRINT      remove a key (cuts the node's sessions)
` + caUsage + `
  sessions [LABEL]              live sessions
  kick ID                       end one session
  audit [--node N] [--since T] [--limit N]   audit events (T: RFC 3339 or unix seconds)
  health                        /healthz and /readyz
The admin token: --token-file, else OBMD_ADMIN_TOKEN, else ./obmd-state/admin-token.`

type client struct {
	base   string
	token  string
	asJSON bool
	http   *http.Client
	out    io.Writer
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	err := dispatch(args, stdin, stdout, stderr, getenv)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		fmt.Fprintln(stderr, "obmctl:", ee.msg)
		return ee.code
	}
	fmt.Fprintln(stderr, "obmctl:", err)
	return 1
}

// dispatch runs one command; stderr gets prompts only (run prints errors).
func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("obmctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	base := fs.String("url", envOr(getenv, "OBMD_URL", "http://127.0.0.1:8080"), "admin API base URL (env OBMD_URL)")
	tokenFile := fs.String("token-file", "", "file holding the admin token")
	asJSON := fs.Bool("json", false, "print the API's JSON answers")
	if err := fs.Parse(args); err != nil {
		return usageErr("%v", err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usageErr("no command")
	}
	token, err := adminToken(*tokenFile, getenv)
	if err != nil && rest[0] != "health" {
		return err
	}
	c := &client{base: strings.TrimRight(*base, "/"), token: token, asJSON: *asJSON,
		http: &http.Client{Timeout: 30 * time.Second}, out: stdout}
	cmd, args := rest[0], rest[1:]
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch {
	case cmd == "node" && sub == "ls":
		return c.nodeList(args[1:])
	case cmd == "node" && sub == "show":
		return c.nodeShow(args[1:])
	case cmd == "node" && sub == "add":
		return c.nodeAdd(args[1:], stdin, stderr, getenv)
	case cmd == "doctor":
		return c.doctor(args)
	case cmd == "node" && sub == "set":
		return c.nodeSet(args[1:])
	case cmd == "console-log":
		return c.consoleLog(args)
	case cmd == "node" && sub == "rm":
		return c.simple("DELETE", "/v1/nodes/%s", args[1:], "deleted")
	case cmd == "token" && sub == "rotate":
		return c.tokenRotate(args[1:])
	case cmd == "token" && sub == "revoke":
		return c.simple("DELETE", "/v1/nodes/%s/token", args[1:], "token revoked")
	case cmd == "key" && sub == "add":
		return c.keyAdd(args[1:], stdin)
	case cmd == "key" && sub == "ls":
		return c.keyList(args[1:])
	case cmd == "key" && sub == "rm":
		return c.keyRemove(args[1:])
	case cmd == "ca":
		return c.ca(sub, args, stdin)
	case cmd == "principals":
		return c.principals(args)
	case cmd == "sessions":
		return c.sessions(args)
	case cmd == "kick":
		return c.simple("DELETE", "/v1/sessions/%s", args, "kicked")
	case cmd == "audit":
		return c.audit(args)
	case cmd == "health":
		return c.health()
	}
	return usageErr("unknown command %q", strings.Join(rest[:min(2, len(rest))], " "))
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

// call sends a request and decodes a JSON answer into out (if non-nil);
// with --json it prints the answer instead (and returns errPrinted). A
// non-2xx answer becomes an error carrying the API's {"error": ...} text.
func (c *client) call(method, path string, body any, out any) error {
	data, err := c.fetch(method, path, body)
	if err != nil {
		return err
	}
	if c.asJSON {
		c.printJSON(data)
		return errPrinted
	}
	if out != nil && len(data) > 0 {
		return json.Unmarshal(data, out)
	}
	return nil
}

// fetch sends a request and returns the answer's body; a non-2xx answer
// becomes an error carrying the API's {"error": ...} text.
func (c *client) fetch(method, path string, body any) ([]byte, error) {
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
		return nil, err
	}
	req.SetBasicAuth("admin", c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			if resp.StatusCode == http.StatusNotFound && e.Error == "not found" {
				return nil, errors.New("not found (or the admin token is wrong)")
			}
			return nil, errors.New(e.Error)
		}
		return nil, fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return data, nil
}

// printJSON prints an API answer as it came, ending in a newline.
func (c *client) printJSON(data []byte) {
	c.out.Write(data)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		fmt.Fprintln(c.out)
	}
}

// errPrinted: the raw JSON was printed (--json); nothing more to do.
var errPrinted = errors.New("printed")

func done(err error) error {
	if errors.Is(err, errPrinted) {
		return nil
	}
	return err
}

func esc(label string) string { return url.PathEscape(label) }

func one(args []string, what string) (string, error) {
	if len(args) != 1 {
		return "", usageErr("want exactly one %s", what)
	}
	return args[0], nil
}

func (c *client) simple(method, pattern string, args []string, msg string) error {
	x, err := one(args, "argument")
	if err != nil {
		return err
	}
	if err := c.call(method, fmt.Sprintf(pattern, esc(x)), nil, nil); err != nil {
		return done(err)
	}
	fmt.Fprintf(c.out, "%s: %s\n", x, msg)
	return nil
}

func (c *client) table(header string, rows [][]string) {
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
}

type node struct {
	Label       string `json:"label"`
	Type        string `json:"type"`
	Capture     string `json:"capture"`
	Addr        string `json:"addr"`
	Port        int    `json:"port"`
	User        string `json:"user"`
	Cipher      *int   `json:"cipher"`
	CipherInUse *int   `json:"cipher_in_use"`
	Interface   string `json:"interface"`
	System      string `json:"system"`
	Insecure    bool   `json:"insecure"`
	SOL         *struct {
		Port   int  `json:"port"`
		Cipher *int `json:"cipher"`
	} `json:"sol"`
	UpdatedAt time.Time `json:"updated_at"`
	HasToken  *bool     `json:"has_token"`
	Keys      *int      `json:"keys"`
	Sessions  *int      `json:"sessions"`
}

func (c *client) nodeList(args []string) error {
	if len(args) != 0 {
		return usageErr("node ls takes no arguments")
	}
	var out struct{ Nodes []node }
	if err := c.call("GET", "/v1/nodes", nil, &out); err != nil {
		return done(err)
	}
	var rows [][]string
	for _, n := range out.Nodes {
		rows = append(rows, []string{n.Label, n.Type, hostPort(n), n.User, n.UpdatedAt.Format(time.RFC3339)})
	}
	c.table("LABEL\tTYPE\tBMC\tUSER\tUPDATED", rows)
	return nil
}

func hostPort(n node) string {
	if n.Port == 0 {
		return n.Addr
	}
	return fmt.Sprintf("%s:%d", n.Addr, n.Port)
}

func (c *client) nodeShow(args []string) error {
	label, err := one(args, "node label")
	if err != nil {
		return err
	}
	var n node
	if err := c.call("GET", "/v1/nodes/"+esc(label), nil, &n); err != nil {
		return done(err)
	}
	deref := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	capture := n.Capture
	if capture == "" {
		capture = "default"
	}
	fmt.Fprintf(c.out, "label:    %s\ntype:     %s\nbmc:      %s\nuser:     %s\ncapture:  %s\n%stoken:    %v\nkeys:     %d\nsessions: %d\n",
		n.Label, n.Type, hostPort(n), n.User, capture, nodeDetail(n), n.HasToken != nil && *n.HasToken, deref(n.Keys), deref(n.Sessions))
	return nil
}

func (c *client) nodeAdd(args []string, stdin io.Reader, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageErr("node add needs a label first")
	}
	label := args[0]
	f, err := parseNodeFlags(args[1:])
	if err != nil {
		return err
	}
	info, err := f.info(func() (string, error) { return bmcPassword(f.passFile, stdin, stderr, getenv) })
	if err != nil {
		return err
	}
	body := map[string]any{"type": f.typ, "info": info}
	if f.capture != "" {
		v, err := captureValue(f.capture)
		if err != nil {
			return err
		}
		body["capture"] = v
	}
	if err := c.call("PUT", "/v1/nodes/"+esc(label), body, nil); err != nil {
		return done(err)
	}
	fmt.Fprintf(c.out, "%s: registered\n", label)
	return nil
}

// bmcPassword reads the BMC password from file, else OBMD_BMC_PASS, else
// stdin after a prompt on stderr: without echo when stdin is a terminal,
// otherwise (a pipe, a file) its first line.
func bmcPassword(file string, stdin io.Reader, stderr io.Writer, getenv func(string) string) (string, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("BMC password: %w", err)
		}
		return strings.TrimRight(string(data), "\r\n"), nil
	}
	if p := getenv("OBMD_BMC_PASS"); p != "" {
		return p, nil
	}
	fmt.Fprint(stderr, "BMC password: ")
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		pass, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr) // the newline the terminal did not echo
		if err != nil {
			return "", fmt.Errorf("BMC password: %w", err)
		}
		return string(pass), nil
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && line == "" {
		return "", errors.New("BMC password: nothing read (use --pass-file or OBMD_BMC_PASS)")
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func (c *client) tokenRotate(args []string) error {
	label, err := one(args, "node label")
	if err != nil {
		return err
	}
	var out struct{ Token string }
	if err := c.call("POST", "/v1/nodes/"+esc(label)+"/token", nil, &out); err != nil {
		return done(err)
	}
	fmt.Fprintln(c.out, out.Token)
	return nil
}

func (c *client) keyAdd(args []string, stdin io.Reader) error {
	if len(args) != 2 {
		return usageErr("key add LABEL FILE|-")
	}
	data, err := readFileOrStdin(args[1], stdin)
	if err != nil {
		return fmt.Errorf("read key: %w", err)
	}
	var out struct{ Fingerprint string }
	if err := c.call("POST", "/v1/nodes/"+esc(args[0])+"/keys", map[string]string{"key": strings.TrimSpace(string(data))}, &out); err != nil {
		return done(err)
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

func (c *client) keyList(args []string) error {
	label, err := one(args, "node label")
	if err != nil {
		return err
	}
	var out struct {
		Keys []struct {
			Fingerprint, Comment string
			CreatedAt            time.Time `json:"created_at"`
		}
	}
	if err := c.call("GET", "/v1/nodes/"+esc(label)+"/keys", nil, &out); err != nil {
		return done(err)
	}
	var rows [][]string
	for _, k := range out.Keys {
		rows = append(rows, []string{k.Fingerprint, k.Comment, k.CreatedAt.Format(time.RFC3339)})
	}
	c.table("FINGERPRINT\tCOMMENT\tADDED", rows)
	return nil
}

func (c *client) keyRemove(args []string) error {
	if len(args) != 2 {
		return usageErr("key rm LABEL FINGERPRINT")
	}
	if err := c.call("DELETE", "/v1/nodes/"+esc(args[0])+"/keys/"+url.PathEscape(args[1]), nil, nil); err != nil {
		return done(err)
	}
	fmt.Fprintf(c.out, "%s: key %s removed\n", args[0], args[1])
	return nil
}

func (c *client) sessions(args []string) error {
	if len(args) > 1 {
		return usageErr("sessions [LABEL]")
	}
	q := ""
	if len(args) == 1 {
		q = "?node=" + url.QueryEscape(args[0])
	}
	var out struct {
		Sessions []struct {
			ID, Node, Kind, User, Remote string
			Started                      time.Time
		}
	}
	if err := c.call("GET", "/v1/sessions"+q, nil, &out); err != nil {
		return done(err)
	}
	var rows [][]string
	for _, s := range out.Sessions {
		rows = append(rows, []string{s.ID, s.Node, s.Kind, s.User, s.Remote, s.Started.Format(time.RFC3339)})
	}
	c.table("ID\tNODE\tKIND\tUSER\tREMOTE\tSTARTED", rows)
	return nil
}

func (c *client) audit(args []string) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	nodeF := fs.String("node", "", "only this node")
	since := fs.String("since", "", "RFC 3339 time or unix seconds")
	limit := fs.Int("limit", 0, "at most this many (newest)")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return usageErr("audit [--node N] [--since T] [--limit N]")
	}
	q := url.Values{}
	if *nodeF != "" {
		q.Set("node", *nodeF)
	}
	if *since != "" {
		q.Set("since", *since)
	}
	if *limit > 0 {
		q.Set("limit", fmt.Sprint(*limit))
	}
	var out struct {
		Events []struct {
			At                                          time.Time
			Node, Actor, Action, Source, Result, Detail string
			Count                                       int64
		}
	}
	if err := c.call("GET", "/v1/audit?"+q.Encode(), nil, &out); err != nil {
		return done(err)
	}
	var rows [][]string
	for _, e := range out.Events {
		rows = append(rows, []string{e.At.Format(time.RFC3339), e.Node, e.Actor, e.Action, e.Result,
			fmt.Sprint(max(e.Count, 1)), e.Source, e.Detail})
	}
	c.table("AT\tNODE\tACTOR\tACTION\tRESULT\tCOUNT\tSOURCE\tDETAIL", rows)
	return nil
}

func (c *client) health() error {
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := c.http.Get(c.base + p)
		if err != nil {
			return err
		}
		resp.Body.Close()
		fmt.Fprintf(c.out, "%s: %s\n", p, resp.Status)
		if resp.StatusCode != http.StatusOK {
			return &exitError{code: 1, msg: p + " is not OK"}
		}
	}
	return nil
}
