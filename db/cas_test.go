package db

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/keys/sshcert"
)

// TestCertStore runs the certificate cases on every engine.
func TestCertStore(t *testing.T) {
	runCases(t, []storeCase{
		{"cas", testCAs},
		{"ca_clash_concurrent", testCAClashConcurrent},
		{"revocations", testRevocations},
		{"revocations_refuse_bad_input", testRevocationsBadInput},
		{"purge_revocations", testPurgeRevocations},
		{"revocation_expiry_bounded", testRevocationExpiryBounded},
		{"delete_revocation", testDeleteRevocation},
		{"credential_changes", testCredentialChanges},
		{"principals", testPrincipals},
		{"cert_access", testCertAccess},
		{"cert_login", testCertLogin},
	})
}

var (
	caOne = CA{Fingerprint: "SHA256:one", Name: "hil", Line: "ssh-ed25519 AAAA one"}
	caTwo = CA{Fingerprint: "SHA256:two", Name: "other", Line: "ssh-ed25519 AAAA two"}
)

func mustAddCA(t *testing.T, s *Store, ca CA) {
	t.Helper()
	if created, err := s.AddCA(context.Background(), ca); err != nil || !created {
		t.Fatalf("add CA %s: got %v, %v, want created", ca.Name, created, err)
	}
}

func testCAs(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	before, _ := s.LatestChange(ctx)
	mustAddCA(t, s, caTwo)
	mustAddCA(t, s, caOne)
	if got, _ := s.LatestChange(ctx); got != before {
		t.Errorf("adding CAs moved the latest change from %d to %d, want no change", before, got)
	}
	again := caOne
	again.Line += " new comment"
	if created, err := s.AddCA(ctx, again); err != nil || created {
		t.Errorf("add the same CA again: got %v, %v, want not created, nil", created, err)
	}
	for name, ca := range map[string]CA{
		"same key, other name": {Fingerprint: caOne.Fingerprint, Name: "x", Line: caOne.Line},
		"same name, other key": {Fingerprint: "SHA256:three", Name: caOne.Name, Line: "l"},
	} {
		if _, err := s.AddCA(ctx, ca); !errors.Is(err, ErrExists) {
			t.Errorf("%s: got %v, want %v", name, err, ErrExists)
		}
	}
	for name, ca := range map[string]CA{
		"no fingerprint":   {Name: "n", Line: "l"},
		"no name":          {Fingerprint: "SHA256:n", Line: "l"},
		"no line":          {Fingerprint: "SHA256:n", Name: "n"},
		"name too long":    {Fingerprint: "SHA256:n", Name: strings.Repeat("n", sshcert.MaxNameLen+1), Line: "l"},
		"fingerprint long": {Fingerprint: strings.Repeat("f", MaxFingerprintLen+1), Name: "n", Line: "l"},
	} {
		if _, err := s.AddCA(ctx, ca); err == nil {
			t.Errorf("%s: got nil, want an error", name)
		}
	}
	long := CA{Fingerprint: "SHA256:" + strings.Repeat("x", MaxFingerprintLen-7), Name: strings.Repeat("n", sshcert.MaxNameLen), Line: "l"}
	mustAddCA(t, s, long)

	got, err := s.CAs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Name != "hil" || got[0].Line != caOne.Line || got[0].Fingerprint != caOne.Fingerprint ||
		got[0].CreatedAt.IsZero() || got[1].Name != long.Name || got[2].Name != "other" {
		t.Errorf("list: got %+v, want hil (first line), %s, other", got, long.Name)
	}

	epoch, existed, err := s.DeleteCA(ctx, caOne.Fingerprint)
	latest, _ := s.LatestChange(ctx)
	if err != nil || !existed || epoch <= before || epoch != latest {
		t.Errorf("delete: got %d, %v, %v, want the latest epoch (%d), existed", epoch, existed, err, latest)
	}
	epoch, existed, err = s.DeleteCA(ctx, caOne.Fingerprint)
	if err != nil || existed || epoch != 0 {
		t.Errorf("delete again: got %d, %v, %v, want 0, false, nil", epoch, existed, err)
	}
	if now, _ := s.LatestChange(ctx); now != latest {
		t.Errorf("deleting an absent CA moved the latest change from %d to %d", latest, now)
	}
	if got, _ := s.CAs(ctx); len(got) != 2 {
		t.Errorf("list after delete: got %+v, want 2", got)
	}
	// A deleted CA may be trusted again.
	mustAddCA(t, s, caOne)
}

