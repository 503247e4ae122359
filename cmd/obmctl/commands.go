package main

import (
	"fmt"
	"strings"
)

// commandTable is obmctl's commands, in the order help lists them.
func commandTable() []command {
	label := []string{"LABEL"}
	return []command{
		{name: "node ls", summary: "list nodes", run: nodeList},
		{name: "node show", args: label, summary: "one node (never its BMC password)", run: nodeShow},
		{name: "node add", args: label, flags: nodeAddFlags(), run: nodeAdd,
			summary: "register a node, or change one (cuts its sessions if anything changed)",
			help: "The BMC password comes from --pass-file, OBMD_BMC_PASS, or a prompt: never from an argument.\n" +
				"A flag the node's type does not take is refused. --cipher unset: negotiated (17, then 3).\n" +
				"Redfish: --addr https://HOST[:PORT], --user, and --system, --insecure, --sol, --sol-port, --sol-cipher.\n" +
				"The console over the BMC's SSH service: --console ssh|auto and the --ssh-* flags (ipmi, ipmitool, redfish);\n" +
				"ipmi, ipmitool with --console auto: --redfish URL, the BMC's Redfish service, says which console is on.",
			argHint: "the BMC password is never an argument: use --pass-file, OBMD_BMC_PASS or the prompt",
			fields:  map[string]string{"info.pass": "the BMC password", "info.ssh_pass": "the SSH password"}},
		{name: "node set", args: label, run: nodeSet, summary: "change a node's console capture or screen size",
			flags: []flagDef{{name: "capture", arg: "C", field: "capture",
				usage: "always (recorded with nobody attached), attached, or default (always for ipmi and ipmitool)"},
				screenSizeFlag()}},
		{name: "node rm", args: label, summary: "delete a node (cuts its sessions; idempotent)", run: nodeRemove},
		{name: "node ssh-host-key reset", args: label, run: hostKeyReset,
			summary: "forget the BMC's SSH host key pinned for the node (idempotent)",
			help:    "The next console link pins the key it meets: do it only when the BMC's key really changed."},
		{name: "console-log", args: label, run: consoleLog, flags: consoleLogFlags(),
			summary: "the console history of the node's current (or a kept) tenancy, as it was stored",
			help:    "It is written to stdout untouched (raw), as lines (text), or as an asciicast v2 recording (cast)."},
		{name: "screen", args: label, run: nodeScreen, flags: []flagDef{{name: "ansi", kind: boolFlag,
			usage: "a redraw for a terminal (clear, the cells with their attributes, the cursor)"}},
			summary: "what the node's console shows now (its screen), one row a line",
			help: "--json gives its size, cursor, rows and the runs of cells drawn with attributes.\n" +
				"Where the node's console is not open, obmd opens it for the time of the request."},
		{name: "tenancies", args: label, summary: "the node's stored tenancies (for console-log --tenancy)", run: tenancies},
		{name: "doctor", args: label, summary: "check the node's BMC step by step (exit 1 if a step fails)", run: doctor,
			help: "It reads only (no power action), stops at the first failure and says what to do."},
		{name: "token rotate", args: label, summary: "issue a new token, printed once (cuts the node's sessions)", run: tokenRotate},
		{name: "token revoke", args: label, summary: "revoke the token (cuts the node's sessions; idempotent)", run: tokenRevoke},
		{name: "key add", args: []string{"LABEL", "FILE|-"}, summary: "allow an authorized_keys line (one key) on the node", run: keyAdd},
		{name: "key ls", args: label, summary: "list a node's keys", run: keyList},
		{name: "key rm", args: []string{"LABEL", "FINGERPRINT"}, summary: "remove a key (cuts the node's sessions; idempotent)", run: keyRemove},
		{name: "ca add", args: []string{"NAME", "FILE|-"}, summary: "trust a user CA's public key (certificate logins)", run: caAdd},
		{name: "ca ls", summary: "list trusted CAs", run: caList},
		{name: "ca rm", args: []string{"FINGERPRINT"}, summary: "stop trusting a CA (ends its certificates' sessions; idempotent)", run: caRemove},
		{name: "ca revoke", flags: caRevokeFlags(), run: caRevoke,
			summary: "revoke certificates by --serial or --key-id (of every CA unless --ca)",
			help:    "The revocation is kept until --expires (when the certificates expire anyway), else for good."},
		{name: "ca revoked", summary: "list revocations", run: caRevoked},
		{name: "ca unrevoke", flags: revocationFlags(), run: caUnrevoke,
			summary: "delete a revocation, named as it was made by --serial or --key-id, and --ca (idempotent)",
			help:    "The certificates it names are accepted again."},
		{name: "principals", args: []string{"LABEL", "[PRINCIPAL...]"}, run: principals,
			summary: "show or set the extra principals a node carries (certificate logins)",
			flags:   []flagDef{{name: "none", kind: boolFlag, usage: "remove every extra principal"}}},
		{name: "sessions", args: []string{"[LABEL]"}, summary: "live sessions (of every replica)", run: sessionList},
		{name: "kick", args: []string{"ID"}, summary: "end one session", run: kick},
		{name: "audit", summary: "audit events, newest last", run: audit,
			help: "COUNT is how many events a row stands for: repeats of a read or a refusal are counted into a row per audit.aggregate_window.",
			flags: []flagDef{
				{name: "node", arg: "LABEL", usage: "only this node's"},
				{name: "since", arg: "T", usage: "only from T on (RFC 3339 or unix seconds)"},
				{name: "limit", kind: intFlag, arg: "N", usage: "at most N, the newest (1 to 1000)"}}},
		{name: "lockouts", run: lockouts,
			summary: "the addresses the guessing limits lock out, and the nodes under attack (this replica's)",
			help: "A locked-out address is refused even with the right token, and told nothing more than for a wrong one.\n" +
				"The limits (auth_limits) are printed first. In a cluster each replica counts the failures it sees: ask each (--url)."},
		{name: "unlock", args: []string{"ADDR"}, run: unlock,
			summary: "lift an address's lockout (audited; idempotent)",
			help:    "ADDR is an IP address, or an IPv6 /64 as lockouts lists it. The address's next try is judged afresh."},
		{name: "health", summary: "obmd's /healthz and /readyz (exit 1 unless both are OK)", noToken: true, run: health},
		{name: "help", args: []string{"[COMMAND...]"}, summary: "list the commands, or show one's flags", noToken: true, run: help},
	}
}

// help is `help [COMMAND...]`: the list of commands (of a group), or a
// command's usage and flags, on stdout.
func help(c *client, in *input) error {
	tab := commandTable()
	name := strings.Join(in.args, " ")
	switch {
	case name == "" || isGroup(tab, name):
		fmt.Fprint(in.stdout, commandList(tab, name))
		return nil
	}
	cmd, err := lookup(tab, in.args)
	if err != nil {
		return err
	}
	fmt.Fprint(in.stdout, commandHelp(cmd))
	return nil
}
