package agentwork

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
)

// Claim states.
const (
	claimRunning  = "running"
	claimRetry    = "retry"    // try again; the next try is another attempt
	claimDeferred = "deferred" // try again; nothing was attempted (defer, shutdown)
	claimDone     = "done"
	// claimParked: a gated tool call waits for its approval (Parked);
	// only the request that approval publishes once decided takes the
	// claim again. It has no lease: nothing runs, however long it waits.
	claimParked = "parked"
)

// claim is the KV record run.<request id> in agentwork_locks. It makes a
// request run once across instances and redeliveries: a done claim acks the
// redelivery without running; a running claim held by a live instance is
// left alone until it expires; an expired one, or on the embedded server
// one of a process that is gone, is taken over and run again with the same
// run id.
type claim struct {
	State string `json:"state"`
	RunID string `json:"run_id"`
	// Lease is held while the claim is running; a settled claim keeps its
	// owner and token, without an expiry.
	bus.Lease
	Attempts int    `json:"attempts"`
	Outcome  string `json:"outcome,omitempty"`
	// Checkpoint, once set, is how far the run got: its conversation
	// with the model so far, from which a retry or a takeover goes on, or
	// what it decided, which a retry re-queues and emits without calling
	// the model again (which could answer differently).
	Checkpoint *checkpoint `json:"checkpoint,omitempty"`
	// Forgone: the request was settled without a run (Forgo); its
	// trigger recorded its outcome.
	Forgone bool `json:"forgone,omitempty"`
	// Parked is the approval a parked claim waits for.
	Parked string `json:"parked,omitempty"`
	rev    uint64
}

// checkpoint is how far a run got, kept in its claim: its conversation
// while the model and its tools work, then its decided outcome.
type checkpoint struct {
	// Result is the run's event data, once decided (nil: not yet).
	Result *Result `json:"result,omitempty"`
	// Notice is the notification to queue (nil: none), to Targets.
	Notice  *Notice  `json:"notice,omitempty"`
	Targets []string `json:"targets,omitempty"`
	// Conversation is the run's tool loop so far (see packState), kept
	// from its first call of a tool other than notify_user on, until
	// Result replaces it.
	Conversation *tools.State `json:"conversation,omitempty"`
	// Flush, with Conversation, says the run is in its memory flush:
	// its work ended where the flush began.
	Flush *flushMark `json:"flush,omitempty"`
	// Approvals are the decided approvals of the run's gated calls so
	// far, for its event.
	Approvals []CallApproval `json:"approvals,omitempty"`
	// ModelCalls are the run's model calls so far, for its event (see
	// modelCalls): with Conversation, or alone after a try that failed
	// before it kept one.
	ModelCalls        []ModelCall `json:"model_calls,omitempty"`
	ModelCallsOmitted int         `json:"model_calls_omitted,omitempty"`
}

func claimKey(requestID string) string { return "run." + requestID }

type claimResult struct {
	claim   claim
	proceed bool
	// wait: another live instance runs it; look again after this.
	wait time.Duration
	// missing: a resume found no claim (see takeClaim).
	missing bool
}

