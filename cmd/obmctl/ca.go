package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/obmd/obmd/bastion/admin/api"
)

// Certificate authorities and revocations (/v1/cas).

func caRevokeFlags() []flagDef {
	return append(revocationFlags(),
		flagDef{name: "expires", arg: "T", usage: "when the certificates expire anyway, RFC 3339 or unix seconds (default: kept for good)"})
}

// revocationFlags name a revocation: ca revoke's and ca unrevoke's.
func revocationFlags() []flagDef {
	return []flagDef{
		{name: "serial", arg: "N", usage: "the certificates with this serial"},
		{name: "key-id", arg: "ID", usage: "the certificates with this key id"},
		{name: "ca", arg: "NAME|FINGERPRINT", usage: "of this CA only (default: of every CA)"},
	}
}

func caAdd(c *client, in *input) error {
	data, err := readFileOrStdin(in.args[1], in.stdin)
	if err != nil {
		return fmt.Errorf("read CA key: %w", err)
	}
	var out api.CA
	if printed, err := c.call("POST", "/v1/cas", api.AddCA{Name: in.args[0], Key: strings.TrimSpace(string(data))}, &out); printed || err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s: trusted as %s\n", out.Fingerprint, out.Name)
	return nil
}

func caList(c *client, in *input) error {
	var out api.CAs
	if printed, err := c.call("GET", "/v1/cas", nil, &out); printed || err != nil {
		return err
	}
	var rows [][]string
	for _, ca := range out.CAs {
		typ, _, _ := strings.Cut(ca.Key, " ")
		added := ""
		if ca.CreatedAt != nil {
			added = ca.CreatedAt.Format(time.RFC3339)
		}
		rows = append(rows, []string{ca.Fingerprint, ca.Name, typ, added})
	}
	c.table("FINGERPRINT\tNAME\tTYPE\tADDED", rows)
	return nil
}

func caRemove(c *client, in *input) error {
	fp := in.args[0]
	var out api.Removed
	if printed, err := c.call("DELETE", "/v1/cas/"+url.PathEscape(fp), nil, &out); printed || err != nil {
		return err
	}
	if out.Removed {
		fmt.Fprintf(c.out, "%s: removed\n", fp)
	} else {
		fmt.Fprintf(c.out, "%s: was not trusted\n", fp)
	}
	return nil
}

func caRevoke(c *client, in *input) error {
	body, err := revocation(in)
	if err != nil {
		return err
	}
	if exp := in.str("expires"); exp != "" {
		body.Expires, _ = json.Marshal(exp)
	}
	return c.done("POST", "/v1/cas/revoked", body, "revoked")
}

// revocation is the revocation --serial or --key-id, and --ca, name.
func revocation(in *input) (api.Revoke, error) {
	serial, keyID := in.str("serial"), in.str("key-id")
	if (serial == "") == (keyID == "") {
		return api.Revoke{}, usageError(in.cmd, "%s wants --serial N or --key-id ID (one of them)", in.cmd.name)
	}
	r := api.Revoke{CA: in.str("ca")}
	if serial != "" {
		n, err := strconv.ParseUint(serial, 10, 64)
		if err != nil {
			return r, usageError(in.cmd, "--serial %q: want an unsigned number", serial)
		}
		r.Serial = &n
	} else {
		r.KeyID = &keyID
	}
	return r, nil
}

// caUnrevoke is `ca unrevoke`: DELETE /v1/cas/revoked/serial/N or
// /key_id/ID, the revocation named as it was made.
func caUnrevoke(c *client, in *input) error {
	r, err := revocation(in)
	if err != nil {
		return err
	}
	path, what := "/v1/cas/revoked/key_id/"+url.PathEscape(in.str("key-id")), "key id "+strconv.Quote(in.str("key-id"))
	if r.Serial != nil {
		path, what = "/v1/cas/revoked/serial/"+in.str("serial"), "serial "+in.str("serial")
	}
	if r.CA != "" {
		path += "?ca=" + url.QueryEscape(r.CA)
	}
	var out api.Removed
	if printed, err := c.call("DELETE", path, nil, &out); printed || err != nil {
		return err
	}
	if out.Removed {
		fmt.Fprintf(c.out, "%s: revocation deleted\n", what)
	} else {
		fmt.Fprintf(c.out, "%s: was not revoked\n", what)
	}
	return nil
}

func caRevoked(c *client, in *input) error {
	var out api.Revocations
	if printed, err := c.call("GET", "/v1/cas/revoked", nil, &out); printed || err != nil {
		return err
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
