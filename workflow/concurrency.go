package workflow

// A workflow's concurrency (Concurrency{Limit, Overlap}): how many of its
// runs may be in flight at once, and what a start at the limit does.
//
// A start counts the workflow's runs in flight (pending, running,
// waiting) and stores its own while it holds one lease of the workflow
// (bus.Acquire on agentwork_locks, key workflow.<name>.concurrency: the
// lease pattern of cron's agent-job quota), so two instances starting at
// once cannot both take the last place. The runs counted are those an
// index names (agentwork_locks, key workflow.<name>.runs: the ids of the
// workflow's runs not ended), each read from the runs bucket under the
// lease, so a start reads the index and its workflow's live runs, not
// every run kept. A start adds its run to the index before it stores it;
// a count drops the ids whose runs ended (or were never stored), so a
// process that dies leaks nothing for long, and a lease whose holder died
// frees itself. Without an index, one is built from the runs bucket.
//
// At the limit, overlap skip stores the run as skipped (an ended status)
// and emits agentwork.workflow.skipped, reason busy; overlap queue stores
// it as queued, with no start command. The end of a run of a workflow
// with queued runs releases them: the effect that emits the run's end
// event (in the outbox of the write that ends the run, so carried out
// again after a crash) then takes the lease, counts, and starts the
// oldest queued runs that fit (queued → pending, and the start command).
// Engine.Run does the same once for every queueing workflow at start, so
// a limit raised in the config takes effect. Queued runs are records of
// the runs bucket: they survive restarts.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
)

// Run statuses of the concurrency policy.
const (
	// RunQueued: the workflow was at its concurrency limit (overlap
	// queue); the run starts when a place frees.
	RunQueued RunStatus = "queued"
	// RunSkipped: the workflow was at its concurrency limit (overlap
	// skip); the run never started. An ended status.
	RunSkipped RunStatus = "skipped"
)

// ErrBusy is the kind of a skipped run's error: its workflow had
// Concurrency.Limit runs in flight.
const ErrBusy ErrorKind = "busy"

// ReasonBusy is the reason of the skipped event of a run that its
// workflow's concurrency limit skipped.
const ReasonBusy = "busy"

// concurrencyLease is how long a start or a release holds the workflow's
// lease: far longer than a count and a write take. A start that finds it
// held waits until it is released, or until it expires when its holder
// died (on a cluster), up to concurrencyWait.
const (
	concurrencyLease = 10 * time.Second
	concurrencyWait  = 2 * concurrencyLease
)

// limited reports whether c limits runs, and so whether starts take the
// lease.
func limited(c Concurrency) bool { return c.Limit > 0 && c.Overlap != OverlapAllow }

// queues reports whether c queues the runs over its limit.
func queues(c Concurrency) bool { return limited(c) && c.Overlap != OverlapSkip }

// concurrencyKey is the key of the workflow's lease in agentwork_locks.
func concurrencyKey(name string) string { return "workflow." + name + ".concurrency" }

// slotRecord is the lease's record.
type slotRecord struct {
	bus.Lease
	Workflow string `json:"workflow"`
	Run      string `json:"run,omitempty"` // the run being started; "" for a release
}

// slotHold is a held lease of a workflow.
type slotHold struct {
	e   *Engine
	key string
	rec slotRecord
	rev uint64
}

// hold takes the lease of workflow name, waiting while another start or
// release holds it.
func (e *Engine) hold(ctx context.Context, name, run string) (*slotHold, error) {
	key := concurrencyKey(name)
	h := &slotHold{e: e, key: key, rec: slotRecord{Workflow: name, Run: run}}
	rev, err := bus.AcquireWait(ctx, e.bus, e.bus.Locks, key, concurrencyLease, concurrencyWait, &h.rec, nil)
	switch {
	case errors.As(err, new(*bus.HeldError)):
		return nil, fmt.Errorf("workflow %s: other starts kept its concurrency lease for %s (runs are counted one start at a time): try again later", name, concurrencyWait)
	case err != nil:
		return nil, fmt.Errorf("workflow %s: the runs in flight cannot be counted now (%w); try again later", name, err)
	}
	h.rev = rev
	return h, nil
}

// check fences a write made under the lease: it renews the lease by
// compare-and-set at the revision it was taken (or last renewed) at, right
// before the write. When another start or release took the lease over
// meanwhile (this one stalled past its lease), the count may be stale and
// the renewal fails: nothing is written. A lease that lapsed with nobody
// taking it over is renewed: nobody counted in between. The window left:
// the runs are another bucket, so their write cannot be conditional on
// the lease's revision; only a stall of longer than concurrencyLease
// between the renewal and the write landing lets another count without it.
func (h *slotHold) check(ctx context.Context) error {
	rev, err := bus.Renew(ctx, h.e.bus.Locks, h.key, &h.rec, h.rev, concurrencyLease)
	switch {
	case errors.As(err, new(*bus.HeldError)):
		return fmt.Errorf("workflow %s: the runs in flight could not be counted in time (another start took the count over); try again later", h.rec.Workflow)
	case err != nil:
		return fmt.Errorf("workflow %s: the runs in flight cannot be counted now (%w); try again later", h.rec.Workflow, err)
	}
	h.rev = rev
	return nil
}