// takeClaim takes the run claim of request requestID for a run, unless
// the request is done, runs on a live instance, or is parked on an
// approval other than resume (the approval a resume request says was
// decided; "" for the request itself). A resume takes only an existing
// claim: without one (it lived longer than bus.LocksTTL), missing.
func (r *Runner) takeClaim(ctx context.Context, requestID string, ttl time.Duration, resume string) (claimResult, error) {
	var res claimResult
	proceed := true // unless the first write, a create, conflicts
	fresh := claim{State: claimRunning, RunID: newRunID(), Lease: r.bus.NewLease(time.Now().Add(ttl)), Attempts: 1}
	fn := func(c *claim, found bool) (bool, error) {
		now := time.Now()
		res, proceed = claimResult{claim: *c}, false
		switch {
		case !found && resume != "":
			res.missing = true
			return false, nil
		case !found:
			*c = fresh
			c.Lease = r.bus.NewLease(now.Add(ttl))
			proceed = true
			return true, nil
		case c.State == claimDone:
			return false, nil
		case c.State == claimParked && c.Parked != resume:
			return false, nil
		case c.State == claimParked:
			// Its approval was decided: go on, without counting an attempt.
			c.State, c.Lease, c.Parked = claimRunning, r.bus.NewLease(now.Add(ttl)), ""
			proceed = true
			return true, nil
		case c.State == claimRunning && r.bus.Held(c.Lease, now):
			res.wait = c.Expires.Sub(now)
			return false, nil
		}
		// A retry, a deferral, or a running claim whose owner died: take it
		// over. A retry counts as another attempt, and so does a takeover: a
		// request that kills its runner (out of memory, a crash in a tool)
		// must not crash instance after instance for ever.
		if c.State == claimRetry || c.State == claimRunning {
			c.Attempts++
		}
		c.State, c.Lease = claimRunning, r.bus.NewLease(now.Add(ttl))
		if c.RunID == "" {
			c.RunID = newRunID()
		}
		proceed = true
		return true, nil
	}
	var c claim
	var rev uint64
	var err error
	if resume != "" {
		c, rev, err = bus.Update(ctx, r.bus.Locks, claimKey(requestID), fn)
	} else {
		c, rev, err = bus.UpdateAt(ctx, r.bus.Locks, claimKey(requestID), fresh, 0, fn)
	}
	switch {
	case bus.IsConflict(err):
		return claimResult{wait: time.Second}, nil // contended: look again soon
	case err != nil:
		return claimResult{}, fmt.Errorf("claim: %w", err)
	case !proceed:
		return res, nil
	}
	c.rev = rev
	return claimResult{claim: c, proceed: true}, nil
}

func (r *Runner) settleClaim(ctx context.Context, requestID string, c claim, state, outcome string) error {
	c.State, c.Outcome = state, outcome
	if state != claimRunning {
		c.Expires = time.Time{}
	}
	if cp := c.Checkpoint; state == claimDone && cp != nil && cp.Conversation != nil {
		// A done claim only acks redeliveries, for days: it keeps what the
		// run decided, not its conversation (up to MaxConversation).
		done := *cp
		done.Conversation, done.Flush = nil, nil
		c.Checkpoint = &done
		if done.Result == nil && done.Notice == nil {
			c.Checkpoint = nil
		}
	}
	if state == claimRunning && c.rev == 0 {
		return nil
	}
	settle := func(cur *claim, found bool) (bool, error) {
		// Someone else wrote the claim (our run outlived its lease and was
		// taken over). Never undo their progress: a done claim stays done,
		// and another take's running claim is not turned back into a
		// retry. Our own done outcome is recorded (the run did happen),
		// keeping the larger attempt count.
		if found && (cur.State == claimDone || (state != claimDone && cur.Token != c.Token)) {
			return false, nil
		}
		next := c
		next.Attempts = max(c.Attempts, cur.Attempts)
		*cur = next
		return true, nil
	}
	if state == claimDone {
		// A done claim answers a redelivery of its request: after the ack,
		// a duplicate publish or the reset after an embedded restart, both
		// bounded by bus.SettledTTL. Kept longer, one key per run adds up
		// in the server's memory.
		_, _, err := bus.UpdateAtExpiring(ctx, r.bus, r.bus.Locks, claimKey(requestID), c, c.rev, bus.SettledTTL, settle)
		return err
	}
	_, _, err := bus.UpdateAt(ctx, r.bus.Locks, claimKey(requestID), c, c.rev, settle)
	return err
}

// heldClaim keeps a running claim alive while its run goes on, and with it
// the run's overlap lease: the lease is short (a crashed instance's request
// is taken over within it) and renewed every third of it by CAS. A failed
// renewal means another instance took the request over after our lease
// lapsed; the run finishes anyway and its settle records the outcome.
type heldClaim struct {
	mu      sync.Mutex
	c       claim
	isLost  bool         // a renewal found another owner
	overlap *overlapHold // the run's overlap lease, renewed with the claim
	once    sync.Once
	stop    chan struct{}
	done    chan struct{}
}

