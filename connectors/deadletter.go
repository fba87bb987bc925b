package connectors

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
)

// DeadLetter is a notification a connector failed to deliver for good:
// after its last attempt, or at once for a permanent error. It waits in
// agentwork_deadletters (for bus.DeadLettersTTL) until a user sends it
// again (DeadLetters.Retry), which removes it once delivered.
type DeadLetter struct {
	Notification Notification `json:"notification"`
	Connector    string       `json:"connector"`
	// Attempts, Error and Permanent describe the last failure.
	Attempts  int    `json:"attempts"`
	Error     string `json:"error"`
	Permanent bool   `json:"permanent,omitempty"`
	// Receipt holds the parts of a split text the platform took before the
	// failure; a retry sends the rest.
	Receipt  *Receipt  `json:"receipt,omitempty"`
	FailedAt time.Time `json:"failed_at"`
	// Retries counts the times a user sent it again; RetriedAt is the last
	// (zero: never). While a retry is queued RetriedAt is after FailedAt.
	Retries   int       `json:"retries,omitempty"`
	RetriedAt time.Time `json:"retried_at,omitzero"`
}

// Pending reports whether a retry of d is queued and has not failed yet.
func (d DeadLetter) Pending() bool { return d.RetriedAt.After(d.FailedAt) }

// ErrNoDeadLetter is returned for a notification id with no dead letter:
// never failed, delivered on a retry, or expired.
var ErrNoDeadLetter = errors.New("no failed delivery with that notification id (delivered since, expired, or a typo: list them with agentwork deliveries list)")

// DeadLetters lists, shows and re-sends failed deliveries. Safe for
// concurrent use by any number of processes.
type DeadLetters struct {
	bus *bus.Bus
	now func() time.Time
}

// NewDeadLetters returns the dead letters of b.
func NewDeadLetters(b *bus.Bus) *DeadLetters { return &DeadLetters{bus: b, now: time.Now} }

// deadLetterKey is the agentwork_deadletters key of notification id.
func deadLetterKey(id string) string {
	key, _ := claimKey("dead.", id)
	return key
}

// put records d, replacing a dead letter of the same notification.
func (s *DeadLetters) put(ctx context.Context, d DeadLetter) error {
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	_, err = s.bus.DeadLetters.Put(ctx, deadLetterKey(d.Notification.ID), raw)
	return err
}

// remove deletes the dead letter of notification id, delivered on retry.
func (s *DeadLetters) remove(ctx context.Context, id string) error {
	err := s.bus.DeadLetters.Delete(ctx, deadLetterKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}

// Get returns the dead letter of notification id, or ErrNoDeadLetter.
func (s *DeadLetters) Get(ctx context.Context, id string) (DeadLetter, error) {
	d, _, err := s.get(ctx, deadLetterKey(id))
	return d, err
}

func (s *DeadLetters) get(ctx context.Context, key string) (DeadLetter, uint64, error) {
	e, err := s.bus.DeadLetters.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return DeadLetter{}, 0, ErrNoDeadLetter
	}
	if err != nil {
		return DeadLetter{}, 0, fmt.Errorf("connectors: read failed delivery: %w", err)
	}
	var d DeadLetter
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		return DeadLetter{}, 0, fmt.Errorf("connectors: failed delivery %s is unreadable: %w", key, err)
	}
	return d, e.Revision(), nil
}

// List returns the dead letters, newest failure first; of connector name
// only, when name is not empty.
func (s *DeadLetters) List(ctx context.Context, name string) ([]DeadLetter, error) {
	keys, err := s.bus.DeadLetters.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("connectors: list failed deliveries: %w", err)
	}
	var out []DeadLetter
	for key := range keys.Keys() {
		d, _, err := s.get(ctx, key)
		if errors.Is(err, ErrNoDeadLetter) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		if name == "" || d.Connector == name {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b DeadLetter) int {
		return cmp.Or(b.FailedAt.Compare(a.FailedAt), cmp.Compare(a.Notification.ID, b.Notification.ID))
	})
	return out, nil
}

// Count returns how many dead letters there are.
func (s *DeadLetters) Count(ctx context.Context) (int, error) {
	keys, err := s.bus.DeadLetters.ListKeys(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	return n, nil
}

// Retry queues the failed notification id for its target again, with the
// same notification id (the platform's idempotency key, the webhook-id),
// resuming after the parts of a split text that were delivered. It returns
// the dead letter as updated. A retry that is still queued is not queued
// twice: Retry then returns the dead letter unchanged with ErrRetryPending.
// Once delivered the dead letter is removed; if it fails again, it is
// replaced with the new failure.
func (s *DeadLetters) Retry(ctx context.Context, id string) (DeadLetter, error) {
	key := deadLetterKey(id)
	for {
		d, rev, err := s.get(ctx, key)
		if err != nil {
			return DeadLetter{}, err
		}
		if d.Pending() {
			return d, ErrRetryPending
		}
		d.Retries++
		d.RetriedAt = s.now()
		raw, _ := json.Marshal(d) // strings, times and ints
		if _, err := s.bus.DeadLetters.Update(ctx, key, raw, rev); err != nil {
			if bus.IsConflict(err) {
				continue // another retry or a new failure came first: look again
			}
			return DeadLetter{}, fmt.Errorf("connectors: mark the retry: %w", err)
		}
		n := d.Notification
		n.Retry = d.Retries
		if d.Receipt != nil {
			n.SentParts = d.Receipt.Parts
		}
		if err := enqueue(ctx, s.bus, n, n.ID+".retry."+strconv.Itoa(d.Retries)); err != nil {
			return DeadLetter{}, err
		}
		return d, nil
	}
}

// ErrRetryPending is returned by Retry for a notification whose last retry
// is still queued.
var ErrRetryPending = errors.New("a retry of this notification is queued already; wait for its outcome (agentwork events tail)")