// release gives the lease back (it expires on its own if this fails).
func (h *slotHold) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.Release(ctx, h.e.bus.Locks, h.key, h.rec.Token, h.rev); err != nil && !errors.As(err, new(*bus.HeldError)) {
		h.e.log.Warn("a workflow's concurrency lease was not released; it expires on its own", zap.String("workflow", h.rec.Workflow), zap.Error(err))
	}
}

// census is what a workflow's runs are, read under its lease.
type census struct {
	inFlight []record // pending, running, waiting
	queued   []record // oldest first
	revs     map[string]uint64
	gone     []string // ids of the index whose runs ended or are no more
}

// inflightKey is the key, in agentwork_locks, of the index of workflow
// name's runs not ended: the ids of its pending, running, waiting and
// queued runs (and, until a count drops them, of some that ended since).
func inflightKey(name string) string { return "workflow." + name + ".runs" }

// inflight is the index's record.
type inflight struct {
	Runs []string `json:"runs"`
}

// track changes the index of workflow name: add ids, drop ids (compare-
// and-set, merged with what others wrote meanwhile).
func (e *Engine) track(ctx context.Context, name string, add, drop []string) error {
	if len(add)+len(drop) == 0 {
		return nil
	}
	_, _, err := bus.Update(ctx, e.bus.Locks, inflightKey(name), func(v *inflight, _ bool) (bool, error) {
		v.Runs = slices.DeleteFunc(v.Runs, func(id string) bool { return slices.Contains(drop, id) })
		for _, id := range add {
			if !slices.Contains(v.Runs, id) {
				v.Runs = append(v.Runs, id)
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("workflow %s: index the runs in flight: %w", name, err)
	}
	return nil
}

// indexed returns the ids of the index of workflow name. Without an
// index (the first start after an upgrade before Run built it, or one
// that expired with agentwork_locks' TTL after a week without starts) it
// is built from the runs bucket, once: to the end even when ctx ends
// first (a caller's short deadline), so that the next start finds it.
func (e *Engine) indexed(ctx context.Context, name string) ([]string, error) {
	v, rev, err := bus.Update(ctx, e.bus.Locks, inflightKey(name), func(*inflight, bool) (bool, error) { return false, nil })
	if err != nil && !errors.As(err, new(*bus.CorruptError)) {
		return nil, fmt.Errorf("workflow %s: read the index of the runs in flight: %w", name, err)
	}
	if err == nil && rev != 0 {
		return v.Runs, nil
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), indexBuild)
	defer cancel()
	built, err := e.buildIndexes(bctx, []string{name})
	if err != nil {
		return nil, err
	}
	return built[name], ctx.Err()
}

// indexBuild bounds the building of indexes from the runs bucket.
const indexBuild = 5 * time.Minute

// buildIndexes reads every run once and adds those not ended of the
// workflows names to their indexes (merged with what is there). It
// returns the indexes as written.
func (e *Engine) buildIndexes(ctx context.Context, names []string) (map[string][]string, error) {
	found := map[string][]string{}
	keys, err := e.bus.Keys(ctx, e.bus.WorkflowRuns, ">")
	if err != nil {
		return nil, fmt.Errorf("workflow: index the runs in flight: %w", err)
	}
	for _, key := range keys {
		rec, _, err := e.read(ctx, key)
		if errors.Is(err, ErrNoRun) || errors.As(err, new(*bus.CorruptError)) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if slices.Contains(names, rec.Workflow) && !rec.Status.Ended() {
			found[rec.Workflow] = append(found[rec.Workflow], rec.ID)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, name := range names {
		ids := found[name]
		v, _, err := bus.Update(ctx, e.bus.Locks, inflightKey(name), func(v *inflight, _ bool) (bool, error) {
			for _, id := range ids {
				if !slices.Contains(v.Runs, id) {
					v.Runs = append(v.Runs, id)
				}
			}
			if v.Runs == nil {
				v.Runs = []string{}
			}
			return true, nil
		})
		if err != nil {
			return nil, fmt.Errorf("workflow %s: index the runs in flight: %w", name, err)
		}
		out[name] = v.Runs
		e.log.Info("index of a workflow's runs in flight built from the runs", zap.String("workflow", name), zap.Int("runs", len(v.Runs)))
	}
	return out, nil
}

// count reads the runs of workflow name that are not ended: those its
// index names (one key), each read from the bucket, not a cache, so a
// run another instance stored or ended a moment ago counts as it is.
// The ids of runs that ended are in gone, for the caller to drop.
func (e *Engine) count(ctx context.Context, name string) (census, error) {
	c := census{revs: map[string]uint64{}}
	ids, err := e.indexed(ctx, name)
	if err != nil {
		return c, err
	}
	for _, id := range ids {
		rec, rev, err := e.read(ctx, id)
		if errors.Is(err, ErrNoRun) || errors.As(err, new(*bus.CorruptError)) {
			c.gone = append(c.gone, id)
			continue
		}
		if err != nil {
			return c, err
		}
		switch {
		case rec.Workflow != name:
			c.gone = append(c.gone, id)
		case rec.Status == RunPending, rec.Status == RunRunning, rec.Status == RunWaiting:
			c.inFlight = append(c.inFlight, rec)
		case rec.Status == RunQueued:
			c.queued = append(c.queued, rec)
			c.revs[rec.ID] = rev
		default:
			c.gone = append(c.gone, id)
		}
	}
	slices.SortFunc(c.queued, func(a, b record) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return c, ctx.Err()
}

// admit stores the new run under its workflow's concurrency: pending (and
// its start command) below the limit; at the limit, skipped (with its
// event) or queued, as the workflow's overlap says.
func (e *Engine) admit(ctx context.Context, run Run) (Run, bool, error) {
	c := run.Def.Concurrency
	if !limited(c) {
		return e.create(ctx, run)
	}
	if rec, _, err := e.read(ctx, run.ID); err == nil {
		// A repeated start (the same idempotency key): that run, its start
		// command or skipped event made again if they were lost.
		return e.stored(ctx, rec.Run)
	}
	// The index is read (built, if need be) before the lease is taken:
	// building it may take longer than the lease.
	if _, err := e.indexed(ctx, run.Workflow); err != nil {
		return Run{}, false, err
	}
	h, err := e.hold(ctx, run.Workflow, run.ID)
	if err != nil {
		return Run{}, false, err
	}
	defer h.release()
	cen, err := e.count(ctx, run.Workflow)
	if err != nil {
		return Run{}, false, err
	}
	if err := h.check(ctx); err != nil {
		return Run{}, false, err
	}
	if n := len(cen.inFlight); n >= c.Limit {
		if c.Overlap == OverlapSkip {
			run.Status, run.EndedAt = RunSkipped, run.CreatedAt
			run.Error = &StepError{Kind: ErrBusy, Message: fmt.Sprintf("not started: workflow %s has %d runs in flight, its concurrency limit (overlap skip)", run.Workflow, n)}
		} else {
			run.Status = RunQueued
		}
	}
	if run.Status != RunSkipped {
		// Indexed before it is stored: a crash in between leaves an id
		// without a run, which the next count drops.
		if err := e.track(ctx, run.Workflow, []string{run.ID}, cen.gone); err != nil {
			return Run{}, false, err
		}
		return e.create(ctx, run)
	}
	if err := e.track(ctx, run.Workflow, nil, cen.gone); err != nil {
		e.log.Debug("ended runs left in the index of runs in flight; the next count drops them", zap.String("workflow", run.Workflow), zap.Error(err))
	}
	created := true
	rec, _, err := bus.UpdateAtExpiring(ctx, e.bus, e.bus.WorkflowRuns, run.ID, record{Run: run}, 0, bus.WorkflowRunTTL, func(*record, bool) (bool, error) {
		created = false
		return false, nil
	})
	if err != nil {
		return Run{}, false, fmt.Errorf("workflow: store run %s: %w", run.ID, err)
	}
	_, _, err = e.stored(ctx, rec.Run)
	return rec.Run, created, err
}

// stored carries out again what the storing of run asked for: the start
// command of a pending run, the skipped event of a skipped one.
func (e *Engine) stored(ctx context.Context, run Run) (Run, bool, error) {
	switch run.Status {
	case RunPending:
		return run, false, e.command(ctx, "start", run.Workflow, command{Run: run.ID}, run.ID)
	case RunSkipped:
		if run.Error != nil && run.Error.Kind == ErrMissed {
			return run, false, nil // a missed tick's (Forgo): the scheduler said so
		}
		return run, false, e.emitSkipped(ctx, run)
	}
	return run, false, nil
}

// emitSkipped publishes the skipped event of run (once: its id is the
// run's).
func (e *Engine) emitSkipped(ctx context.Context, run Run) error {
	data := map[string]any{"status": string(RunSkipped), "reason": ReasonBusy, "limit": run.Def.Concurrency.Limit}
	if run.Error != nil {
		data["error"] = map[string]any{"kind": string(run.Error.Kind), "message": run.Error.Message}
	}
	if run.Cause.Kind != "" {
		data["cause"] = map[string]any{"kind": run.Cause.Kind, "id": run.Cause.ID}
	}
	return e.emit(ctx, run, Emit{IdempotencyKey: fmt.Sprintf("wf.%s.g%d.skipped", run.ID, run.Gen), Outcome: string(RunSkipped), Subject: run.Workflow, Data: data})
}

// afterEmit follows the emit of an event of run: the end event of a run
// of a workflow that queues releases its queued runs. It runs where the
// end event is carried out, in the outbox of the write that ended the
// run, so a crash in between repeats it.
func (e *Engine) afterEmit(ctx context.Context, run Run, em Emit) error {
	if !RunStatus(em.Outcome).Ended() || !run.Status.Ended() {
		return nil
	}
	c := run.Def.Concurrency
	if def := e.cfg.Definitions[run.Workflow]; def != nil {
		c = def.Concurrency // the workflow as the config says now
	}
	if !queues(c) && !queues(run.Def.Concurrency) {
		return nil
	}
	return e.releaseQueued(ctx, run.Workflow, c)
}

// releaseQueued starts the oldest queued runs of workflow name that fit
// under c (all of them when c does not limit), and makes again the start
// commands of its pending runs (one may have been lost with a crash
// between its release and its command).
func (e *Engine) releaseQueued(ctx context.Context, name string, c Concurrency) error {
	h, err := e.hold(ctx, name, "")
	if err != nil {
		return err
	}
	defer h.release()
	cen, err := e.count(ctx, name)
	if err != nil {
		return err
	}
	if err := e.track(ctx, name, nil, cen.gone); err != nil {
		return err
	}
	for _, r := range cen.inFlight {
		if r.Status == RunPending {
			if err := e.command(ctx, "start", r.Workflow, command{Run: r.ID}, r.ID); err != nil {
				return err
			}
		}
	}
	free := len(cen.queued)
	if limited(c) {
		free = min(free, c.Limit-len(cen.inFlight))
	}
	for _, r := range cen.queued[:max(free, 0)] {
		if err := h.check(ctx); err != nil {
			return err
		}
		rec := r
		rec.Status, rec.UpdatedAt = RunPending, e.now()
		_, _, err := bus.UpdateAt(ctx, e.bus.WorkflowRuns, rec.ID, rec, cen.revs[rec.ID], func(*record, bool) (bool, error) {
			return false, errConflict
		})
		if errors.Is(err, errConflict) {
			continue // cancelled meanwhile
		}
		if err != nil {
			return fmt.Errorf("workflow %s: start queued run %s: %w", name, rec.ID, err)
		}
		if err := e.command(ctx, "start", rec.Workflow, command{Run: rec.ID}, rec.ID); err != nil {
			return err
		}
		e.log.Info("queued run released", zap.String("workflow", name), zap.String("run", rec.ID))
	}
	return nil
}

// releaseAll looks once, at start, for queued runs, and releases those of
// each workflow that has some: a limit raised or lifted in the config lets
// them through, and a release a crash cut short is made.
func (e *Engine) releaseAll(ctx context.Context) {
	// The limited workflows without an index of their runs in flight (the
	// first start after an upgrade) get theirs now, so their starts need
	// not build it.
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(e.cfg.Definitions)) {
		if !limited(e.cfg.Definitions[name].Concurrency) {
			continue
		}
		if _, rev, err := bus.Update(ctx, e.bus.Locks, inflightKey(name), func(*inflight, bool) (bool, error) { return false, nil }); err == nil && rev == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		if _, err := e.buildIndexes(ctx, missing); err != nil && ctx.Err() == nil {
			e.log.Warn("indexes of runs in flight not built at start (bus trouble?); the next start of each workflow builds its own", zap.Strings("workflows", missing), zap.Error(err))
		}
	}
	keys, err := e.bus.Keys(ctx, e.bus.WorkflowRuns, ">")
	if err != nil {
		e.log.Warn("queued runs not looked for at start (bus trouble?); the next end of a run of their workflow releases them", zap.Error(err))
		return
	}
	waiting := map[string]Concurrency{}
	for _, key := range keys {
		rec, _, err := e.read(ctx, key)
		if err != nil || rec.Status != RunQueued {
			continue
		}
		c := rec.Def.Concurrency
		if def := e.cfg.Definitions[rec.Workflow]; def != nil {
			c = def.Concurrency
		}
		waiting[rec.Workflow] = c
	}
	for _, name := range slices.Sorted(maps.Keys(waiting)) {
		if err := e.releaseQueued(ctx, name, waiting[name]); err != nil && ctx.Err() == nil {
			e.log.Warn("queued runs not released at start (bus trouble?); the next end of a run of the workflow does", zap.String("workflow", name), zap.Error(err))
		}
	}
}
