package db

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/obmd/obmd/keys"
)

// WebTicket is a one-time ticket of the web console, as redeemed: the node
// it opens and the node's access epoch when it was minted (a ticket is
// good only while that epoch is the node's).
type WebTicket struct {
	Node  string
	Epoch int64
}

// CreateWebTicket stores the hash of a one-time ticket for label, valid
// for ttl on the database's clock (replicas compare it there), at the
// node's current access epoch, which it returns with the ticket's expiry
// (on the store's clock). Expired tickets of every node are purged on the
// way, so the table holds no more than a ttl's worth of minting.
// ErrNotFound for an unknown node.
func (s *Store) CreateWebTicket(ctx context.Context, label string, h keys.TokenHash, ttl time.Duration) (epoch int64, expires time.Time, err error) {
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT access_epoch FROM nodes WHERE label = ?`, label).Scan(&epoch); err != nil {
			return notFound(err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM web_tickets WHERE expires_at <= `+s.dbNow()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO web_tickets (hash, node, epoch, expires_at) VALUES (?, ?, ?, `+s.dbNow()+` + ?)`,
			h.String(), label, epoch, millis(ttl))
		return err
	})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("create a web ticket for %s: %w", label, err)
	}
	return epoch, s.durationBase().Add(ttl), nil
}

// RedeemWebTicket uses up the ticket whose hash is h and returns what it
// opens. A ticket is redeemed once: of two replicas redeeming it at once,
// one gets it and the other ErrNotFound, as for a ticket that never
// existed, was used, or has expired (an expired one is deleted too).
func (s *Store) RedeemWebTicket(ctx context.Context, h keys.TokenHash) (WebTicket, error) {
	var t WebTicket
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var left int64
		err := tx.QueryRowContext(ctx, `SELECT node, epoch, expires_at - `+s.dbNow()+` FROM web_tickets WHERE hash = ?`,
			h.String()).Scan(&t.Node, &t.Epoch, &left)
		if err != nil {
			return notFound(err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM web_tickets WHERE hash = ?`, h.String())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 || left <= 0 { // redeemed by another replica meanwhile, or expired
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return WebTicket{}, fmt.Errorf("redeem a web ticket: %w", err)
	}
	return t, nil
}
