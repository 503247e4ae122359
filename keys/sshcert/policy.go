// Package sshcert is obmd's policy for OpenSSH user certificates as a node
// credential.
//
// It decides whether a certificate presented for a node opens it, and what
// the session it opens may do and until when.
//
// It reads nothing and keeps no state. The caller reads what the database
// knows about the certificate (its CA, its revocations, the node's extra
// principals and the start of its tenancy) in one query, keyed by what
// the certificate claims (Claims), and passes it with the certificate to
// Check, which verifies the CA's signature before it believes anything
// else the certificate says. A refusal's text is for the audit log only:
// the client must get the same answer as for a wrong token.
package sshcert

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/keys"
)

// Why Check refuses a certificate (errors.Is); the error's text adds the
// certificate and the detail, for the audit.
var (
	ErrMalformed     = errors.New("malformed certificate")
	ErrNotUserCert   = errors.New("not a user certificate")
	ErrUntrustedCA   = errors.New("signed by a CA that is not trusted")
	ErrSignature     = errors.New("CA signature refused")
	ErrNoPrincipals  = errors.New("lists no principal")
	ErrPrincipal     = errors.New("no principal of the node")
	ErrNotYetValid   = errors.New("not yet valid")
	ErrExpired       = errors.New("expired")
	ErrBeforeTenancy = errors.New("valid from before the node's last access change")
	ErrOption        = errors.New("critical option not supported")
	ErrSourceAddress = errors.New("source-address does not allow the client")
	ErrKeyID         = errors.New("key id cannot be revoked")
	// ErrRevoked is wrapped by both of the next two.
	ErrRevoked       = errors.New("revoked")
	ErrRevokedSerial = fmt.Errorf("%w by serial", ErrRevoked)
	ErrRevokedKeyID  = fmt.Errorf("%w by key id", ErrRevoked)
)

// Clock skew bounds (Config.Skew).
const (
	DefaultSkew = 60 * time.Second
	// MaxSkew: a larger tolerance would defeat short-lived certificates.
	MaxSkew = 10 * time.Minute
)

// MaxKeyIDLen is the longest key id a certificate may carry: a longer one
// (or one that is not UTF-8) could not be named in a revocation (the
// database column, the JSON API), so it is refused.
const MaxKeyIDLen = 256

// Config configures a Policy. Zero values take the defaults noted.
type Config struct {
	// Skew is the clock difference tolerated between the CA and obmd at
	// the start of a certificate's validity (default DefaultSkew, at most
	// MaxSkew): a certificate is accepted from valid_after minus the skew.
	// Never at its end (valid_before is strict, as in OpenSSH), nor at the
	// start of the node's tenancy: see Check.
	Skew time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// LegacyAlgorithms accepts CA signatures made with SHA-1 ("ssh-rsa"),
	// which OpenSSH refuses by default since 8.2.
	LegacyAlgorithms bool
}

// Policy checks certificates. Safe for concurrent use.
type Policy struct {
	skew   time.Duration
	now    func() time.Time
	legacy bool
}

