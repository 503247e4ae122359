package access

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
)

// Credential changes: a CA no longer trusted, a certificate serial or key
// id revoked. They are no single node's: they move no node's epoch (its
// tenancy goes on, and its console is not wiped), but they end the
// certificate sessions they name (db.CredChange.Affects), on every
// replica. Epochs still order them with every other change: a session
// remembers the latest epoch its login read (sessions.Cert.Seen), and a
// credential change ends it only if it is newer than that read. So
// applying one is idempotent, needs no per-node state, and a session that
// logged in after it (having read the database with the change in it, and
// been refused if it named the certificate) is never cut by it.
//
// What a session start must do for this to hold (bastion does it): the
// session is registered first (Open), then the login's read is made again
// and the certificate checked again; a change committed before that read
// is in it, and one committed after finds the session registered.

// CredChange is one credential change made through this replica
// (Revoker.ChangeCred).
type CredChange struct {
	// Cred is what it ends.
	Cred db.CredChange
	// Why is shown to the users whose sessions it ends ("certificate
	// revoked").
	Why string
	// Do makes the change in the database and returns its epoch (0: it
	// changed nothing, e.g. a CA that was not trusted).
	Do func(ctx context.Context) (int64, error)
}

// RevokeCred applies credential change c of epoch on this replica: every
// certificate session that c Affects and whose login read the database
// before it (Seen < epoch) is cut with why, and the connections that
// logged in so are told (sessions.Registry.Watch: the front door closes
// them); RevokeCred returns once the sessions have ended (or the
// registry's bound passed, which is logged). It is
// what the change watcher and the peer notices call for a change made
// elsewhere, and ChangeCred for one made here; applying a change twice
// cuts nothing the second time.
func (r *Revoker) RevokeCred(epoch int64, c db.CredChange, why string) int {
	return r.cutCred(c, why, func(s sessions.Cert) bool { return s.Seen < epoch }, logrus.Fields{"epoch": epoch})
}

// ApplyCred applies a credential change another replica made and
// announced (a peer notice), as RevokeCred does.
func (r *Revoker) ApplyCred(epoch int64, c db.CredChange, why string) { r.RevokeCred(epoch, c, why) }

// cutCred cuts the certificate sessions c affects that also pass when.
func (r *Revoker) cutCred(c db.CredChange, why string, when func(sessions.Cert) bool, f logrus.Fields) int {
	r.cutting()
	cut, late := r.reg.CutCerts(func(s sessions.Cert) bool {
		return when(s) && c.Affects(s.CA, s.Serial, s.KeyID)
	}, func(node string) error { return &sessions.RevokedError{Node: node, Why: why} })
	total := 0
	for _, n := range cut {
		total += n
	}
	log := r.log.WithFields(f).WithFields(logrus.Fields{"kind": c.Kind, "ca": c.CA, "serial": c.Serial,
		"key_id": safe(c.KeyID), "why": why, "cut": total})
	switch {
	case late > 0:
		log.WithField("late", late).Warn("sessions_slow_to_end")
	case total > 0:
		log.Info("credential_revoked")
	default:
		log.Debug("credential_revoked")
	}
	return total
}

