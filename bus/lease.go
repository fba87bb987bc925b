package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maxConflicts bounds the compare-and-set attempts of one Update: a key
// that other writers change that often is reported, not fought over.
const maxConflicts = 20

// IsConflict reports whether err is a lost compare-and-set on a KV key: a
// create of a key that exists, or an update or delete at a revision that
// is no longer the key's latest. Replicated (R>1) buckets report it with
// another error code; both count.
func IsConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// CorruptError is returned when a stored value is not the JSON of the type
// it is read into. Revision lets a caller that knows better write over it
// (UpdateAt at that revision).
type CorruptError struct {
	Key      string
	Revision uint64
	Err      error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("bus: %s (revision %d) is not valid JSON: %v", e.Key, e.Revision, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Update is a read-modify-write of the JSON value at key with
// compare-and-set. It reads the value and calls fn with it (the zero T and
// found false when the key is absent); fn changes it and reports whether to
// write. The write is a create when the key was absent, else an update at
// the revision read; when another writer came in between, Update reads
// again and calls fn again, so fn may run several times and must decide
// from what it is given. An error from fn ends Update with that error.
//
// Update returns the value as written (or, when fn declined, as fn left
// it) and its revision (0: the key is absent). A value that does not
// decode is a *CorruptError; fn is not called. After 20 conflicts in a row
// it gives up with an error for which IsConflict is true.
func Update[T any](ctx context.Context, kv jetstream.KeyValue, key string, fn func(v *T, found bool) (write bool, err error)) (T, uint64, error) {
	return update(ctx, kv, key, nil, 0, fn, nil)
}

// UpdateAt is Update for a caller that already knows what to write: it
// writes v at revision rev (0: creates the key) without reading first, and
// only when that conflicts goes on as Update does, reading the key and
// calling fn. A claim that is usually new (rev 0), or a record this
// instance wrote last, costs one round trip.
func UpdateAt[T any](ctx context.Context, kv jetstream.KeyValue, key string, v T, rev uint64, fn func(v *T, found bool) (write bool, err error)) (T, uint64, error) {
	return update(ctx, kv, key, &v, rev, fn, nil)
}

// UpdateAtExpiring is UpdateAt whose write makes the key expire ttl after
// it (the bucket must allow per-key TTLs, as agentwork_locks does). A later
// write without a TTL keeps the key for the bucket's TTL again.
func UpdateAtExpiring[T any](ctx context.Context, b *Bus, kv jetstream.KeyValue, key string, v T, rev uint64, ttl time.Duration, fn func(v *T, found bool) (write bool, err error)) (T, uint64, error) {
	return update(ctx, kv, key, &v, rev, fn, func(ctx context.Context, data []byte, rev uint64) (uint64, error) {
		if rev == 0 {
			return kv.Create(ctx, key, data, jetstream.KeyTTL(ttl)) // also over a delete marker
		}
		return b.putExpiring(ctx, kv, key, data, ttl, jetstream.WithExpectLastSequencePerSubject(rev))
	})
}

// PutExpiring writes data at key of kv, whatever is there, and makes the
// key expire ttl after the write. It returns the revision written.
func (b *Bus) PutExpiring(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, ttl time.Duration) (uint64, error) {
	return b.putExpiring(ctx, kv, key, data, ttl)
}

func (b *Bus) putExpiring(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, ttl time.Duration, opts ...jetstream.PublishOpt) (uint64, error) {
	// A KV write is a publish on $KV.<bucket>.<key>; nats.go's Update and
	// Put take no TTL, so this publishes what they would, with Nats-TTL.
	ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + kv.Bucket() + "." + key, Data: data}, append(opts, jetstream.WithMsgTTL(ttl))...)
	if err != nil {
		return 0, err // a lost compare-and-set is IsConflict
	}
	return ack.Sequence, nil
}

// write stores data at key at revision rev (0: creates it); nil: kv.Create
// or kv.Update.
type write func(ctx context.Context, data []byte, rev uint64) (uint64, error)

func update[T any](ctx context.Context, kv jetstream.KeyValue, key string, next *T, rev uint64, fn func(*T, bool) (bool, error), put write) (T, uint64, error) {
	var last error
	for range maxConflicts {
		if next == nil {
			cur, r, found, err := read[T](ctx, kv, key)
			if err != nil {
				return cur, r, err
			}
			write, err := fn(&cur, found)
			if err != nil || !write {
				return cur, r, err
			}
			next, rev = &cur, r
		}
		data, err := json.Marshal(next)
		if err != nil {
			return *next, rev, fmt.Errorf("bus: encode %s: %w", key, err)
		}
		var written uint64
		switch {
		case put != nil:
			written, err = put(ctx, data, rev)
		case rev == 0:
			written, err = kv.Create(ctx, key, data)
		default:
			written, err = kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return *next, written, nil
		}
		if !IsConflict(err) {
			return *next, rev, fmt.Errorf("bus: write %s: %w", key, err)
		}
		last, next = err, nil
	}
	var zero T
	return zero, 0, fmt.Errorf("bus: %s changed under %d writes in a row: %w", key, maxConflicts, last)
}

