package agentwork

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
)

// Overlap modes: what a run does while another run of the same work is
// going on (on any instance).
const (
	// OverlapSkip ends the run with skip "busy".
	OverlapSkip = "skip"
	// OverlapQueue puts the run back until the other one has ended.
	OverlapQueue = "queue"
	// OverlapAllow lets runs overlap: no lease is taken.
	OverlapAllow = "allow"
)

// defaultOverlapPoll is how soon a queued run looks again by default.
const defaultOverlapPoll = 2 * time.Second

// Overlap keeps runs of the same work from going on at once across all
// instances. A run in mode skip or queue takes the work's overlap lease
// once its input gates have passed. The lease is held under the run's
// claim: renewed with it while the run goes on, released just before the
// run's event is emitted, and free as soon as the claim would be (its
// holder stopped renewing it, or on the embedded server its process is
// gone).
type Overlap struct {
	// Mode is OverlapSkip, OverlapQueue or OverlapAllow. Default (empty)
	// OverlapAllow. An input gate may set another mode for one run
	// (Run.Overlap): a cron job has its own.
	Mode string
	// Key names the work of a run: runs with the same key do not overlap.
	// Default: OverlapKey of the request's source and name.
	Key func(run *Run) string
	// Poll is how soon a queued run looks again. Default 2s.
	Poll time.Duration
	// Superseded, if set, reports in queue mode whether a waiting run has
	// been overtaken by newer work (a heartbeat tick whose next tick is
	// due): it then ends with skip "busy" instead of waiting. now is the
	// runner's clock.
	Superseded func(run *Run, now time.Time) bool
}

// OverlapKey is the agentwork_locks key of the overlap lease of the work
// source/name, unless a policy's Overlap.Key says otherwise.
func OverlapKey(source, name string) string { return "overlap." + source + "." + name }

// OverlapLease is the record of the run that holds an overlap lease.
type OverlapLease struct {
	bus.Lease
	RunID     string `json:"run_id"`
	RequestID string `json:"request_id,omitempty"`
	// Since is when the run took the lease.
	Since time.Time `json:"since"`
}

// Running returns the overlap lease at key if a run holds it, else nil.
func Running(ctx context.Context, b *bus.Bus, key string) (*OverlapLease, error) {
	e, err := b.Locks.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agentwork: overlap lease %s: %w", key, err)
	}
	var l OverlapLease
	if json.Unmarshal(e.Value(), &l) != nil || !b.Held(l.Lease, time.Now()) {
		return nil, nil
	}
	return &l, nil
}

// overlapGate takes a run's overlap lease. The runner puts it after the
// policy's input gates; as a Releaser it gives the lease back with the
// input gates' leases, before the run's event.
type overlapGate struct {
	r     *Runner
	pol   Overlap
	held  *heldClaim
	lease time.Duration
}

var (
	_ InputGate = overlapGate{}
	_ Releaser  = overlapGate{}
)

// Check implements InputGate.
func (g overlapGate) Check(ctx context.Context, run *Run) error {
	switch run.Overlap {
	case OverlapAllow, "":
		return nil
	case OverlapSkip, OverlapQueue:
	default:
		return fmt.Errorf("overlap %q: want %s, %s or %s", run.Overlap, OverlapSkip, OverlapQueue, OverlapAllow)
	}
	key := OverlapKey(run.Request.Source, run.Request.Name)
	if g.pol.Key != nil {
		key = g.pol.Key(run)
	}
	mine := OverlapLease{RunID: run.ID, RequestID: run.Request.ID, Since: time.Now().UTC()}
	var holder OverlapLease
	rev, err := bus.Acquire(ctx, g.r.bus, g.r.bus.Locks, key, g.lease, &mine, func(h *OverlapLease) bool {
		holder = *h
		// An earlier take of this very run: this one holds the run's
		// claim now, so that take is over.
		return h.RunID == run.ID
	})
	if errors.As(err, new(*bus.HeldError)) {
		return g.busy(run, holder)
	}
	if err != nil {
		return err
	}
	g.held.holdOverlap(key, mine, rev)
	return nil
}

// busy is the verdict on a run whose work another run holds.
func (g overlapGate) busy(run *Run, holder OverlapLease) error {
	detail := fmt.Sprintf("the %s run %s", run.Request.Source, holder.RunID)
	if !holder.Since.IsZero() {
		detail += fmt.Sprintf(" started %s ago", time.Since(holder.Since).Round(time.Second))
	}
	detail += fmt.Sprintf(" on %s is still going", holder.Owner)
	if run.Overlap != OverlapQueue {
		return Skip(ReasonBusy, detail)
	}
	if g.pol.Superseded != nil && g.pol.Superseded(run, g.r.now()) {
		return Skip(ReasonBusy, detail+"; a newer "+run.Request.Source+" tick has replaced this one")
	}
	poll := g.pol.Poll
	if poll <= 0 {
		poll = defaultOverlapPoll
	}
	return Defer(poll, ReasonBusy+": "+detail)
}

// Release implements Releaser.
func (g overlapGate) Release(ctx context.Context, run *Run) {
	g.held.releaseOverlap(ctx, g.r, run)
}

// overlapHold is an overlap lease a run holds.
type overlapHold struct {
	key string
	rec OverlapLease
	rev uint64
}

// holdOverlap adds the overlap lease to what the claim's renewals renew.
func (h *heldClaim) holdOverlap(key string, rec OverlapLease, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.overlap = &overlapHold{key: key, rec: rec, rev: rev}
}

// renewOverlap renews the overlap lease, if one is held. h.mu held.
func (h *heldClaim) renewOverlap(ctx context.Context, r *Runner, requestID string, lease time.Duration) {
	o := h.overlap
	if o == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease/3)
	defer cancel()
	rev, err := bus.Renew(ctx, r.bus.Locks, o.key, &o.rec, o.rev, lease)
	if err == nil {
		o.rev = rev
		return
	}
	if errors.As(err, new(*bus.HeldError)) {
		// Not renewed for a whole lease (this instance stalled), and
		// another run took it: that one's now.
		h.overlap = nil
	}
	r.log.Warn("overlap lease not renewed", zap.String("request", requestID), zap.String("lease", o.key), zap.Error(err))
}

// releaseOverlap gives the overlap lease back, if one is held.
func (h *heldClaim) releaseOverlap(ctx context.Context, r *Runner, run *Run) {
	h.mu.Lock()
	o := h.overlap
	h.overlap = nil
	h.mu.Unlock()
	if o == nil {
		return
	}
	err := bus.Release(ctx, r.bus.Locks, o.key, o.rec.Token, o.rev)
	switch {
	case errors.As(err, new(*bus.HeldError)):
		r.log.Debug("overlap lease taken over before it was released", zap.String("run", run.ID), zap.String("lease", o.key))
	case err != nil:
		r.log.Warn("overlap lease not released; it expires on its own", zap.String("run", run.ID), zap.String("lease", o.key), zap.Error(err))
	}
}