// New returns a Policy; it refuses a skew that is negative or above
// MaxSkew.
func New(cfg Config) (*Policy, error) {
	switch {
	case cfg.Skew < 0:
		return nil, fmt.Errorf("certificate clock skew %v is negative", cfg.Skew)
	case cfg.Skew > MaxSkew:
		return nil, fmt.Errorf("certificate clock skew %v is above the limit of %v", cfg.Skew, MaxSkew)
	case cfg.Skew == 0:
		cfg.Skew = DefaultSkew
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Policy{skew: cfg.Skew, now: cfg.Now, legacy: cfg.LegacyAlgorithms}, nil
}

// Skew is the tolerance in use at the start of a certificate's validity.
func (p *Policy) Skew() time.Duration { return p.skew }

// Authorities are the trusted CAs: Authority returns the name of the CA
// whose key has fingerprint (SHA256:...), if it is trusted.
type Authorities interface {
	Authority(fingerprint string) (name string, ok bool)
}

// Revocations say whether the certificate of CA ca (its key's
// fingerprint) with serial and keyID is revoked, by its serial or by its
// key id (for that CA, or for every CA). A set that was read for another
// certificate must answer true: Check asks about the certificate it has
// verified, not the one the caller looked up.
type Revocations interface {
	Revoked(ca string, serial uint64, keyID string) (bySerial, byKeyID bool)
}

// Login is what the caller knows of one certificate login.
type Login struct {
	// Node is the label the session will serve: the user name the session
	// is routed by, and nothing else.
	Node string
	// Principals are the node's extra principals ("project-x").
	Principals []string
	// TenancyStart is when the node's access last changed (the time of the
	// change that set its current epoch); zero, unknown: refused.
	TenancyStart time.Time
	// Client is the client's address (behind a balancer, the one its PROXY
	// header gave), for source-address.
	Client netip.Addr
	// Authorities and Revocations as read for this certificate (a nil one
	// refuses every certificate).
	Authorities Authorities
	Revocations Revocations
}

// Grant is what an accepted certificate allows.
type Grant struct {
	CA            string // the CA's name
	CAFingerprint string // SHA256:... of the CA's key
	// KeyID is the key id exactly as signed (MaxKeyIDLen bytes of UTF-8 at
	// most): match revocations with it, print Who or Identity instead (the
	// issuer's text, possibly chosen by the holder).
	KeyID  string
	Serial uint64
	// Principal is the principal that matched: the label or one of the
	// node's principals.
	Principal string
	// Console is whether the certificate has permit-pty: without it the
	// session gets no console (no shell, no PTY, no `console` command),
	// only exec commands.
	Console bool
	// Expires is when the session must end: the certificate's
	// valid_before, the end of the window in which it is accepted (no skew
	// there), so no session outlives a time at which it could not log in.
	// Zero: the certificate never expires.
	Expires time.Time
}

// Who names the certificate for the audit: "hil:alice serial 42", the key
// id bounded and escaped (see cleanKeyID).
func (g Grant) Who() string {
	return shownName(g.CA) + ":" + cleanKeyID(g.KeyID) + " serial " + strconv.FormatUint(g.Serial, 10)
}

// Identity is the audit actor of the certificate: "ssh:cert hil:alice
// serial 42".
func (g Grant) Identity() string { return "ssh:cert " + g.Who() }

// Claims returns what cert says about itself, unverified, for the caller
// to read what Check needs from the database: the fingerprint of the CA key
// that signed it, its serial and its key id. Use them for that lookup
// only: nothing in cert is verified before Check.
func Claims(cert *gossh.Certificate) (ca string, serial uint64, keyID string) {
	if cert == nil {
		return "", 0, ""
	}
	if cert.SignatureKey != nil {
		ca = keys.Fingerprint(cert.SignatureKey)
	}
	return ca, cert.Serial, cert.KeyId
}

// Check decides whether cert opens l.Node: it returns the Grant, or an
// error wrapping one of the Err values above, whose text (safe to log:
// certificate text is escaped and bounded) is for the audit only.
//
// A certificate opens the node when it is a user certificate signed by a
// trusted CA (the signature verified with x/crypto's CertChecker before
// anything else in it is believed); lists the node's label or one of its
// principals (an empty list is refused: OpenSSH's "any principal" holds
// for host certificates only); is within [valid_after - skew,
// valid_before) (the skew is for a CA's clock that runs ahead when it
// signs; the end is strict, as OpenSSH treats it); is valid from no earlier than l.TenancyStart, without skew (a
// certificate issued before the node's last access change belongs to the
// previous tenancy, and a certificate carries no other issue time, so an
// issuer must start the validity at or after the change: ssh-keygen's
// "-V +1h" backdates the start by one to two minutes, "-V +1s:+1h" does
// not); has no critical option but source-address, which must allow
// l.Client (force-command is refused: obmd cannot restrict a session to
// one command, and a certificate meant for one must not get a console;
// verify-required too); has a key id that can be revoked; and is revoked
// neither by serial nor by key id.
func (p *Policy) Check(cert *gossh.Certificate, l Login) (Grant, error) {
	g, err := p.check(cert, l)
	if err != nil {
		return Grant{}, fmt.Errorf("certificate %s: %w", describe(cert, l.Authorities), err)
	}
	return g, nil
}

func (p *Policy) check(cert *gossh.Certificate, l Login) (Grant, error) {
	ca, fp, err := p.authentic(cert, l.Authorities)
	if err != nil {
		return Grant{}, err
	}
	// From here on the certificate says what its CA signed.
	g := Grant{CA: ca, CAFingerprint: fp, KeyID: cert.KeyId, Serial: cert.Serial}
	if err := checkOptions(cert, l.Client); err != nil {
		return Grant{}, err
	}
	if g.Principal, err = matchPrincipal(cert, l); err != nil {
		return Grant{}, err
	}
	if g.Expires, err = p.checkTimes(cert, l.TenancyStart); err != nil {
		return Grant{}, err
	}
	if err := checkRevocable(cert.KeyId); err != nil {
		return Grant{}, err
	}
	if l.Revocations == nil {
		return Grant{}, fmt.Errorf("%w (no revocation list)", ErrRevoked)
	}
	switch bySerial, byKeyID := l.Revocations.Revoked(g.CAFingerprint, cert.Serial, cert.KeyId); {
	case bySerial:
		return Grant{}, ErrRevokedSerial
	case byKeyID:
		return Grant{}, ErrRevokedKeyID
	}
	_, g.Console = cert.Extensions["permit-pty"]
	return g, nil
}

// authentic checks that cert is a well-formed user certificate signed by a
// trusted CA with an accepted algorithm, and verifies the signature; it
// returns the CA's name and fingerprint.
func (p *Policy) authentic(cert *gossh.Certificate, cas Authorities) (name, fp string, err error) {
	switch {
	case cert == nil || cert.SignatureKey == nil || cert.Signature == nil || cert.Key == nil:
		return "", "", ErrMalformed
	case cert.CertType != gossh.UserCert:
		return "", "", fmt.Errorf("%w (type %d)", ErrNotUserCert, cert.CertType)
	}
	if err := checkWindow(cert); err != nil {
		return "", "", err
	}
	first := slices.IndexFunc(cert.ValidPrincipals, func(s string) bool { return s != "" })
	if first < 0 {
		return "", "", ErrNoPrincipals
	}
	fp = keys.Fingerprint(cert.SignatureKey)
	ok := false
	if cas != nil {
		name, ok = cas.Authority(fp)
	}
	if !ok {
		return "", "", ErrUntrustedCA
	}
	if !p.algorithmOK(cert.Signature.Format) {
		return "", "", fmt.Errorf("%w (algorithm %s)", ErrSignature, quote(cert.Signature.Format, 64))
	}
	// CertChecker verifies the signature; every other check it makes is
	// made to pass here (they are Check's, with skew and obmd's rules):
	// a principal the certificate lists, a clock at its valid_after
	// (checkWindow made sure that is before valid_before), and the
	// critical options it carries (checkOptions judges them).
	cc := gossh.CertChecker{
		SupportedCriticalOptions: optionNames(cert),
		Clock:                    func() time.Time { return time.Unix(int64(cert.ValidAfter), 0) },
	}
	if err := cc.CheckCert(cert.ValidPrincipals[first], cert); err != nil {
		return "", "", fmt.Errorf("%w (%v)", ErrSignature, err)
	}
	return name, fp, nil
}

// signatureAlgorithms are those OpenSSH accepts for CA signatures by
// default (CASignatureAlgorithms); LegacyAlgorithms adds "ssh-rsa".
var signatureAlgorithms = []string{
	gossh.KeyAlgoED25519, gossh.KeyAlgoSKED25519,
	gossh.KeyAlgoECDSA256, gossh.KeyAlgoECDSA384, gossh.KeyAlgoECDSA521, gossh.KeyAlgoSKECDSA256,
	gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256,
}

func (p *Policy) algorithmOK(format string) bool {
	return slices.Contains(signatureAlgorithms, format) || p.legacy && format == gossh.KeyAlgoRSA
}

// checkWindow refuses validity times no clock can be within: an empty
// window, or times past what a signed 64-bit second count holds (x/crypto
// takes those as never valid, or expired).
func checkWindow(cert *gossh.Certificate) error {
	const maxTime = 1<<63 - 1
	switch {
	case cert.ValidAfter > maxTime:
		return fmt.Errorf("%w (valid_after out of range)", ErrNotYetValid)
	case cert.ValidBefore != gossh.CertTimeInfinity && cert.ValidBefore > maxTime:
		return fmt.Errorf("%w (valid_before out of range)", ErrExpired)
	case cert.ValidBefore <= cert.ValidAfter:
		return fmt.Errorf("%w (empty validity window)", ErrExpired)
	}
	return nil
}

func optionNames(cert *gossh.Certificate) []string {
	names := make([]string, 0, len(cert.CriticalOptions))
	for name := range cert.CriticalOptions {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// checkOptions judges the critical options: source-address must allow
// client; any other is refused (as OpenSSH refuses those it does not know;
// force-command and verify-required it knows, but obmd cannot honour
// them).
func checkOptions(cert *gossh.Certificate, client netip.Addr) error {
	for _, name := range optionNames(cert) {
		if name != "source-address" {
			return fmt.Errorf("%w (%s)", ErrOption, quote(name, 64))
		}
		list := cert.CriticalOptions[name]
		prefixes, err := parseSourceAddress(list)
		if err != nil {
			return fmt.Errorf("%w (%s: %v)", ErrSourceAddress, quote(list, 128), err)
		}
		if !sourceAllows(prefixes, client) {
			return fmt.Errorf("%w (%s does not allow %s)", ErrSourceAddress, quote(list, 128), client)
		}
	}
	return nil
}

// matchPrincipal returns the first of the node's label and principals that
// cert lists.
func matchPrincipal(cert *gossh.Certificate, l Login) (string, error) {
	if l.Node == "" {
		return "", fmt.Errorf("%w (no node)", ErrPrincipal)
	}
	listed := make(map[string]bool, len(cert.ValidPrincipals))
	for _, p := range cert.ValidPrincipals {
		listed[p] = true
	}
	for _, want := range append([]string{l.Node}, l.Principals...) {
		if want != "" && listed[want] {
			return want, nil
		}
	}
	return "", fmt.Errorf("%w (%s lists %s)", ErrPrincipal, quote(l.Node, 80), list(cert.ValidPrincipals))
}

// checkTimes checks the validity window against the clock, with skew at
// its start and none at its end, and its start against the tenancy's,
// without; it returns Grant.Expires.
func (p *Policy) checkTimes(cert *gossh.Certificate, tenancy time.Time) (time.Time, error) {
	now := p.now()
	after := time.Unix(int64(cert.ValidAfter), 0)
	if now.Before(after.Add(-p.skew)) {
		return time.Time{}, fmt.Errorf("%w (from %s; skew %v)", ErrNotYetValid, stamp(after), p.skew)
	}
	var expires time.Time
	if cert.ValidBefore != gossh.CertTimeInfinity {
		expires = time.Unix(int64(cert.ValidBefore), 0).UTC()
		if !now.Before(expires) {
			return time.Time{}, fmt.Errorf("%w (at %s)", ErrExpired, stamp(expires))
		}
	}
	// No skew here: with it, a certificate issued up to skew before the
	// change (by the previous tenant's issuer) would open the new tenancy.
	if tenancy.IsZero() {
		return time.Time{}, fmt.Errorf("%w (tenancy start unknown)", ErrBeforeTenancy)
	}
	if after.Before(tenancy) {
		return time.Time{}, fmt.Errorf("%w (valid from %s, access changed at %s)", ErrBeforeTenancy,
			stamp(after), tenancy.UTC().Format(time.RFC3339Nano))
	}
	return expires, nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
