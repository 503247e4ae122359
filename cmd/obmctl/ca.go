package main

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Certificate authorities, revocations and node principals (/v1/cas,
// PUT /v1/nodes/{label} "principals").

const caUsage = `  ca add NAME FILE|-            trust a user CA's public key (certificate logins)
  ca ls                         list trusted CAs
  ca rm FINGERPRINT             stop trusting a CA (ends its certificates' sessions)
  ca revoke --serial N | --key-id ID [--ca NAME|FINGERPRINT] [--expires T]
                                revoke certificates (of every CA by default) until T
                                (when they expire anyway; default: for good)
  ca revoked                    list revocations
  ca unrevoke --serial N | --key-id ID [--ca NAME|FINGERPRINT]
                                delete a revocation, named as it was made (the
                                certificates it names are accepted again)
  principals LABEL [P ...|--none]  show or set the extra principals a node carries`

func (c *client) caAdd(args []string, stdin io.Reader) error {
	if len(args) != 2 {
		return usageErr("ca add NAME FILE|-")
	}
	data, err := readFileOrStdin(args[1], stdin)
	if err != nil {
		return fmt.Errorf("read CA key: %w", err)
	}
	var out struct{ Fingerprint, Name string }
	if err := c.call("POST", "/v1/cas", map[string]string{"name": args[0], "key": strings.TrimSpace(string(data))}, &out); err != nil {
		return done(err)
	}
	fmt.Fprintf(c.out, "%s: trusted as %s\n", out.Fingerprint, out.Name)
	return nil
}

func (c *client) caList(args []string) error {
	if len(args) != 0 {
		return usageErr("ca ls")
	}
	var out struct {
		CAs []struct {
			Fingerprint, Name, Key string
			CreatedAt              time.Time `json:"created_at"`
		}
	}
	if err := c.call("GET", "/v1/cas", nil, &out); err != nil {
		return done(err)
	}
	var rows [][]string
	for _, ca := range out.CAs {
		typ, _, _ := strings.Cut(ca.Key, " ")
		rows = append(rows, []string{ca.Fingerprint, ca.Name, typ, ca.CreatedAt.Format(time.RFC3339)})
	}
	c.table("FINGERPRINT\tNAME\tTYPE\tADDED", rows)
	return nil
}

func (c *client) caRemove(args []string) error {
	fp, err := one(args, "CA fingerprint")
	if err != nil {
		return err
	}
	var out struct{ Removed bool }
	if err := c.call("DELETE", "/v1/cas/"+url.PathEscape(fp), nil, &out); err != nil {
		return done(err)
	}
	if out.Removed {
		fmt.Fprintf(c.out, "%s: removed\n", fp)
	} else {
		fmt.Fprintf(c.out, "%s: was not trusted\n", fp)
	}
	return nil
}

func (c *client) caRevoke(args []string) error {
	fs := flag.NewFlagSet("ca revoke", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	serial := fs.String("serial", "", "certificate serial")
	keyID := fs.String("key-id", "", "certificate key id")
	ca := fs.String("ca", "", "the CA (name or fingerprint); default every CA")
	expires := fs.String("expires", "", "when the certificates expire anyway (RFC 3339 or unix seconds)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || (*serial == "") == (*keyID == "") {
		return usageErr("ca revoke --serial N | --key-id ID [--ca NAME|FINGERPRINT] [--expires T]")
	}
	body := map[string]any{}
	if *serial != "" {
		n, err := strconv.ParseUint(*serial, 10, 64)
		if err != nil {
			return usageErr("--serial %q: want an unsigned number", *serial)
		}
		body["serial"] = n
	} else {
		body["key_id"] = *keyID
	}
	if *ca != "" {
		body["ca"] = *ca
	}
	if *expires != "" {
		body["expires"] = *expires
	}
	if err := c.call("POST", "/v1/cas/revoked", body, nil); err != nil {
		return done(err)
	}
	fmt.Fprintln(c.out, "revoked")
	return nil
}

func (c *client) caUnrevoke(args []string) error {
	const synopsis = "ca unrevoke --serial N | --key-id ID [--ca NAME|FINGERPRINT]"
	fs := flag.NewFlagSet("ca unrevoke", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	serial := fs.String("serial", "", "certificate serial")
	keyID := fs.String("key-id", "", "certificate key id")
	ca := fs.String("ca", "", "the CA (name or fingerprint); default every CA")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || (*serial == "") == (*keyID == "") {
		return usageErr(synopsis)
	}
	path, what := "/v1/cas/revoked/key_id/"+url.PathEscape(*keyID), "key id "+strconv.Quote(*keyID)
	if *serial != "" {
		if _, err := strconv.ParseUint(*serial, 10, 64); err != nil {
			return usageErr("--serial %q: want an unsigned number", *serial)
		}
		path, what = "/v1/cas/revoked/serial/"+*serial, "serial "+*serial
	}
	if *ca != "" {
		path += "?ca=" + url.QueryEscape(*ca)
	}
	var out struct{ Removed bool }
	if err := c.call("DELETE", path, nil, &out); err != nil {
		return done(err)
	}
	if out.Removed {
		fmt.Fprintf(c.out, "%s: revocation deleted\n", what)
	} else {
		fmt.Fprintf(c.out, "%s: was not revoked\n", what)
	}
	return nil
}

func (c *client) caRevoked(args []string) error {
	if len(args) != 0 {
		return usageErr("ca revoked")
	}
	var out struct {
		Revoked []struct {
			Kind, CA  string
			Serial    *uint64
			KeyID     *string    `json:"key_id"`
			ExpiresAt *time.Time `json:"expires_at"`
		}
	}
	if err := c.call("GET", "/v1/cas/revoked", nil, &out); err != nil {
		return done(err)
	}
	var rows [][]string
	for _, r := range out.Revoked {
		what, ca, until := "", r.CA, "never"
		if r.Serial != nil {
			what = "serial " + strconv.FormatUint(*r.Serial, 10)
		} else if r.KeyID != nil {
			what = "key id " + strconv.Quote(*r.KeyID)
		}
		if ca == "" {
			ca = "every CA"
		}
		if r.ExpiresAt != nil {
			until = r.ExpiresAt.Format(time.RFC3339)
		}
		rows = append(rows, []string{what, ca, until})
	}
	c.table("REVOKED\tCA\tKEPT UNTIL", rows)
	return nil
}

// principals shows (LABEL alone) or sets a node's extra principals.
func (c *client) principals(args []string) error {
	if len(args) == 0 {
		return usageErr("principals LABEL [PRINCIPAL ...|--none]")
	}
	label, set := args[0], args[1:]
	var out struct{ Principals []string }
	var err error
	switch {
	case len(set) == 0:
		err = c.call("GET", "/v1/nodes/"+esc(label), nil, &out)
	case len(set) == 1 && set[0] == "--none":
		err = c.call("PUT", "/v1/nodes/"+esc(label), map[string]any{"principals": []string{}}, &out)
	default:
		err = c.call("PUT", "/v1/nodes/"+esc(label), map[string]any{"principals": set}, &out)
	}
	if err != nil {
		return done(err)
	}
	shown := "none"
	if len(out.Principals) > 0 {
		shown = strings.Join(out.Principals, " ")
	}
	fmt.Fprintf(c.out, "%s: principals %s\n", label, shown)
	return nil
}

// ca runs `ca SUB ARGS`.
func (c *client) ca(sub string, args []string, stdin io.Reader) error {
	if len(args) > 0 {
		args = args[1:]
	}
	switch sub {
	case "add":
		return c.caAdd(args, stdin)
	case "ls":
		return c.caList(args)
	case "rm":
		return c.caRemove(args)
	case "revoke":
		return c.caRevoke(args)
	case "revoked":
		return c.caRevoked(args)
	case "unrevoke":
		return c.caUnrevoke(args)
	}
	return usageErr("unknown command %q", strings.TrimSpace("ca "+sub))
}
