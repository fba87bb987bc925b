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
	// (zero: never). FailedRetry is the retry whose failure this records
	// (0: the first delivery).
	Retries     int       `json:"retries,omitempty"`
	RetriedAt   time.Time `json:"retried_at,omitzero"`
	FailedRetry int       `json:"failed_retry,omitempty"`
}

// Pending reports whether a retry of d is queued and has not failed yet.
func (d DeadLetter) Pending() bool { return d.Retries > d.FailedRetry }

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

// record records the failure d, replacing the dead letter of the same
// notification but keeping its count of retries, which only grows.
func (s *DeadLetters) record(ctx context.Context, d DeadLetter) error {
	d.Notification.SentParts = 0 // the receipt holds what was sent
	d.Retries = d.FailedRetry
	_, _, err := bus.Update(ctx, s.bus.DeadLetters, deadLetterKey(d.Notification.ID), func(cur *DeadLetter, found bool) (bool, error) {
		next := d
		if found {
			next.Retries, next.RetriedAt = max(cur.Retries, d.FailedRetry), cur.RetriedAt
		}
		*cur = next
		return true, nil
	})
	var corrupt *bus.CorruptError
	if errors.As(err, &corrupt) {
		raw, _ := json.Marshal(d) // strings, times and ints
		_, err = s.bus.DeadLetters.Put(ctx, deadLetterKey(d.Notification.ID), raw)
	}
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
	keys, err := s.bus.Keys(ctx, s.bus.DeadLetters, ">")
	if err != nil {
		return nil, fmt.Errorf("connectors: list failed deliveries: %w", err)
	}
	var out []DeadLetter
	for _, key := range keys {
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
	keys, err := s.bus.Keys(ctx, s.bus.DeadLetters, ">")
	if err != nil {
		return 0, err
	}
	return len(keys), nil
}

// Retry queues the failed notification id for its target again, with the
// same notification id (the platform's idempotency key, the webhook-id),
// resuming after the parts of a split text that were delivered. It returns
// the dead letter as updated. A retry that is still queued is not queued
// twice unless force is set: Retry then returns the dead letter unchanged
// with ErrRetryPending. (A forced retry of one that is in fact delivered is
// not sent again: its send claim says it was sent.) Once delivered the dead
// letter is removed; if it fails again, it is replaced with the new
// failure. A connector the running server does not have is refused.
func (s *DeadLetters) Retry(ctx context.Context, id string, force bool) (DeadLetter, error) {
	key := deadLetterKey(id)
	d, rev, err := s.get(ctx, key)
	if err != nil {
		return DeadLetter{}, err
	}
	if d.Pending() && !force {
		return d, ErrRetryPending
	}
	if _, err := s.bus.JetStream().Consumer(ctx, bus.StreamDeliveries, ConsumerName(d.Connector)); errors.Is(err, jetstream.ErrConsumerNotFound) {
		return d, fmt.Errorf("connector %s does not run in the server (it has no consumer %s): add it back to agentwork.yaml and restart agentwork serve, then retry", d.Connector, ConsumerName(d.Connector))
	} else if err != nil {
		return d, fmt.Errorf("connectors: look up connector %s: %w", d.Connector, err)
	}
	// Queue first, then mark: a retry that could not be queued is not
	// left marked as queued. Two retries at once pick the same number,
	// and the stream stores one of them.
	next := d.Retries + 1
	n := d.Notification
	n.Retry = next
	if d.Receipt != nil {
		n.SentParts = d.Receipt.Parts
	}
	if err := enqueue(ctx, s.bus, n, n.ID+".retry."+strconv.Itoa(next)); err != nil {
		return d, fmt.Errorf("connectors: queue the retry: %w", err)
	}
	now := s.now()
	for range 5 {
		if d.Retries < next {
			d.Retries = next
		}
		if d.Retries == next && d.RetriedAt.Before(now) {
			// Also when the retry's failure was recorded first (it
			// carries the retry count, not when it was asked for).
			d.RetriedAt = now
		}
		raw, _ := json.Marshal(d) // strings, times and ints
		if _, err = s.bus.DeadLetters.Update(ctx, key, raw, rev); !bus.IsConflict(err) {
			break
		}
		// A new failure or another retry came first: mark on top of it.
		if d, rev, err = s.get(ctx, key); err != nil {
			break
		}
	}
	if errors.Is(err, ErrNoDeadLetter) {
		return d, nil // delivered already
	}
	if err != nil {
		return d, fmt.Errorf("connectors: the retry is queued, but marking it failed: %w", err)
	}
	return d, nil
}

// ErrRetryPending is returned by Retry for a notification whose last retry
// is still queued.
var ErrRetryPending = errors.New("a retry of this notification is queued already; wait for its outcome (agentwork events tail)")