// read returns the decoded value at key, its revision, and whether the key
// exists.
func read[T any](ctx context.Context, kv jetstream.KeyValue, key string) (T, uint64, bool, error) {
	var v T
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return v, 0, false, nil
	}
	if err != nil {
		return v, 0, false, fmt.Errorf("bus: read %s: %w", key, err)
	}
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		var zero T
		return zero, e.Revision(), true, &CorruptError{Key: key, Revision: e.Revision(), Err: err}
	}
	return v, e.Revision(), true, nil
}

// releaseMarkerTTL is how long the marker of a removed key stays.
const releaseMarkerTTL = time.Second

// removeAt removes key of kv at revision rev, leaving a marker that
// expires after releaseMarkerTTL.
func removeAt(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64) error {
	return kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(releaseMarkerTTL))
}

// ReleaseValue removes key of kv if it still holds value (a dedup key
// its holder gives back), at the revision read; the marker expires as
// Release's does. Not found, another value, or a change meanwhile: it
// leaves the key alone. Errors are the caller's to ignore or log.
func ReleaseValue(ctx context.Context, kv jetstream.KeyValue, key, value string) error {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if string(e.Value()) != value {
		return nil
	}
	if err := removeAt(ctx, kv, key, e.Revision()); err != nil && !IsConflict(err) {
		return err
	}
	return nil
}

// Lease says who holds a KV record and until when. Records that are
// leases (run claims, send claims, tick claims, overlap leases) embed it;
// its fields are part of the record's JSON.
//
// A lease is held while it has not expired, except that on the embedded
// server a lease taken by an earlier process on the same data dir is free
// at once: that process is gone (the data-dir lock proves it), so nothing
// renews it. On an external cluster the expiry alone decides.
type Lease struct {
	// Owner is the Instance of the bus that took it.
	Owner string `json:"owner,omitempty"`
	// Token is unique per take: it tells this take from any other, even
	// another by the same instance.
	Token string `json:"token,omitempty"`
	// Boot is the boot id of the embedded server process the taker ran in
	// (empty on an external cluster).
	Boot string `json:"boot,omitempty"`
	// Expires is when the lease lapses unless renewed (zero: not held).
	Expires time.Time `json:"expires,omitzero"`
}

func (l *Lease) lease() *Lease { return l }

// NewLease returns a lease of this bus's instance until expires, under a
// fresh token.
func (b *Bus) NewLease(expires time.Time) Lease {
	l := Lease{Owner: b.instance, Token: NewID(), Expires: expires.UTC()}
	if b.exclusive {
		l.Boot = b.boot
	}
	return l
}

// Held reports whether l has a live holder at now: it has not expired and,
// on the embedded server, was taken by this process (a Client of it
// included), not by an earlier one on the same data dir.
func (b *Bus) Held(l Lease, now time.Time) bool {
	if !now.Before(l.Expires) {
		return false
	}
	return !b.exclusive || l.Boot == "" || l.Boot == b.boot
}

// HeldError is returned when a lease is someone else's: Acquire found a
// live holder, or Renew or Release found the record taken over (Holder is
// then the new holder, zero when the record is gone).
type HeldError struct {
	Key    string
	Holder Lease
}

func (e *HeldError) Error() string {
	if e.Holder.Token == "" && e.Holder.Owner == "" {
		return fmt.Sprintf("bus: lease %s is no longer held by this taker", e.Key)
	}
	return fmt.Sprintf("bus: lease %s is held by %s until %s", e.Key, e.Holder.Owner, e.Holder.Expires.UTC().Format(time.RFC3339))
}

// leased is a pointer to a record that embeds Lease.
type leased[T any] interface {
	*T
	lease() *Lease
}

// Acquire takes the lease at key for ttl and stores v with it: v's Lease
// is set to a new lease of b (see NewLease). It succeeds when the key is
// absent, when its lease is not held (Held is false: expired, released,
// or its holder's process is gone), when its record does not decode, or
// when supersede (if not nil) reports that v may replace the live holder
// it is given (an earlier take of the same work, say). Otherwise it
// returns a *HeldError naming the holder. Acquire returns the revision
// written. Leases are in real time.
func Acquire[T any, P leased[T]](ctx context.Context, b *Bus, kv jetstream.KeyValue, key string, ttl time.Duration, v P, supersede func(held P) bool) (uint64, error) {
	*v.lease() = b.NewLease(time.Now().Add(ttl))
	mine, token := *v, v.lease().Token
	take := func(cur *T, found bool) (bool, error) {
		held := P(cur).lease()
		if found && b.Held(*held, time.Now()) && held.Token != token && (supersede == nil || !supersede(cur)) {
			return false, &HeldError{Key: key, Holder: *held}
		}
		*cur = mine
		return true, nil
	}
	var rev uint64
	for range maxConflicts {
		_, written, err := UpdateAt(ctx, kv, key, mine, rev, take)
		var ce *CorruptError
		if !errors.As(err, &ce) {
			return written, err
		}
		rev = ce.Revision // nobody can hold what nobody can read
	}
	return 0, fmt.Errorf("bus: lease %s: kept being written unreadable", key)
}

