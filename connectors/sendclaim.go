package connectors

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
)

// The send claim: the agentwork_locks record that makes one instance send
// a notification once (see Dispatcher).

// States of a send claim.
const (
	sendSending = "sending" // Owner sends it now, until Expires unless renewed
	sendSent    = "sent"    // the destination has it
	sendRetry   = "retry"   // an attempt failed; the next one may take the claim
)

// sendClaim is the agentwork_locks record send.<notification id>. Its
// lease's token tells this take of the claim from any other, even one by
// the same instance.
type sendClaim struct {
	State string `json:"state"`
	bus.Lease
	Attempts int `json:"attempts"`
	// Parts and MessageIDs are what earlier attempts got to the
	// destination of a text split over several messages.
	Parts      int      `json:"parts,omitempty"`
	MessageIDs []string `json:"message_ids,omitempty"`
	key        string
	rev        uint64
}

// sendKey is the agentwork_locks key of notification id's send claim, and
// false when id is empty (then nothing guards a redelivery from being sent
// again). An id that cannot be a key is hashed.
func sendKey(id string) (string, bool) { return claimKey("send.", id) }

// claimKey is prefix+id as a KV key, and false when id is empty. An id
// that cannot be a key is hashed.
func claimKey(prefix, id string) (string, bool) {
	if id == "" {
		return "", false
	}
	valid := id[0] != '.' && id[len(id)-1] != '.' && !strings.Contains(id, "..")
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-/_=.", r)) {
			valid = false
			break
		}
	}
	if !valid {
		sum := sha256.Sum256([]byte(id))
		return prefix + "sha256." + hex.EncodeToString(sum[:]), true
	}
	return prefix + id, true
}

// take is what takeSend found.
type take struct {
	claim   sendClaim
	proceed bool          // ours: send it
	sent    bool          // sent already: ack it
	wait    time.Duration // another instance sends it: look again after this
}

// takeSend claims the send of the notification whose claim key is key: a
// create when no attempt was made yet; after a failed attempt, or when the
// last owner's lease is no longer held, a CAS that counts one more attempt.
func (d *Dispatcher) takeSend(ctx context.Context, key string) (take, error) {
	var t take
	fresh := sendClaim{State: sendSending, Lease: d.bus.NewLease(time.Now().Add(d.cfg.AckWait)), Attempts: 1}
	claim := func(c *sendClaim, found bool) (bool, error) {
		now := time.Now()
		t = take{claim: *c}
		switch {
		case found && c.State == sendSent:
			t.sent = true
			return false, nil
		case found && c.State == sendSending && d.bus.Held(c.Lease, now):
			t.wait = c.Expires.Sub(now)
			return false, nil
		}
		// Absent, a failed attempt, or a sending claim whose owner stopped
		// renewing it (died, or stalled past its lease): that attempt
		// counts too, so a notification that kills its instance does not
		// go round for ever.
		*c = sendClaim{State: sendSending, Lease: d.bus.NewLease(now.Add(d.cfg.AckWait)), Attempts: c.Attempts + 1, Parts: c.Parts, MessageIDs: c.MessageIDs}
		t.proceed = true
		return true, nil
	}
	t.proceed = true // unless the create conflicts
	c, rev, err := bus.UpdateAt(ctx, d.bus.Locks, key, fresh, 0, claim)
	var corrupt *bus.CorruptError
	if errors.As(err, &corrupt) {
		// Unreadable: not a live claim; take it over.
		t.proceed = true
		c, rev, err = bus.UpdateAt(ctx, d.bus.Locks, key, fresh, corrupt.Revision, claim)
	}
	switch {
	case bus.IsConflict(err):
		return take{wait: d.progressEvery()}, nil // contended: look again soon
	case err != nil:
		return take{}, fmt.Errorf("send claim %s: %w", key, err)
	}
	t.claim, t.claim.key, t.claim.rev = c, key, rev
	return t, nil
}

// renew extends c's lease by CAS, and records what change makes of c (nil:
// nothing) with it. Its error is a *bus.HeldError when c is no longer this
// send's (another instance took it over or recorded it sent), else a
// transient failure of the bus; c is changed only when the write
// succeeded.
func (d *Dispatcher) renew(ctx context.Context, log *zap.Logger, c *sendClaim, change func(*sendClaim)) error {
	if d.stall.claims.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, d.progressEvery())
	defer cancel()
	next := *c
	if change != nil {
		change(&next)
	}
	rev, err := bus.Renew(ctx, d.bus.Locks, c.key, &next, c.rev, d.cfg.AckWait)
	var held *bus.HeldError
	switch {
	case err == nil:
		next.rev = rev
		*c = next
	case errors.As(err, &held):
		log.Warn("send claim taken over by another instance (this one stalled past its lease); cancelling this send",
			zap.String("claim", c.key), zap.String("owner", held.Holder.Owner))
	default:
		log.Warn("send claim not renewed; trying again", zap.String("claim", c.key), zap.Error(err))
	}
	return err
}

