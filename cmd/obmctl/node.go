package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// nodeFlags are node add's flags after the label.
type nodeFlags struct {
	typ, addr, user, iface, system, passFile, capture string
	port, cipher, solPort, solCipher                  int
	insecure, sol                                     bool
	set                                               []string // the names of the flags given
}

// typeFlags are the flags a node type takes beyond --type, --addr and
// --capture, and whether it has a BMC password; ok is false for a type
// obmctl does not know.
func typeFlags(typ string) (names []string, password, ok bool) {
	switch typ {
	case "ipmi":
		return []string{"user", "port", "cipher", "pass-file"}, true, true
	case "ipmitool":
		return []string{"user", "port", "cipher", "interface", "pass-file"}, true, true
	case "redfish":
		return []string{"user", "system", "insecure", "sol", "sol-port", "sol-cipher", "pass-file"}, true, true
	case "mock", "sim":
		return nil, false, true
	}
	return nil, false, false
}

// parseNodeFlags parses node add's flags and refuses a flag the node's
// type does not take (it would be dropped without a word otherwise).
func parseNodeFlags(args []string) (*nodeFlags, error) {
	f := &nodeFlags{}
	fs := flag.NewFlagSet("node add", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.typ, "type", "ipmi", "ipmi, ipmitool, redfish, mock or sim")
	fs.StringVar(&f.addr, "addr", "", "BMC address (redfish: https://host[:port])")
	fs.StringVar(&f.user, "user", "", "BMC user")
	fs.IntVar(&f.port, "port", 0, "RMCP+ port (default 623)")
	fs.IntVar(&f.cipher, "cipher", -1, "IPMI cipher suite (default: negotiated, 17 then 3)")
	fs.StringVar(&f.iface, "interface", "", "ipmitool interface: lan or lanplus")
	fs.StringVar(&f.system, "system", "", "redfish: the system's Id or path (default: the BMC's only one)")
	fs.BoolVar(&f.insecure, "insecure", false, "redfish: do not verify the BMC's TLS certificate")
	fs.BoolVar(&f.sol, "sol", false, "redfish: the console over IPMI SOL on the same host and account")
	fs.IntVar(&f.solPort, "sol-port", 0, "redfish: the console's RMCP+ port (implies --sol; default 623)")
	fs.IntVar(&f.solCipher, "sol-cipher", -1, "redfish: the console's cipher suite (implies --sol; default negotiated)")
	fs.StringVar(&f.passFile, "pass-file", "", "file holding the BMC password")
	fs.StringVar(&f.capture, "capture", "", "console capture: always, attached or default")
	if err := fs.Parse(args); err != nil {
		return nil, usageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return nil, usageErr("unexpected argument %q (the BMC password is never an argument: use --pass-file, OBMD_BMC_PASS or the prompt)", fs.Arg(0))
	}
	takes, _, ok := typeFlags(f.typ)
	if !ok {
		return nil, usageErr("unknown node type %q (ipmi, ipmitool, redfish, mock or sim)", f.typ)
	}
	var wrong []string
	fs.Visit(func(fl *flag.Flag) {
		f.set = append(f.set, fl.Name)
		if !slices.Contains([]string{"type", "addr", "capture"}, fl.Name) && !slices.Contains(takes, fl.Name) {
			wrong = append(wrong, "--"+fl.Name)
		}
	})
	if len(wrong) > 0 {
		return nil, usageErr("a %s node does not take %s", f.typ, strings.Join(wrong, ", "))
	}
	return f, nil
}

func (f *nodeFlags) given(name string) bool { return slices.Contains(f.set, name) }

// info is the node's info for PUT /v1/nodes/{label}; pass reads the BMC
// password, for the types that have one.
func (f *nodeFlags) info(pass func() (string, error)) (map[string]any, error) {
	info := map[string]any{"addr": f.addr}
	if _, password, _ := typeFlags(f.typ); !password {
		return info, nil
	}
	p, err := pass()
	if err != nil {
		return nil, err
	}
	info["user"], info["pass"] = f.user, p
	if f.given("port") {
		info["port"] = f.port
	}
	if f.given("cipher") {
		info["cipher"] = f.cipher
	}
	if f.iface != "" {
		info["interface"] = f.iface
	}
	if f.system != "" {
		info["system"] = f.system
	}
	if f.insecure {
		info["insecure"] = true
	}
	if f.sol || f.given("sol-port") || f.given("sol-cipher") {
		sol := map[string]any{}
		if f.given("sol-port") {
			sol["port"] = f.solPort
		}
		if f.given("sol-cipher") {
			sol["cipher"] = f.solCipher
		}
		info["sol"] = sol
	}
	return info, nil
}

// nodeDetail is what node show adds to a node's BMC and user, by type:
// the IPMI cipher suite (pinned, or negotiated and the one in use), a
// Redfish node's system, TLS verification and console.
func nodeDetail(n node) string {
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
			b.WriteString("console:  none (no sol details)\n")
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
