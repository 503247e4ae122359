package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/obmd/obmd/bastion/admin/api"
)

// nodeAddFlags are node add's flags; field is the API's name of each.
func nodeAddFlags() []flagDef {
	return []flagDef{
		{name: "type", arg: "T", def: "ipmi", usage: "ipmi, ipmitool, redfish, mock or sim", field: "type"},
		{name: "addr", arg: "A", usage: "the BMC's address (redfish: https://HOST[:PORT])", field: "info.addr"},
		{name: "user", arg: "U", usage: "the BMC user", field: "info.user"},
		{name: "pass-file", arg: "FILE", usage: "the file holding the BMC password (else $OBMD_BMC_PASS, else a prompt)", field: "info.pass"},
		{name: "port", kind: intFlag, arg: "P", usage: "the BMC's RMCP+ port (default 623)", field: "info.port"},
		{name: "cipher", kind: intFlag, arg: "N", usage: "pin an IPMI cipher suite (default: negotiated, 17 then 3)", field: "info.cipher"},
		{name: "interface", arg: "I", usage: "ipmitool: lan or lanplus", field: "info.interface"},
		{name: "system", arg: "S", usage: "redfish: the system's Id or path (default: the BMC's only one)", field: "info.system"},
		{name: "insecure", kind: boolFlag, usage: "redfish: do not verify the BMC's TLS certificate", field: "info.insecure"},
		{name: "sol", kind: boolFlag, usage: "redfish: the console over IPMI SOL on the same host and account", field: "info.sol"},
		{name: "sol-port", kind: intFlag, arg: "P", usage: "redfish: the console's RMCP+ port (implies --sol; default 623)", field: "info.sol.port"},
		{name: "sol-cipher", kind: intFlag, arg: "N", usage: "redfish: the console's cipher suite (implies --sol; default negotiated)", field: "info.sol.cipher"},
		{name: "capture", arg: "C", usage: "console capture: always, attached or default", field: "capture"},
		screenSizeFlag(),
		{name: "console", arg: "C", usage: "sol (default), ssh (the BMC's SSH service) or auto", field: "info.console"},
		{name: "ssh-vendor", arg: "V", usage: "the SSH console's preset: idrac, ilo, xcc, openbmc or generic", field: "info.ssh_vendor"},
		{name: "ssh-port", kind: intFlag, arg: "P", usage: "the BMC's SSH port (default the preset's: 22, 2200 for openbmc)", field: "info.ssh_port"},
		{name: "ssh-user", arg: "U", usage: "the SSH console's user (default --user)", field: "info.ssh_user"},
		{name: "ssh-pass-file", arg: "FILE", usage: "the file holding the SSH console's password (default the BMC password)", field: "info.ssh_pass"},
		{name: "ssh-command", arg: "CMD", usage: "what reaches the host console once logged in (default the preset's)", field: "info.ssh_command"},
		{name: "ssh-host-key", arg: "FILE", usage: "the file holding the BMC's SSH host key, an authorized_keys line (default: pinned on first contact)", field: "info.ssh_host_key"},
		{name: "redfish", arg: "URL", usage: "ipmi, ipmitool with --console auto: the BMC's Redfish service (https://HOST[:PORT]), asked which console services are on", field: "info.redfish"},
		{name: "redfish-insecure", kind: boolFlag, usage: "do not verify the TLS certificate of --redfish", field: "info.redfish_insecure"},
		{name: "allow-shared-bmc", kind: boolFlag, usage: "register even though another node uses this BMC (nodes that really share one)",
			field: "?allow_shared_bmc=1"},
	}
}

// consoleFlags are the flags of the console fields (ipmi, ipmitool, redfish).
var consoleFlags = []string{"console", "ssh-vendor", "ssh-port", "ssh-user", "ssh-pass-file", "ssh-command", "ssh-host-key"}

// typeFlags are the flags a node type takes beyond --type, --addr and
// --capture, and whether it has a BMC password; ok is false for a type
// obmctl does not know.
func typeFlags(typ string) (names []string, password, ok bool) {
	switch typ {
	case "ipmi":
		return append([]string{"user", "port", "cipher", "pass-file", "redfish", "redfish-insecure"}, consoleFlags...), true, true
	case "ipmitool":
		return append([]string{"user", "port", "cipher", "interface", "pass-file", "redfish", "redfish-insecure"}, consoleFlags...), true, true
	case "redfish":
		return append([]string{"user", "system", "insecure", "sol", "sol-port", "sol-cipher", "pass-file"}, consoleFlags...), true, true
	case "mock", "sim":
		return nil, false, true
	}
	return nil, false, false
}