func (r *Runner) holdClaim(ctx context.Context, requestID string, c claim, lease time.Duration) *heldClaim {
	h := &heldClaim{c: c, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		t := time.NewTicker(max(lease/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
			h.mu.Lock()
			if next, err := r.renewClaim(ctx, requestID, h.c, lease); err == nil {
				h.c = next
			} else {
				h.isLost = h.isLost || errors.Is(err, errClaimLost)
				r.log.Warn("run claim not renewed", zap.String("request", requestID), zap.Error(err))
			}
			h.renewOverlap(ctx, r, requestID, lease)
			h.mu.Unlock()
		}
	}()
	return h
}

// checkpoint returns the checkpoint the claim carries, if any.
func (h *heldClaim) checkpoint() *checkpoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.c.Checkpoint
}

// save writes cp into the claim at once (CAS), before the run does anything
// it could not take back. The renewals carry it on.
func (h *heldClaim) save(ctx context.Context, r *Runner, requestID string, cp *checkpoint, lease time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := h.c
	next.Checkpoint = cp
	next, err := r.renewClaim(ctx, requestID, next, lease)
	if err != nil {
		h.isLost = h.isLost || errors.Is(err, errClaimLost)
		return err
	}
	h.c = next
	return nil
}

// keepResult records the run's result in a fresh checkpoint without writing
// it (the settle writes it). The notice of an earlier checkpoint is kept
// only if res is that checkpoint's own result: a done notice must not ride
// along with an error result.
func (h *heldClaim) keepResult(res *Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := &checkpoint{Result: res}
	if old := h.c.Checkpoint; old != nil && old.Result == res {
		next.Notice, next.Targets = old.Notice, old.Targets
	}
	h.c.Checkpoint = next
}

// lost reports whether a renewal found the claim taken over by another
// instance.
func (h *heldClaim) lost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.isLost
}

// release stops the renewals and returns the claim as last written.
func (h *heldClaim) release() claim {
	h.once.Do(func() { close(h.stop) })
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.c
}

// errClaimLost: another instance holds the claim now.
var errClaimLost = errors.New("claim taken over")

// renewClaim extends c by lease. If the write conflicts, it may have
// landed with its reply lost: when the stored claim is still this take's,
// its revision is adopted and the renewal tried once more.
func (r *Runner) renewClaim(ctx context.Context, requestID string, c claim, lease time.Duration) (claim, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease/3)
	defer cancel()
	rev, err := bus.Renew(ctx, r.bus.Locks, claimKey(requestID), &c, c.rev, lease)
	var held *bus.HeldError
	if errors.As(err, &held) {
		return c, fmt.Errorf("%w by %s", errClaimLost, held.Holder.Owner)
	}
	if err != nil {
		return c, err
	}
	c.rev = rev
	return c, nil
}

// Forgo settles the run claim of request requestID as done without a run,
// unless a run has claimed the request already. A trigger that records the
// outcome of a request it may have published (a publish whose ack was
// lost) in its stead — cron's missed tick — calls it first: a copy of the
// request that arrives later is acknowledged without running, so the
// request ends in the trigger's event or in its run's, never both. It
// reports whether the request is forgone, by this call or an earlier one;
// false: a run has it, and its event follows. The claim stays for the
// locks bucket's TTL (bus.LocksTTL), as long as a request waits in its
// stream. Safe to call again after an error.
func Forgo(ctx context.Context, b *bus.Bus, requestID string) (bool, error) {
	forgone := true
	fresh := claim{State: claimDone, Outcome: bus.OutcomeSkip, Forgone: true}
	_, _, err := bus.UpdateAt(ctx, b.Locks, claimKey(requestID), fresh, 0, func(c *claim, found bool) (bool, error) {
		if !found {
			*c, forgone = fresh, true
			return true, nil
		}
		forgone = c.Forgone
		return false, nil
	})
	if err != nil {
		return false, fmt.Errorf("agentwork: forgo request %s: %w", requestID, err)
	}
	return forgone, nil
}