// holding is a send in progress under its claim (see hold).
type holding struct {
	d      *Dispatcher
	log    *zap.Logger
	c      *sendClaim
	cancel context.CancelFunc
	// before are the message ids of the parts earlier attempts sent.
	before []string

	mu   sync.Mutex
	sent Receipt // the parts confirmed so far (SendParts' progress)
	lost bool
}

// errLost is renew's error once the claim was taken over.
var errLost = errors.New("connectors: the send claim was taken over by another instance")

// renew renews the claim with the parts confirmed so far; when the claim
// was taken over it cancels the send. Its error is renew's.
func (h *holding) renew(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost {
		return errLost
	}
	sent := h.sent
	var change func(*sendClaim)
	if sent.Parts > h.c.Parts {
		change = func(c *sendClaim) {
			c.Parts, c.MessageIDs = sent.Parts, append(slices.Clone(h.before), sent.MessageIDs...)
		}
	}
	err := h.d.renew(ctx, h.log, h.c, change)
	if errors.As(err, new(*bus.HeldError)) {
		h.lost = true
		h.cancel()
		return errLost
	}
	return err
}

// record records rec, the parts the destination confirmed so far, in the
// claim before the next part goes. A transient failure of the bus is
// tried again for up to a third of AckWait (the claim's last renewal is
// at most that old, so it stays live meanwhile), within send (the send's
// ctx). When the parts still cannot be recorded, the send stops there
// with a retryable error: sending on would leave parts that a takeover
// sends again, where the next attempt resumes from what is recorded (the
// settle of this one records rec if the bus is back by then).
func (h *holding) record(ctx, send context.Context, rec Receipt) error {
	h.mu.Lock()
	h.sent = rec
	h.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, h.d.progressEvery())
	defer cancel()
	pause := 10 * time.Millisecond
	for {
		err := h.renew(rctx)
		if err == nil || errors.Is(err, errLost) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
			pause = min(2*pause, 200*time.Millisecond)
			continue
		case <-rctx.Done():
		case <-send.Done():
		}
		t.Stop()
		return Retry(fmt.Errorf("connectors: %d parts were sent and could not be recorded in the send claim (%w); stopping so that the next attempt goes on from what is recorded", rec.Parts, err), 0)
	}
}

// hold keeps a send going: every AckWait/3 it renews c (nil: none), so
// that an instance that gets the notification all the same (this one
// stalled past AckWait; the worker signals progress meanwhile) waits
// instead of sending it too. When c was taken over it cancels the send and
// stops: the notification is the other instance's now.
//
// The ctx it returns carries sctx and the progress hook of SendParts: each
// part of a split text the destination confirmed is recorded in c (with a
// renewal) before the next part goes, so the instance that takes over the
// send of one that died sends only the parts not confirmed; when it cannot
// be recorded, the send stops there (see record).
//
// release stops it and reports whether c was lost; c then holds the last
// revision written.
func (d *Dispatcher) hold(ctx, sctx context.Context, log *zap.Logger, c *sendClaim, cancelSend context.CancelFunc) (send context.Context, release func() (lost bool)) {
	if c == nil {
		return sctx, func() bool { return false }
	}
	h := &holding{d: d, log: log, c: c, cancel: cancelSend, before: slices.Clone(c.MessageIDs)}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d.progressEvery())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			_ = h.renew(ctx) // failed for now: the next tick tries again
			if h.lostNow() {
				return
			}
		}
	})
	send = withProgress(sctx, func(rec Receipt) error { return h.record(ctx, sctx, rec) })
	return send, func() bool { close(done); wg.Wait(); return h.lostNow() }
}

func (h *holding) lostNow() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// settle ends this attempt's claim: sent (written over whatever is there:
// the send happened), retry (the attempts kept, the claim free for the
// next one), or deleted (given up: the same notification queued again
// later starts afresh). It reports false when another instance took the
// claim over, which then owns the notification.
func (d *Dispatcher) settle(ctx context.Context, c *sendClaim, state string, rec Receipt) (owned bool, err error) {
	next := *c
	next.State, next.Expires = state, time.Time{}
	if rec.Parts > next.Parts {
		next.Parts, next.MessageIDs = rec.Parts, rec.MessageIDs
	}
	switch state {
	case sendSent:
		raw, _ := json.Marshal(next) // strings, a time and an int
		// Kept while a redelivery of the notification can come (see
		// bus.SettledTTL), not for the bucket's 7 days.
		_, err = d.bus.PutExpiring(ctx, d.bus.Locks, c.key, raw, bus.SettledTTL)
		return true, err
	case sendRetry:
		owned = true // unless the write conflicts with another take's
		_, _, err = bus.UpdateAt(ctx, d.bus.Locks, c.key, next, c.rev, func(cur *sendClaim, found bool) (bool, error) {
			if owned = found && cur.Token == c.Token; owned {
				*cur = next // ours: a renewal's reply was lost
			}
			return owned, nil
		})
		return owned, err
	default:
		err = bus.Release(ctx, d.bus.Locks, c.key, c.Token, c.rev)
		if errors.As(err, new(*bus.HeldError)) {
			return false, nil
		}
		return true, err
	}
}