func nodeList(c *client, in *input) error {
	var out api.Nodes
	if printed, err := c.call("GET", "/v1/nodes", nil, &out); printed || err != nil {
		return err
	}
	var rows [][]string
	for _, n := range out.Nodes {
		rows = append(rows, []string{n.Label, n.Type, hostPort(n.BMC), n.User, n.UpdatedAt.Format(time.RFC3339)})
	}
	c.table("LABEL\tTYPE\tBMC\tUSER\tUPDATED", rows)
	return nil
}

// hostPort is a BMC's address and port as an operator types them:
// [::1]:623 for an IPv6 address.
func hostPort(b api.BMC) string {
	if b.Port == 0 {
		return b.Addr
	}
	return net.JoinHostPort(b.Addr, strconv.Itoa(b.Port))
}

func nodeShow(c *client, in *input) error {
	label := in.args[0]
	var n api.Node
	if printed, err := c.call("GET", "/v1/nodes/"+esc(label), nil, &n); printed || err != nil {
		return err
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
	screen := ""
	if n.ScreenSize != "" {
		screen = "screen:   " + n.ScreenSize + "\n"
	}
	fmt.Fprintf(c.out, "label:    %s\ntype:     %s\nbmc:      %s\nuser:     %s\ncapture:  %s\n%s%s%stoken:    %v\nkeys:     %d\nsessions: %d\n",
		n.Label, n.Type, hostPort(n.BMC), n.User, capture, screen, nodeDetail(n), consoleDetail(n), n.HasToken != nil && *n.HasToken,
		deref(n.Keys), deref(n.Sessions))
	return nil
}

// consoleDetail is what node show says of a console over the BMC's SSH
// service: how it is reached, which transport is in use, the host key.
func consoleDetail(n api.Node) string {
	var b strings.Builder
	if n.Console != "" {
		vendor, port, inUse := n.SSHVendor, "the preset's port", n.ConsoleInUse
		if vendor == "" {
			vendor = "generic"
		}
		if n.SSHPort != 0 {
			port = fmt.Sprintf("port %d", n.SSHPort)
		}
		if inUse == "" {
			inUse = "none yet"
		}
		fmt.Fprintf(&b, "console:  %s (SSH: %s, %s), in use: %s\n", n.Console, vendor, port, inUse)
	}
	if n.Redfish != "" {
		tls := "verified"
		if n.RedfishInsecure {
			tls = "not verified (insecure)"
		}
		fmt.Fprintf(&b, "redfish:  %s (asked which console is on; TLS %s)\n", n.Redfish, tls)
	}
	switch {
	case n.SSHHostKey != "":
		fmt.Fprintf(&b, "ssh key:  %s (registered)\n", n.SSHHostKey)
	case n.SSHHostKeyPinned != nil:
		k := n.SSHHostKeyPinned
		fmt.Fprintf(&b, "ssh key:  %s (pinned %s at %s)\n", k.Fingerprint, k.PinnedAt.Format(time.RFC3339), k.Addr)
	}
	return b.String()
}

// hostKeyReset is `node ssh-host-key reset LABEL`: obmd forgets the BMC
// host key pinned for the node; the next console link pins the one it
// meets.
func hostKeyReset(c *client, in *input) error {
	label := in.args[0]
	var out api.HostKeyReset
	if printed, err := c.call("DELETE", "/v1/nodes/"+esc(label)+"/ssh-host-key", nil, &out); printed || err != nil {
		return err
	}
	if out.Removed {
		fmt.Fprintf(c.out, "%s: SSH host key forgotten; the next console link pins the key it meets\n", label)
	} else {
		fmt.Fprintf(c.out, "%s: no SSH host key was pinned\n", label)
	}
	return nil
}

// nodeAdd is `node add LABEL ...`: PUT /v1/nodes/{label}. A flag the
// node's type does not take is refused (it would be dropped without a
// word otherwise).
func nodeAdd(c *client, in *input) error {
	label, typ := in.args[0], in.str("type")
	takes, password, ok := typeFlags(typ)
	if !ok {
		return usageError(in.cmd, "unknown node type %q (ipmi, ipmitool, redfish, mock or sim)", typ)
	}
	var wrong []string
	for _, f := range in.cmd.flags {
		if in.given(f.name) && !slices.Contains([]string{"type", "addr", "capture", "screen-size", "allow-shared-bmc"}, f.name) && !slices.Contains(takes, f.name) {
			wrong = append(wrong, "--"+f.name)
		}
	}
	if len(wrong) > 0 {
		return usageError(in.cmd, "a %s node does not take %s", typ, strings.Join(wrong, ", "))
	}
	body := api.PutNode{Type: typ}
	if in.given("capture") {
		v, err := captureValue(in.cmd, in.str("capture"))
		if err != nil {
			return err
		}
		body.Capture = &v
	}
	if in.given("screen-size") {
		v := screenSizeValue(in.str("screen-size"))
		body.ScreenSize = &v
	}
	info, err := registration(in, password)
	if err != nil {
		return err
	}
	if body.Info, err = json.Marshal(info); err != nil {
		return err
	}
	path := "/v1/nodes/" + esc(label)
	if in.bool("allow-shared-bmc") {
		path += "?allow_shared_bmc=1"
	}
	if printed, err := c.call("PUT", path, body, nil); printed || err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s: registered\n", label)
	return nil
}

// registration is the node's "info" for PUT /v1/nodes/{label}: the flags
// given, and the BMC password for the types that have one.
func registration(in *input, password bool) (map[string]any, error) {
	info := map[string]any{"addr": in.str("addr")}
	if !password {
		return info, nil
	}
	p, err := bmcPassword(in.str("pass-file"), in.stdin, in.stderr, in.getenv)
	if err != nil {
		return nil, err
	}
	info["user"], info["pass"] = in.str("user"), p
	for _, name := range []string{"port", "cipher"} {
		if in.given(name) {
			info[name] = in.int(name)
		}
	}
	for _, name := range []string{"interface", "system", "redfish"} {
		if v := in.str(name); v != "" {
			info[name] = v
		}
	}
	if in.bool("insecure") {
		info["insecure"] = true
	}
	if in.bool("redfish-insecure") {
		info["redfish_insecure"] = true
	}
	if in.bool("sol") || in.given("sol-port") || in.given("sol-cipher") {
		sol := map[string]any{}
		if in.given("sol-port") {
			sol["port"] = in.int("sol-port")
		}
		if in.given("sol-cipher") {
			sol["cipher"] = in.int("sol-cipher")
		}
		info["sol"] = sol
	}
	return info, consoleInfo(in, info)
}

// consoleInfo adds the console flags to info: the SSH password and host
// key read from their files, never from an argument.
func consoleInfo(in *input, info map[string]any) error {
	for _, f := range []struct{ flag, field string }{{"console", "console"}, {"ssh-vendor", "ssh_vendor"},
		{"ssh-user", "ssh_user"}, {"ssh-command", "ssh_command"}} {
		if v := in.str(f.flag); v != "" {
			info[f.field] = v
		}
	}
	if in.given("ssh-port") {
		info["ssh_port"] = in.int("ssh-port")
	}
	for _, f := range []struct{ flag, field, what string }{{"ssh-pass-file", "ssh_pass", "SSH password"},
		{"ssh-host-key", "ssh_host_key", "SSH host key"}} {
		if file := in.str(f.flag); file != "" {
			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("%s: %w", f.what, err)
			}
			info[f.field] = strings.TrimRight(string(data), "\r\n")
		}
	}
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

// nodeSet is `node set LABEL [--capture always|attached|default]
// [--screen-size COLSxROWS|default]`: the node's settings, without its
// BMC info.
func nodeSet(c *client, in *input) error {
	label := in.args[0]
	if !in.given("capture") && !in.given("screen-size") {
		return usageError(in.cmd, "node set needs --capture or --screen-size")
	}
	if in.given("capture") {
		v, err := captureValue(in.cmd, in.str("capture"))
		if err != nil {
			return err
		}
		if printed, err := c.call("PUT", "/v1/nodes/"+esc(label)+"/capture", api.Capture{Capture: &v}, nil); printed || err != nil {
			return err
		}
		fmt.Fprintf(c.out, "%s: capture %s\n", label, in.str("capture"))
	}
	if in.given("screen-size") {
		v := screenSizeValue(in.str("screen-size"))
		if printed, err := c.call("PUT", "/v1/nodes/"+esc(label)+"/screen_size", api.ScreenSize{ScreenSize: &v}, nil); printed || err != nil {
			return err
		}
		fmt.Fprintf(c.out, "%s: screen size %s\n", label, in.str("screen-size"))
	}
	return nil
}

// screenSizeFlag is --screen-size, of node add and node set.
func screenSizeFlag() flagDef {
	return flagDef{name: "screen-size", arg: "S", field: "screen_size",
		usage: "the node's screen: COLSxROWS up to 200x100, or default (80x25); taken when its console next opens"}
}

// screenSizeValue maps --screen-size to the API's value ("default" is
// ""); obmd checks the size.
func screenSizeValue(s string) string {
	if s == "default" {
		return ""
	}
	return s
}

// nodeScreen is `screen LABEL [--ansi]`: GET /v1/nodes/{label}/screen,
// as text (or a redraw) written untouched to stdout, or its JSON.
func nodeScreen(c *client, in *input) error {
	path := "/v1/nodes/" + esc(in.args[0]) + "/screen"
	if c.asJSON {
		if in.bool("ansi") {
			return usageError(in.cmd, "--ansi is a redraw for a terminal, not JSON")
		}
		_, err := c.call("GET", path, nil, nil)
		return err
	}
	format := "text"
	if in.bool("ansi") {
		format = "ansi"
	}
	path += "?format=" + format
	resp, err := c.send("GET", path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return answerError("GET", path, resp, data)
	}
	if _, err := io.Copy(c.out, io.LimitReader(resp.Body, maxScreenBytes)); err != nil {
		return fmt.Errorf("screen: %w", err)
	}
	return nil
}

// maxScreenBytes bounds what screen copies: a redraw of the largest
// screen (200x100, both its buffers, every cell in its own colours) is
// under 3 MiB.
const maxScreenBytes = 8 << 20

// captureValue maps --capture to the API's value ("default" is "").
func captureValue(cmd *command, s string) (string, error) {
	switch s {
	case "always", "attached":
		return s, nil
	case "default":
		return "", nil
	}
	return "", usageError(cmd, "--capture wants always, attached or default, not %q", s)
}

func nodeRemove(c *client, in *input) error {
	return c.done("DELETE", "/v1/nodes/"+esc(in.args[0]), nil, in.args[0]+": deleted")
}

// nodeDetail is what node show adds to a node's BMC and user, by type:
// the IPMI cipher suite (pinned, or negotiated and the one in use), a
// Redfish node's system, TLS verification and console.
func nodeDetail(n api.Node) string {
	var b strings.Builder
	switch n.Type {
	case "ipmi", "ipmitool":
		fmt.Fprintf(&b, "cipher:   %s\n", cipherText(n.Cipher, n.CipherInUse))
		if n.Interface != "" {
			fmt.Fprintf(&b, "iface:    %s\n", n.Interface)
		}
	case "redfish":
		sys, tls := n.System, "verified"
		if sys == "" {
			sys = "the BMC's only one"
		}
		if n.Insecure {
			tls = "not verified (insecure)"
		}
		fmt.Fprintf(&b, "system:   %s\ntls:      %s\n", sys, tls)
		if n.SOL == nil {
			if n.Console == "" { // else consoleDetail says
				b.WriteString("console:  none (no sol details)\n")
			}
			break
		}
		port := n.SOL.Port
		if port == 0 {
			port = 623
		}
		fmt.Fprintf(&b, "console:  IPMI SOL on port %d\ncipher:   %s\n", port, cipherText(n.SOL.Cipher, n.CipherInUse))
	}
	return b.String()
}

// cipherText says which IPMI cipher suite a node uses: the one it pins,
// or negotiated and (once a session has) the one this replica chose.
func cipherText(pinned, inUse *int) string {
	switch {
	case pinned != nil && *pinned >= 0:
		return fmt.Sprintf("%d (pinned)", *pinned)
	case inUse != nil:
		return fmt.Sprintf("negotiated, in use: %d", *inUse)
	}
	return "negotiated, none yet"
}
