package webdoor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/obmd/obmd/keys"
)

// MaxTicketTTL bounds a ticket's life (and is its default).
const MaxTicketTTL = time.Minute

// TicketStore keeps minted tickets (db.Store.CreateWebTicket): only their
// hash, with the node's epoch, so that any replica redeems a ticket once
// and none after an access change.
type TicketStore interface {
	CreateWebTicket(ctx context.Context, label string, h keys.TokenHash, ttl time.Duration) (int64, time.Time, error)
}

// Tickets mints one-time tickets for dashboards (the admin API's POST
// /v1/nodes/{label}/web-tickets).
type Tickets struct {
	store TicketStore
	base  *url.URL
	ttl   time.Duration
}

// NewTickets returns a minter whose links start with base (the door's
// public URL), valid for ttl (default and at most MaxTicketTTL).
func NewTickets(store TicketStore, base string, ttl time.Duration) (*Tickets, error) {
	u, err := ParsePublicURL(base)
	if err != nil {
		return nil, err
	}
	if ttl < 0 || ttl > MaxTicketTTL {
		return nil, fmt.Errorf("web.ticket_ttl must be from 1s to %v", MaxTicketTTL)
	}
	if ttl == 0 {
		ttl = MaxTicketTTL
	}
	if store == nil {
		return nil, errors.New("webdoor: no ticket store")
	}
	return &Tickets{store: store, base: u, ttl: ttl}, nil
}

// Mint creates a ticket for label and returns it with the page's address
// carrying it in the fragment, which a browser never sends to a server,
// and its expiry (db.ErrNotFound, wrapped, for an unknown node).
func (t *Tickets) Mint(ctx context.Context, label string) (ticket, link string, expires time.Time, err error) {
	if ticket, err = keys.NewToken(); err != nil {
		return "", "", time.Time{}, err
	}
	if _, expires, err = t.store.CreateWebTicket(ctx, label, keys.HashToken(ticket), t.ttl); err != nil {
		return "", "", time.Time{}, err
	}
	u := *t.base
	u.Path = "/nodes/" + label
	u.Fragment = "ticket=" + ticket
	return ticket, u.String(), expires, nil
}