// ChangeCred makes credential change c through this replica: c.Do stores
// it; the sessions it ends here are cut (RevokeCred) and the other
// replicas are told and waited for (Peers.NotifyCred). It returns nil only
// once all of that is done, all of it within ChangeTimeout. c.Do's own
// error is returned as it is, with nothing cut.
//
// When the database does not answer within the bound, the change may
// still commit later: ChangeCred fails closed, as Change does. It cuts at
// once every session here that c affects (whenever it logged in), and
// until c.Do has returned, sessions with such a certificate are refused
// at their start (Open); once it has, a change that was stored is applied
// here and told to the others (and, being in the database, reaches every
// replica's change watcher anyway). The error then wraps
// ErrOutcomeUnknown. Retrying is safe: removing a CA that is gone changes
// nothing, revoking again keeps the later expiry.
func (r *Revoker) ChangeCred(ctx context.Context, c CredChange) error {
	bound := r.cfg.ChangeTimeout
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	res := make(chan changeResult, 1)
	r.wg.Add(1)
	go func() { // owned by r.wg; ends when the database call does, perhaps long after ctx
		defer r.wg.Done()
		epoch, err := c.Do(ctx)
		res <- changeResult{epoch: epoch, err: err}
	}()
	select {
	case out := <-res:
		switch {
		case out.err == nil && out.epoch == 0:
			return nil
		case out.err == nil:
			r.RevokeCred(out.epoch, c.Cred, c.Why)
			return r.confirmCred(ctx, out.epoch, c)
		case ctx.Err() == nil:
			return out.err
		}
		res <- out // cut off by its bound: the outcome is unknown
	case <-ctx.Done():
	}
	r.failClosedCred(c, res)
	return fmt.Errorf("%w: the database did not confirm the change within %v; the sessions it ends were cut here, "+
		"and such logins are refused until the database answers (a change that was stored after all then takes effect "+
		"everywhere); retrying is safe", ErrOutcomeUnknown, bound)
}

// confirmCred passes a credential change stored and applied here to the
// other replicas, within ctx.
func (r *Revoker) confirmCred(ctx context.Context, epoch int64, c CredChange) error {
	if r.cfg.Peers == nil {
		return nil
	}
	if err := r.cfg.Peers.NotifyCred(ctx, epoch, c.Cred, c.Why); err != nil {
		return fmt.Errorf("%w: the change was stored and applied here, but not confirmed within %v "+
			"(each replica applies it at its next poll of the database): %w", ErrNotConfirmed, r.cfg.ChangeTimeout, err)
	}
	return nil
}

// failClosedCred marks c pending, cuts every session here it affects, and
// starts waiting for c.Do's outcome.
func (r *Revoker) failClosedCred(c CredChange, res <-chan changeResult) {
	pending := &c.Cred
	r.mu.Lock()
	r.creds = append(r.creds, pending)
	r.mu.Unlock()
	r.cutCred(c.Cred, c.Why, func(sessions.Cert) bool { return true }, logrus.Fields{"epoch": int64(math.MaxInt64)})
	r.log.WithFields(logrus.Fields{"kind": c.Cred.Kind, "ca": c.Cred.CA, "timeout": r.cfg.ChangeTimeout}).
		Error("credential_change_unconfirmed")
	r.wg.Add(1)
	go func() { // owned by r.wg; ends once c.Do has returned, or at Close
		defer r.wg.Done()
		var out changeResult
		select {
		case out = <-res:
		case <-r.stop:
			return // stopping: such logins stay refused
		}
		if out.err == nil && out.epoch > 0 {
			r.RevokeCred(out.epoch, c.Cred, c.Why)
			ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ChangeTimeout)
			if err := r.confirmCred(ctx, out.epoch, c); err != nil {
				r.log.WithError(err).Warn("credential_change_settled_unconfirmed")
			}
			cancel()
		}
		// A call that failed may have committed all the same: then the
		// change is in the database, and the change watcher applies it.
		r.mu.Lock()
		r.creds = slices.DeleteFunc(r.creds, func(p *db.CredChange) bool { return p == pending })
		r.mu.Unlock()
		r.log.WithError(out.err).WithFields(logrus.Fields{"kind": c.Cred.Kind, "epoch": out.epoch}).
			Warn("credential_change_settled")
	}()
}

// errCredPending refuses a certificate session while a credential change
// that names its certificate has an unknown outcome.
var errCredPending = errors.New("a change of certificate trust that names this certificate is not confirmed yet")

// certSettled refuses a certificate session (c; nil: none) that a pending
// credential change names.
func (r *Revoker) certSettled(c *sessions.Cert) error {
	if c == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.creds {
		if p.Affects(c.CA, c.Serial, c.KeyID) {
			return errCredPending
		}
	}
	return nil
}