// Renew extends the lease of v, stored at key at revision rev, to ttl from
// now, and writes v (with whatever else the caller changed in it). When the
// write conflicts but the stored record still carries v's token, an earlier
// write of this take landed with its reply lost: Renew adopts that revision
// and writes again. Otherwise the lease was taken over (or deleted): Renew
// returns a *HeldError. It returns the new revision; v keeps the new
// expiry either way.
func Renew[T any, P leased[T]](ctx context.Context, kv jetstream.KeyValue, key string, v P, rev uint64, ttl time.Duration) (uint64, error) {
	v.lease().Expires = time.Now().Add(ttl).UTC()
	mine, token := *v, v.lease().Token
	_, written, err := UpdateAt(ctx, kv, key, mine, rev, func(cur *T, found bool) (bool, error) {
		if held := P(cur).lease(); !found || held.Token != token {
			return false, &HeldError{Key: key, Holder: *held}
		}
		*cur = mine
		return true, nil
	})
	var ce *CorruptError
	if errors.As(err, &ce) {
		return 0, &HeldError{Key: key}
	}
	return written, err
}

// Release gives up the lease of the take token at key, stored at revision
// rev: it removes the record, at the stored revision if the one given is
// not the latest but the record still carries token (a write whose reply
// was lost). A record of another take is left alone and reported as a
// *HeldError; an absent key is released already. The marker the removal
// leaves expires after a second (kv's bucket must allow per-key TTLs, as
// agentwork_locks does): a marker per release would otherwise stay as
// long as the bucket keeps anything.
func Release(ctx context.Context, kv jetstream.KeyValue, key, token string, rev uint64) error {
	for range maxConflicts {
		if rev != 0 {
			err := removeAt(ctx, kv, key, rev)
			if err == nil {
				return nil
			}
			if !IsConflict(err) {
				return fmt.Errorf("bus: release %s: %w", key, err)
			}
		}
		l, r, found, err := read[Lease](ctx, kv, key)
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			return &HeldError{Key: key}
		case err != nil:
			return err
		case !found:
			return nil
		case l.Token != token:
			return &HeldError{Key: key, Holder: l}
		}
		rev = r
	}
	return fmt.Errorf("bus: release %s: changed under %d deletes in a row", key, maxConflicts)
}

// AcquireWait is Acquire that waits while the lease is held: it watches
// key and tries again each time the record changes (released, or taken by
// another) and when the holder's lease expires (a holder that died on an
// external cluster stops renewing it), until it takes the lease, ctx ends
// (ctx's error), or maxWait passes (maxWait <= 0: no bound but ctx). When
// maxWait passes it returns an error that wraps the last *HeldError. Any
// other error of Acquire, or of the watch, ends it too.
//
// A lease that is free costs one round trip, as Acquire; the watch is set
// up only once the lease is found held, and the take is tried again after
// that, so a release between the first try and the watch is not missed.
func AcquireWait[T any, P leased[T]](ctx context.Context, b *Bus, kv jetstream.KeyValue, key string, ttl, maxWait time.Duration, v P, supersede func(held P) bool) (uint64, error) {
	rev, err := Acquire(ctx, b, kv, key, ttl, v, supersede)
	var held *HeldError
	if !errors.As(err, &held) {
		return rev, err
	}
	var giveUp <-chan time.Time
	if maxWait > 0 {
		t := time.NewTimer(maxWait)
		defer t.Stop()
		giveUp = t.C
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kv.Watch(wctx, key, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return 0, fmt.Errorf("bus: lease %s: watch for its release: %w", key, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		rev, err := Acquire(ctx, b, kv, key, ttl, v, supersede)
		if !errors.As(err, &held) {
			return rev, err
		}
		expired := time.NewTimer(max(time.Until(held.Holder.Expires), time.Millisecond))
		select {
		case _, open := <-w.Updates(): // released, renewed or taken by another: look again
			if !open && ctx.Err() == nil {
				expired.Stop()
				return 0, fmt.Errorf("bus: lease %s: the watch for its release ended", key)
			}
		case <-expired.C:
		case <-giveUp:
			expired.Stop()
			return 0, fmt.Errorf("bus: lease %s still held after waiting %s: %w", key, maxWait, held)
		case <-ctx.Done():
		}
		expired.Stop()
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
}
