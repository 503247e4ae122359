package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/obmd/obmd/keys/sshcert"
)

// purgeMargin is kept beyond a revoked certificate's expiry and the skew
// before its revocation is deleted: clocks of replicas differ a little.
// (A certificate is refused from its expiry on; the skew and the margin
// only keep the row longer than needed, never shorter.)
const purgeMargin = time.Minute

// certPolicy is the policy certificate logins are judged by (the certs
// section).
func (d *Daemon) certPolicy() (*sshcert.Policy, error) {
	p, err := sshcert.New(sshcert.Config{Skew: d.cfg.Certs.Skew, LegacyAlgorithms: d.cfg.Certs.LegacyAlgorithms})
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return p, nil
}

// purgeRevocations deletes, every certs.purge_interval until ctx ends, the
// revocations of certificates that have expired anyway (their expiry, the
// skew and purgeMargin past): such a certificate is refused as expired.
// Every replica runs it; a delete that finds nothing is cheap.
func (d *Daemon) purgeRevocations(ctx context.Context, skew time.Duration) error {
	t := time.NewTicker(d.cfg.Certs.PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := d.store.PurgeRevocations(ctx, time.Now().Add(-skew-purgeMargin))
		switch {
		case err != nil && ctx.Err() == nil:
			d.log.WithError(err).Warn("revocations_purge_failed")
		case n > 0:
			d.log.WithField("purged", n).Info("revocations_purged")
		}
	}
}
