package agentwork

import (
	"sync"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Claim states.
const (
	claimRunning  = "running"
	claimRetry    = "retry"    // try again; the next try is another attempt
	claimDeferred = "deferred" // try again; nothing was attempted (defer, shutdown)
	claimDone     = "done"
)

// claim is the KV record run.<request id> in agentwork_locks. It makes a
// request run once across instances and redeliveries: a done claim acks the
// redelivery without running; a running claim held by a live instance is
// left alone until it expires; an expired one (its owner crashed) is taken
// over by CAS and run again with the same run id.
type claim struct {
	State    string    `json:"state"`
	RunID    string    `json:"run_id"`
	Owner    string    `json:"owner"`
	Expires  time.Time `json:"expires"`
	Attempts int       `json:"attempts"`
	Outcome  string    `json:"outcome,omitempty"`
	// Checkpoint, once set, is what the run decided: a retry of the request
	// re-queues its notification and emits its event, and never calls the
	// model again (which could answer differently).
	Checkpoint *checkpoint `json:"checkpoint,omitempty"`
	rev        uint64
}

// checkpoint is a run's decided outcome, kept in its claim.
type checkpoint struct {
	// Result is the run's event data.
	Result *Result `json:"result"`
	// Notice is the notification to queue (nil: none), to Targets.
	Notice  *Notice  `json:"notice,omitempty"`
	Targets []string `json:"targets,omitempty"`
}

func claimKey(requestID string) string { return "run." + requestID }

type claimResult struct {
	claim   claim
	proceed bool
	// wait: another live instance runs it; look again after this.
	wait time.Duration
}

func (r *Runner) takeClaim(ctx context.Context, requestID string, ttl time.Duration) (claimResult, error) {
	kv, key := r.bus.Locks, claimKey(requestID)
	now := time.Now()
	for range 3 {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			c := claim{State: claimRunning, RunID: newRunID(), Owner: r.bus.Instance(), Expires: now.Add(ttl), Attempts: 1}
			rev, err := kv.Create(ctx, key, mustJSON(c))
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			if err != nil {
				return claimResult{}, fmt.Errorf("claim: %w", err)
			}
			c.rev = rev
			return claimResult{claim: c, proceed: true}, nil
		}
		if err != nil {
			return claimResult{}, fmt.Errorf("claim: %w", err)
		}
		var c claim
		if err := json.Unmarshal(e.Value(), &c); err != nil {
			return claimResult{}, fmt.Errorf("claim %s: %w", key, err)
		}
		switch {
		case c.State == claimDone:
			return claimResult{claim: c}, nil
		case c.State == claimRunning && now.Before(c.Expires):
			return claimResult{claim: c, wait: c.Expires.Sub(now)}, nil
		}
		// A retry, a deferral, or a running claim whose owner died: take it
		// over. A retry counts as another attempt, and so does a takeover: a
		// request that kills its runner (out of memory, a crash in a tool)
		// must not crash instance after instance for ever.
		if c.State == claimRetry || c.State == claimRunning {
			c.Attempts++
		}
		c.State, c.Owner, c.Expires = claimRunning, r.bus.Instance(), now.Add(ttl)
		if c.RunID == "" {
			c.RunID = newRunID()
		}
		rev, err := kv.Update(ctx, key, mustJSON(c), e.Revision())
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
			continue
		}
		if err != nil {
			return claimResult{}, fmt.Errorf("claim: %w", err)
		}
		c.rev = rev
		return claimResult{claim: c, proceed: true}, nil
	}
	return claimResult{wait: time.Second}, nil
}

func (r *Runner) settleClaim(ctx context.Context, requestID string, c claim, state, outcome string) error {
	c.State, c.Outcome = state, outcome
	if state != claimRunning {
		c.Expires = time.Time{}
	}
	if state == claimRunning && c.rev == 0 {
		return nil
	}
	kv, key := r.bus.Locks, claimKey(requestID)
	for range 3 {
		_, err := kv.Update(ctx, key, mustJSON(c), c.rev)
		if err == nil || !(errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err)) {
			return err
		}
		// Someone else wrote the claim (our run outlived its lease and was
		// taken over). Never undo their progress: a done claim stays done,
		// and another owner's running claim is not turned back into a
		// retry. Our own done outcome is recorded (the run did happen),
		// keeping the larger attempt count.
		e, gerr := kv.Get(ctx, key)
		if gerr != nil {
			return gerr
		}
		var cur claim
		if json.Unmarshal(e.Value(), &cur) == nil {
			if cur.State == claimDone || (state != claimDone && cur.Owner != c.Owner) {
				return nil
			}
			c.Attempts = max(c.Attempts, cur.Attempts)
		}
		c.rev = e.Revision()
	}
	return fmt.Errorf("claim %s: kept changing while settling", key)
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// heldClaim keeps a running claim alive while its run goes on: the lease is
// short (a crashed instance's request is taken over within it) and renewed
// every third of it by CAS. A failed renewal means another instance took the
// request over after our lease lapsed; the run finishes anyway and its
// settle records the outcome.
type heldClaim struct {
	mu     sync.Mutex
	c      claim
	isLost bool // a renewal found another owner
	once   sync.Once
	stop   chan struct{}
	done   chan struct{}
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

// RunAlive reports whether the run of request requestID is still going on
// some instance: its claim is running and was renewed recently (claims are
// renewed every third of their lease while the run lives, see Runner). A
// trigger's overlap lease whose run is no longer alive belongs to a crashed
// instance and may be taken over at once, instead of waiting out the lease.
// On a read error it reports true (never steal what may be held).
// Claims are leases in real time, whatever clock the runner was given:
// their renewals run on real time.
func RunAlive(ctx context.Context, b *bus.Bus, requestID string) (bool, error) {
	if requestID == "" {
		return true, nil
	}
	e, err := b.Locks.Get(ctx, claimKey(requestID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("agentwork: run claim of %s: %w", requestID, err)
	}
	var c claim
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return true, fmt.Errorf("agentwork: run claim of %s: %w", requestID, err)
	}
	return c.State == claimRunning && time.Now().Before(c.Expires), nil
}

// errClaimLost: another instance holds the claim now.
var errClaimLost = errors.New("claim taken over")

// renewClaim extends c by lease with a CAS write. If the write conflicts,
// it may have landed with its reply lost: when the stored claim is still
// this run's, its revision is adopted and the renewal tried once more.
func (r *Runner) renewClaim(ctx context.Context, requestID string, c claim, lease time.Duration) (claim, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease/3)
	defer cancel()
	kv, key := r.bus.Locks, claimKey(requestID)
	c.Expires = time.Now().Add(lease)
	rev, err := kv.Update(ctx, key, mustJSON(c), c.rev)
	if err != nil && (errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err)) {
		e, gerr := kv.Get(ctx, key)
		if gerr != nil {
			return c, errors.Join(err, gerr)
		}
		var cur claim
		if json.Unmarshal(e.Value(), &cur) != nil || cur.State != claimRunning || cur.RunID != c.RunID || cur.Owner != c.Owner {
			return c, fmt.Errorf("%w by %s", errClaimLost, cur.Owner)
		}
		c.rev = e.Revision()
		rev, err = kv.Update(ctx, key, mustJSON(c), c.rev)
	}
	if err != nil {
		return c, err
	}
	c.rev = rev
	return c, nil
}