// testCAClashConcurrent: replicas adding CAs at once get one answer each:
// the same CA is created once, a name is given to one key.
func testCAClashConcurrent(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	const n = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		clashes int
	)
	for i := range n {
		wg.Add(2)
		go func() { // the same CA
			defer wg.Done()
			c, err := s.AddCA(ctx, caOne)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("add the same CA: %v", err)
			}
			if c {
				created++
			}
		}()
		go func() { // one name, many keys
			defer wg.Done()
			_, err := s.AddCA(ctx, CA{Fingerprint: "SHA256:k" + string(rune('a'+i)), Name: "shared", Line: "l"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrExists):
				clashes++
			case err != nil:
				t.Errorf("add a CA named shared: %v", err)
			}
		}()
	}
	wg.Wait()
	if created != 1 || clashes != n-1 {
		t.Errorf("got %d created and %d name clashes, want 1 and %d", created, clashes, n-1)
	}
}

func testRevocations(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	exp := time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC)
	longID := strings.Repeat("k", sshcert.MaxKeyIDLen)
	for _, r := range []Revocation{
		{Kind: CredSerial, CA: caOne.Fingerprint, Serial: 42, ExpiresAt: exp},
		{Kind: CredSerial, CA: "", Serial: math.MaxUint64, ExpiresAt: exp},
		{Kind: CredKeyID, CA: "", KeyID: "mallory"},
		{Kind: CredKeyID, CA: caTwo.Fingerprint, KeyID: longID, ExpiresAt: exp},
		{Kind: CredSerial, CA: caOne.Fingerprint, Serial: 0, ExpiresAt: exp},
	} {
		if _, err := s.Revoke(ctx, r); err != nil {
			t.Fatalf("revoke %+v: %v", r, err)
		}
	}
	tests := []struct {
		ca            string
		serial        uint64
		keyID         string
		serialR, keyR bool
	}{
		{caOne.Fingerprint, 42, "alice", true, false},
		{caTwo.Fingerprint, 42, "alice", false, false}, // serial 42 of another CA
		{caTwo.Fingerprint, math.MaxUint64, "alice", true, false},
		{caTwo.Fingerprint, 1, "mallory", false, true},
		{caOne.Fingerprint, 42, "mallory", true, true},
		{caTwo.Fingerprint, 1, longID, false, true},
		{caOne.Fingerprint, 1, longID, false, false}, // key id of another CA
		{caOne.Fingerprint, 0, "bob", true, false},
		{caOne.Fingerprint, 1, "Mallory", false, false}, // byte-exact
	}
	for _, tt := range tests {
		bySerial, byKeyID, err := s.IsRevoked(ctx, tt.ca, tt.serial, tt.keyID)
		if err != nil || bySerial != tt.serialR || byKeyID != tt.keyR {
			t.Errorf("is revoked %s %d %.10s: got %v, %v, %v, want %v, %v", tt.ca, tt.serial, tt.keyID,
				bySerial, byKeyID, err, tt.serialR, tt.keyR)
		}
	}
	// Revoked again: the later expiry stays, and never is the latest.
	for _, e := range []time.Time{exp.Add(time.Hour), exp, {}, exp.Add(2 * time.Hour)} {
		if _, err := s.Revoke(ctx, Revocation{Kind: CredSerial, CA: caOne.Fingerprint, Serial: 42, ExpiresAt: e}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Revoke(ctx, Revocation{Kind: CredSerial, CA: "", Serial: math.MaxUint64, ExpiresAt: exp.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	all, err := s.Revocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 {
		t.Fatalf("list: got %d revocations, want 5: %+v", len(all), all)
	}
	for _, r := range all {
		switch {
		case r.Kind == CredSerial && r.Serial == 42 && !r.ExpiresAt.IsZero():
			t.Errorf("serial 42 expires at %v after a revocation for good, want never", r.ExpiresAt)
		case r.Serial == math.MaxUint64 && !r.ExpiresAt.Equal(exp.Add(time.Hour)):
			t.Errorf("serial 2^64-1 expires at %v, want %v", r.ExpiresAt, exp.Add(time.Hour))
		case r.KeyID == longID && (r.CA != caTwo.Fingerprint || !r.ExpiresAt.Equal(exp) || r.CreatedAt.IsZero()):
			t.Errorf("long key id: got %+v", r)
		}
	}
}

func testRevocationsBadInput(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	before, _ := s.LatestChange(ctx)
	for name, r := range map[string]Revocation{
		"no kind":                 {Serial: 1},
		"unknown kind":            {Kind: "ca", CA: caOne.Fingerprint},
		"serial with key id":      {Kind: CredSerial, Serial: 1, KeyID: "a"},
		"key id with serial":      {Kind: CredKeyID, Serial: 1, KeyID: "a"},
		"empty key id":            {Kind: CredKeyID},
		"key id too long":         {Kind: CredKeyID, KeyID: strings.Repeat("k", sshcert.MaxKeyIDLen+1)},
		"key id not UTF-8":        {Kind: CredKeyID, KeyID: "\xff"},
		"CA fingerprint too long": {Kind: CredSerial, CA: strings.Repeat("f", MaxFingerprintLen+1)},
	} {
		if _, err := s.Revoke(ctx, r); err == nil {
			t.Errorf("%s: got nil, want an error", name)
		}
	}
	if all, _ := s.Revocations(ctx); len(all) != 0 {
		t.Errorf("revocations after bad input: got %+v, want none", all)
	}
	if after, _ := s.LatestChange(ctx); after != before {
		t.Errorf("bad input moved the latest change from %d to %d", before, after)
	}
}

func testPurgeRevocations(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	at := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)
	for i, e := range []time.Time{at.Add(-time.Hour), at.Add(-time.Millisecond), at, at.Add(time.Hour), {}} {
		if _, err := s.Revoke(ctx, Revocation{Kind: CredSerial, Serial: uint64(i), ExpiresAt: e}); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := s.LatestChange(ctx)
	n, err := s.PurgeRevocations(ctx, at)
	if err != nil || n != 2 {
		t.Errorf("purge: got %d, %v, want 2 purged", n, err)
	}
	var left []uint64
	all, _ := s.Revocations(ctx)
	for _, r := range all {
		left = append(left, r.Serial)
	}
	slices.Sort(left)
	if want := []uint64{2, 3, 4}; !slices.Equal(left, want) {
		t.Errorf("left after purge: got serials %v, want %v", left, want)
	}
	if after, _ := s.LatestChange(ctx); after != before {
		t.Errorf("purging moved the latest change from %d to %d", before, after)
	}
}

// testRevocationExpiryBounded: an expiry past MaxRevocationExpiry (or
// before 1970) is refused and stores nothing; rows an older obmd stored
// with one (year 10000, the largest BIGINT) list with the bound as their
// expiry, still refuse their certificates and are never purged.
func testRevocationExpiryBounded(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	last := MaxRevocationExpiry()
	if want := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC); !last.Equal(want) {
		t.Fatalf("MaxRevocationExpiry: got %v, want %v", last, want)
	}
	before, _ := s.LatestChange(ctx)
	for _, at := range []time.Time{last.Add(time.Second), time.Unix(1<<62, 0), time.Unix(-5, 0), time.Unix(0, 0)} {
		if _, err := s.Revoke(ctx, Revocation{Kind: CredSerial, Serial: 1, ExpiresAt: at}); err == nil {
			t.Errorf("revoke until unix %d: got nil, want an error", at.Unix())
		}
	}
	if after, _ := s.LatestChange(ctx); after != before {
		t.Errorf("refused revocations moved the latest change from %d to %d", before, after)
	}
	if _, err := s.Revoke(ctx, Revocation{Kind: CredSerial, Serial: 2, ExpiresAt: last}); err != nil {
		t.Errorf("revoke until %v: %v", last, err)
	}
	for i, ms := range []int64{toMillis(last) + 1, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), math.MaxInt64} {
		if _, err := s.w.ExecContext(ctx, `INSERT INTO cert_revocations (kind, ca, serial, key_id, expires_at, created_at)
			VALUES ('serial', '', ?, '', ?, 1)`, 10+i, ms); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.PurgeRevocations(ctx, time.Now()); err != nil || n != 0 {
		t.Errorf("purge: got %d, %v, want none purged", n, err)
	}
	all, err := s.Revocations(ctx)
	if err != nil || len(all) != 4 {
		t.Fatalf("list: got %+v, %v, want serial 2 and the three rows past the bound", all, err)
	}
	for _, r := range all {
		if !r.ExpiresAt.Equal(last) {
			t.Errorf("serial %d: lists expiry %v, want %v", r.Serial, r.ExpiresAt, last)
		}
		if b, _ := r.ExpiresAt.MarshalJSON(); len(b) == 0 {
			t.Errorf("serial %d: expiry %v cannot be written as JSON", r.Serial, r.ExpiresAt)
		}
		if bySerial, _, err := s.IsRevoked(ctx, "SHA256:x", r.Serial, "alice"); err != nil || !bySerial {
			t.Errorf("serial %d: revoked %v, %v; want revoked", r.Serial, bySerial, err)
		}
	}
}

// testDeleteRevocation: deleting a revocation names it as Revoke did (its
// kind, CA and serial or key id) and removes that one only; again, it
// reports there was none. The certificate is accepted again; nothing is
// recorded as a change of access (no session is cut by it). Bad input is
// refused and deletes nothing.
func testDeleteRevocation(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	kept := []Revocation{
		{Kind: CredSerial, CA: "", Serial: 42},                            // every CA's serial 42
		{Kind: CredSerial, CA: caTwo.Fingerprint, Serial: 42},             // another CA's
		{Kind: CredKeyID, CA: caOne.Fingerprint, KeyID: "alice"},          // alice of one CA
		{Kind: CredSerial, CA: caOne.Fingerprint, Serial: math.MaxUint64}, // the largest serial
	}
	gone := []Revocation{
		{Kind: CredSerial, CA: caOne.Fingerprint, Serial: 42, ExpiresAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Kind: CredKeyID, CA: "", KeyID: "alice"},
	}
	for _, r := range append(append([]Revocation{}, kept...), gone...) {
		if _, err := s.Revoke(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := s.LatestChange(ctx)
	for _, bad := range []Revocation{{Kind: "ca", CA: caOne.Fingerprint}, {Kind: CredKeyID}, {Kind: CredSerial, KeyID: "x"}} {
		if _, err := s.DeleteRevocation(ctx, bad); err == nil {
			t.Errorf("delete %+v: got nil, want an error", bad)
		}
	}
	for _, r := range gone {
		r.ExpiresAt = time.Time{} // named without it
		if existed, err := s.DeleteRevocation(ctx, r); err != nil || !existed {
			t.Errorf("delete %+v: got %v, %v, want deleted", r, existed, err)
		}
		if existed, err := s.DeleteRevocation(ctx, r); err != nil || existed {
			t.Errorf("delete %+v again: got %v, %v, want none", r, existed, err)
		}
	}
	if after, _ := s.LatestChange(ctx); after != before {
		t.Errorf("deleting revocations moved the latest change from %d to %d, want no change", before, after)
	}
	name := func(r Revocation) string { return fmt.Sprintf("%s %s %d %s", r.Kind, r.CA, r.Serial, r.KeyID) }
	var got, want []string
	all, _ := s.Revocations(ctx)
	for _, r := range all {
		got = append(got, name(r))
	}
	for _, r := range kept {
		want = append(want, name(r))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("left: got %q, want %q", got, want)
	}
	if bySerial, byKeyID, err := s.IsRevoked(ctx, caTwo.Fingerprint, 7, "alice"); err != nil || bySerial || byKeyID {
		t.Errorf("alice of CA two: got %v, %v, %v; want accepted again", bySerial, byKeyID, err)
	}
}

// testCredentialChanges: removals and revocations reach the change poll in
// order with node changes, and say which sessions they end; no node's
// epoch moves.
func testCredentialChanges(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n := mustCreate(t, s, "n1")
	mustAddCA(t, s, caOne)
	var want []Change
	e1, _, err := s.DeleteCA(ctx, caOne.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, Change{Epoch: e1, Reason: ReasonCARemoved, Cred: CredChange{Kind: CredCA, CA: caOne.Fingerprint}})
	e2, err := s.SetToken(ctx, "n1", keys.HashToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, Change{Epoch: e2, Node: "n1", Reason: ReasonTokenRotated})
	e3, err := s.Revoke(ctx, Revocation{Kind: CredSerial, CA: caTwo.Fingerprint, Serial: math.MaxUint64})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, Change{Epoch: e3, Reason: ReasonCertRevoked, Cred: CredChange{Kind: CredSerial, CA: caTwo.Fingerprint, Serial: math.MaxUint64}})
	e4, err := s.Revoke(ctx, Revocation{Kind: CredKeyID, KeyID: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, Change{Epoch: e4, Reason: ReasonCertRevoked, Cred: CredChange{Kind: CredKeyID, KeyID: "mallory"}})

	got, err := s.ChangesSince(ctx, n.Epoch, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes: got %+v, want %+v", got, want)
	}
	if epoch, _ := s.Epoch(ctx, "n1"); epoch != e2 {
		t.Errorf("node epoch: got %d, want %d (credential changes move none)", epoch, e2)
	}
}

func TestCredChangeAffects(t *testing.T) {
	const a, b = "SHA256:a", "SHA256:b"
	tests := []struct {
		c      CredChange
		ca     string
		serial uint64
		keyID  string
		want   bool
	}{
		{CredChange{Kind: CredCA, CA: a}, a, 1, "x", true},
		{CredChange{Kind: CredCA, CA: a}, b, 1, "x", false},
		{CredChange{Kind: CredSerial, CA: a, Serial: 1}, a, 1, "x", true},
		{CredChange{Kind: CredSerial, CA: a, Serial: 1}, b, 1, "x", false},
		{CredChange{Kind: CredSerial, CA: a, Serial: 1}, a, 2, "x", false},
		{CredChange{Kind: CredSerial, Serial: 1}, b, 1, "x", true},
		{CredChange{Kind: CredKeyID, CA: a, KeyID: "x"}, a, 9, "x", true},
		{CredChange{Kind: CredKeyID, CA: a, KeyID: "x"}, a, 9, "X", false},
		{CredChange{Kind: CredKeyID, CA: a, KeyID: "x"}, b, 9, "x", false},
		{CredChange{Kind: CredKeyID, KeyID: "x"}, b, 9, "x", true},
		{CredChange{Kind: "from a newer version"}, b, 9, "x", true},
		{CredChange{}, b, 9, "x", true},
	}
	for _, tt := range tests {
		if got := tt.c.Affects(tt.ca, tt.serial, tt.keyID); got != tt.want {
			t.Errorf("%+v affects %s %d %s: got %v, want %v", tt.c, tt.ca, tt.serial, tt.keyID, got, tt.want)
		}
	}
}

func testPrincipals(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n := mustCreate(t, s, "n1")
	mustCreate(t, s, "n2")
	set := func(ps ...string) int64 {
		t.Helper()
		epoch, err := s.SetNodePrincipals(ctx, "n1", ps)
		if err != nil {
			t.Fatalf("set %v: %v", ps, err)
		}
		got, err := s.NodePrincipals(ctx, "n1")
		want := slices.Clone(ps)
		slices.Sort(want)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("principals after set %v: got %v, %v, want %v", ps, got, err, want)
		}
		return epoch
	}
	long := strings.Repeat("p", sshcert.MaxPrincipalLen)
	if e := set("project-x", "b", long); e != 0 {
		t.Errorf("adding principals: got epoch %d, want 0 (a grant)", e)
	}
	if e := set("project-x", "b", long, "c"); e != 0 {
		t.Errorf("adding one more: got epoch %d, want 0", e)
	}
	e := set("c", "project-x")
	if epoch, _ := s.Epoch(ctx, "n1"); e <= n.Epoch || epoch != e {
		t.Errorf("removing principals: got epoch %d (node at %d), want a new epoch above %d", e, epoch, n.Epoch)
	}
	if e2 := set(); e2 <= e {
		t.Errorf("removing all: got epoch %d, want above %d", e2, e)
	}
	if got, err := s.NodePrincipals(ctx, "n2"); err != nil || len(got) != 0 || got == nil {
		t.Errorf("principals of n2: got %#v, %v, want an empty list", got, err)
	}
	before, _ := s.LatestChange(ctx)
	for name, ps := range map[string][]string{
		"empty":     {""},
		"comma":     {"a,b"},
		"space":     {"a b"},
		"twice":     {"a", "a"},
		"too long":  {long + "p"},
		"too many":  slices.Repeat([]string{"p"}, MaxNodePrincipals+1),
		"not UTF-8": {"\xff"},
	} {
		if _, err := s.SetNodePrincipals(ctx, "n2", ps); err == nil {
			t.Errorf("%s: got nil, want an error", name)
		}
	}
	if _, err := s.SetNodePrincipals(ctx, "nope", []string{"a"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("set on unknown node: got %v, want %v", err, ErrNotFound)
	}
	if _, err := s.NodePrincipals(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("list of unknown node: got %v, want %v", err, ErrNotFound)
	}
	if after, _ := s.LatestChange(ctx); after != before {
		t.Errorf("refused sets moved the latest change from %d to %d", before, after)
	}
	// They go with their node.
	set("x")
	if _, err := s.DeleteNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "n1")
	if got, _ := s.NodePrincipals(ctx, "n1"); len(got) != 0 {
		t.Errorf("principals of a node created again: got %v, want none", got)
	}
}
