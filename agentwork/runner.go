package agentwork

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// ConsumerName is the durable consumer all runners share.
const ConsumerName = "runner"

// inflightRecheck is when a copy of a request this process is running is
// looked at again.
const inflightRecheck = time.Second

// Runner runs requests from the bus. Register a Policy per source with
// Handle, then call Run. A request of a source without a policy ends with an
// error event.
type Runner struct {
	bus       *bus.Bus
	provider  model.Provider
	models    map[string]model.Provider // by name, beside provider (model.DefaultName); see WithModels
	tools     *tools.Registry
	sources   []tools.Source    // tools that change while running (MCP servers)
	secrets   []string          // cut out of the tool calls on record
	memory    Memory            // the agent's memory, for the prompt (nil: none)
	approvals *approval.Service // gated tool calls ask through it (nil: refused)
	cfg       Config
	log       *zap.Logger
	now       func() time.Time

	maxConversation int // bytes of conversation a claim keeps; 0: see conversationMax

	mu       sync.RWMutex
	policies map[string]Policy
	targets  []string // all connector names, for validation and the default

	inflight sync.Map // request id -> struct{}

	worker atomic.Pointer[bus.Worker] // set by Run
}

// ErrNotConsuming is what Ready reports while the runner takes no requests.
var ErrNotConsuming = errors.New("runner: not consuming requests")

// Ready reports nil while Run is taking requests: after its consumer is
// set up and until shutdown begins; else ErrNotConsuming. It answers at
// once. For readiness probes (an api.Readier).
func (r *Runner) Ready(context.Context) error {
	if w := r.worker.Load(); w == nil || w.Ready() != nil {
		return ErrNotConsuming
	}
	return nil
}

// Option configures a Runner.
type Option func(*Runner)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(r *Runner) { r.log = l } }

// WithClock sets the time source (default time.Now).
func WithClock(now func() time.Time) Option { return func(r *Runner) { r.now = now } }

// WithConnectors names the connectors that exist; requests may target only
// these, and they are the default targets when Config.Targets is empty.
func WithConnectors(names ...string) Option {
	return func(r *Runner) { r.targets = append([]string(nil), names...) }
}

// WithToolSource adds tools that may change while the runner runs, such
// as those of MCP servers (an mcp.Manager): every run looks at what src
// offers as it starts. A name the registry or an earlier source has is
// left out.
func WithToolSource(src tools.Source) Option {
	return func(r *Runner) { r.sources = append(r.sources, src) }
}

// WithSecrets sets values, such as the API keys and tokens of the config,
// that are cut out (in every form secret.Redact knows) of what leaves a
// run: the tool results and errors the model reads, the notifications
// queued, and the run's event (its text, reply, error and tool calls).
func WithSecrets(secrets ...string) Option {
	return func(r *Runner) { r.secrets = append(r.secrets, secrets...) }
}

// WithMemory gives the runs the agent's memory: the system prompt of a run
// whose memory setting (runner.memory, a policy's, a job's or task's) is
// light or full holds that much of it.
func WithMemory(m Memory) Option { return func(r *Runner) { r.memory = m } }

// NewRunner returns a runner whose runs may use the tools of reg (and of
// the sources added by WithToolSource), each run those in its scope. It
// does no I/O.
func NewRunner(b *bus.Bus, p model.Provider, reg *tools.Registry, cfg Config, opts ...Option) *Runner {
	r := &Runner{bus: b, provider: p, tools: reg, cfg: cfg.withDefaults(), log: zap.NewNop(), now: time.Now, policies: map[string]Policy{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Handle sets the policy of source. Safe to call while running.
func (r *Runner) Handle(source string, p Policy) {
	r.mu.Lock()
	r.policies[source] = p
	r.mu.Unlock()
}

func (r *Runner) policy(source string) (Policy, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.policies[source]
	return p, ok
}

// Run consumes requests until ctx is done. Then it stops taking new ones,
// lets runs in flight finish within ShutdownGrace, puts the rest back for
// another instance, and returns. It returns an error when the consumer
// cannot be created or is lost (deleted) while running.
func (r *Runner) Run(ctx context.Context) error {
	w, err := bus.NewWorker(r.bus.JetStream(), bus.WorkerConfig{
		Stream: bus.StreamRequests,
		Consumer: jetstream.ConsumerConfig{
			Durable:       ConsumerName,
			Description:   "agentwork runners (shared by all instances)",
			FilterSubject: r.bus.Subjects.Requests(),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       r.cfg.AckWait,
			MaxAckPending: 10000,
		},
		Concurrency: r.cfg.Concurrency,
		// Pulled ahead Concurrency at a time, to save round trips. A request
		// that waits in the client's buffer for longer than AckWait (no
		// progress is signalled there) goes to another instance meanwhile;
		// its run claim keeps it from running twice.
		PullMax: r.cfg.Concurrency,
		// A done claim lasts bus.SettledTTL: a consumer created anew (lost,
		// deleted) must not run again the week of requests the stream keeps.
		ReplayHorizon: bus.ReplayHorizon,
		ShutdownGrace: r.cfg.ShutdownGrace,
		PanicDelay:    r.cfg.Backoff[0],
		DoubleAck:     true,
		Log:           r.log,
	}, r.handle)
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	r.worker.Store(w)
	if err := w.Run(ctx); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return nil
}

// handle runs one message to its end and returns how to settle it: done
// (acked), retried or deferred (nak'ed with a delay, after settling the
// claim accordingly) or terminated.
func (r *Runner) handle(ctx context.Context, m jetstream.Msg) (v bus.Verdict) {
	ev, req, err := DecodeRequest(r.bus, m.Subject(), m.Data())
	if err != nil {
		source, name, _ := r.bus.Subjects.ParseRequest(m.Subject())
		req = Request{Source: bus.Token(source), Name: bus.Token(name)}
		req.ID = ev.ID
		if req.ID == "" {
			// No envelope id to point at: the publisher's Nats-Msg-Id is
			// what it knows the request by.
			req.ID = m.Headers().Get(jetstream.MsgIDHeader)
		}
		run := &Run{ID: newRunID(), Request: req, Envelope: ev, Started: r.now()}
		r.fail(ctx, run, model.ClassPermanent, fmt.Errorf("malformed request: %w", err))
		return termAfterEvent(run)
	}
	var resume string // the approval this request says was decided
	if req.Resumes != "" {
		// An approval was decided: the run of request req.Resumes, parked
		// on it, goes on.
		if req.Approval == nil || req.Approval.ID == "" {
			r.log.Warn("a resume without its approval; dropped", zap.String("request", req.ID), zap.String("resumes", req.Resumes))
			return bus.Terminate()
		}
		resume = req.Approval.ID
		req.ID = req.Resumes
	}
	if _, busy := r.inflight.LoadOrStore(req.ID, struct{}{}); busy {
		// This process is running the request already: this is a
		// redelivery of that message, or the same request stored again
		// under another Nats-Msg-Id. Look again shortly; once the run has
		// settled its claim, a done claim acks this copy.
		return bus.Defer(inflightRecheck)
	}
	defer r.inflight.Delete(req.ID)
	log := r.log.With(zap.String("source", req.Source), zap.String("name", req.Name), zap.String("request", req.ID))

	pol, ok := r.policy(req.Source)
	if !ok {
		run := &Run{ID: newRunID(), Request: req, Envelope: ev, Started: r.now(), Attempt: 1}
		r.fail(ctx, run, model.ClassPermanent, fmt.Errorf("unknown source %q: no trigger handles it", req.Source))
		return termAfterEvent(run)
	}
	// The claim is a short lease renewed while the run lives, so a request
	// whose instance crashed is run again within about one lease.
	lease := r.claimLease()
	cr, err := r.takeClaim(ctx, req.ID, lease, resume)
	if err != nil {
		if r.storeFull(err) {
			log.Debug("store full; the request waits", zap.Error(err))
			return bus.Defer(r.cfg.Backoff[0])
		}
		log.Warn("claim failed; will retry", zap.Error(err))
		return bus.Defer(time.Second)
	}
	if !cr.proceed {
		switch {
		case cr.claim.State == claimDone:
			log.Debug("already finished; acking redelivery", zap.String("run", cr.claim.RunID))
			return bus.Done()
		case cr.claim.State == claimParked:
			// It waits for a person; this copy (a redelivery, a stale
			// resume) changes nothing.
			log.Debug("parked on an approval; acking", zap.String("run", cr.claim.RunID), zap.String("approval", cr.claim.Parked))
			return bus.Done()
		case cr.missing:
			// The run's claim, and its conversation, are gone (it waited
			// longer than the locks bucket keeps a record): it cannot go on.
			run := &Run{ID: newRunID(), Request: req, Envelope: ev, Started: r.now(), Attempt: 1}
			if r.approvals != nil {
				if a, gerr := r.approvals.Get(ctx, resume); gerr == nil && a.Run != "" {
					run.ID = a.Run
				}
			}
			r.fail(ctx, run, model.ClassPermanent, fmt.Errorf("approval %s was decided, but its run's checkpoint is gone (a run waits at most %s); the run cannot go on", resume, MaxParked))
			return termAfterEvent(run)
		}
		return bus.Defer(min(cr.wait, r.cfg.AckWait))
	}
	if resume != "" {
		rq, err := r.resumedRequest(ctx, req)
		if err != nil {
			log.Warn("resumed run's request not read; will retry", zap.String("approval", resume), zap.Error(err))
			if err := r.settleClaim(context.WithoutCancel(ctx), req.ID, r.reparked(cr.claim, resume), claimParked, ""); err != nil {
				log.Warn("release claim", zap.Error(err))
			}
			return bus.Defer(r.cfg.Backoff[0])
		}
		req = rq
	}
	run := &Run{ID: cr.claim.RunID, Request: req, Envelope: ev, Attempt: cr.claim.Attempts, Started: r.now(), resumed: resume}
	if cp := cr.claim.Checkpoint; cp != nil && cp.Result == nil {
		// The model calls of the tries before, which its event lists too.
		run.calls = modelCalls{List: slices.Clone(cp.ModelCalls), Omitted: cp.ModelCallsOmitted}
	}
	run.Targets = r.targetsFor(req, pol)
	run.Overlap = pol.Overlap.Mode
	held := r.holdClaim(ctx, req.ID, cr.claim, lease)
	if cp := cr.claim.Checkpoint; run.Attempt > r.cfg.MaxAttempts && (cp == nil || cp.Result == nil) {
		// Only takeovers get here (a run that decided its outcome only
		// re-queues and emits it, which calls no model: it may go on; one
		// that goes on from its conversation calls the model and tools
		// again): the request's runs kept dying with their instance. Stop,
		// say so, and do not take the next instance down.
		out := r.failWithAlert(ctx, run, pol, model.ClassPermanent,
			fmt.Errorf("the run was interrupted %d times (its instance stopped or crashed each time); giving up", run.Attempt-1))
		if run.emitErr != nil {
			// Its event did not get out: keep the result and come back to
			// emit it (a resume calls no model, so this cannot crash again).
			held.keepResult(run.Result)
			if err := r.settleClaim(context.WithoutCancel(ctx), req.ID, held.release(), claimDeferred, ""); err != nil {
				log.Warn("release claim", zap.Error(err))
			}
			return bus.Defer(eventRetry)
		}
		if err := r.settleClaim(context.WithoutCancel(ctx), req.ID, held.release(), claimDone, out); err != nil {
			log.Warn("settle claim", zap.Error(err))
		}
		return bus.Terminate()
	}
	defer held.release()
	defer func() {
		// A panic in a gate, the provider or an observer is a bug that a
		// retry would only repeat: end the run with its one error event
		// (unless it had emitted already) and settle the request, instead
		// of leaving a running claim that holds the redeliveries off until
		// it expires and then panics again.
		p := recover()
		if p == nil {
			return
		}
		log.Error("run panicked", zap.Any("panic", p), zap.Stack("stack"))
		sctx := context.WithoutCancel(ctx)
		outcome := bus.OutcomeError
		if run.Result == nil {
			r.fail(sctx, run, model.ClassPermanent, fmt.Errorf("run panicked (a bug in a gate, tool, provider or observer): %v", p))
		} else {
			outcome = run.Result.Outcome
		}
		if err := r.settleClaim(sctx, req.ID, held.release(), claimDone, outcome); err != nil {
			log.Warn("settle claim", zap.Error(err))
		}
		v = bus.Done()
	}()
	v = r.execute(ctx, log, run, pol, held, lease)
	if run.parked != "" && v.Kind() == bus.VerdictDone {
		// A gated call waits for a person: the claim keeps the
		// conversation (the call held) and says which approval it waits
		// for; the message is settled, and nothing holds a slot.
		c := held.release()
		c.Parked = run.parked
		if err := r.settleClaim(context.WithoutCancel(ctx), req.ID, c, claimParked, ""); err != nil {
			// Still running on the bus: once its lease lapses, this
			// message, back, takes it over and parks it again.
			log.Warn("park the run", zap.Error(err))
			return bus.Defer(r.cfg.Backoff[0])
		}
		log.Info("run parked: a tool call waits for approval", zap.String("run", run.ID), zap.String("approval", run.parked))
		return bus.Done()
	}
	if v.Kind() == bus.VerdictDone && run.emitErr != nil {
		// The run ended but its event did not get out (the events stream is
		// unavailable). Keep the result and put the request back: the next
		// delivery only emits the event (same id, so stored once).
		held.keepResult(run.Result)
		log.Warn("run event not published; will emit it again", zap.Error(run.emitErr))
		v = bus.Defer(eventRetry)
	}
	if v.Kind() != bus.VerdictDone {
		state := claimRetry
		if v.Kind() == bus.VerdictDefer {
			state = claimDeferred
		}
		if err := r.settleClaim(context.WithoutCancel(ctx), req.ID, keepModelCalls(held.release(), run), state, ""); err != nil {
			log.Warn("release claim", zap.Error(err))
		}
		return v
	}
	outcome := run.Result.Outcome // every done run has emitted its result
	if err := r.settleClaim(context.WithoutCancel(ctx), req.ID, held.release(), claimDone, outcome); err != nil {
		log.Warn("settle claim", zap.Error(err))
	}
	if pol.Observer != nil {
		pol.Observer.Observe(run, outcome)
	}
	return bus.Done()
}

// termAfterEvent terminates a request that can never run, once its error
// event is stored; if the event could not be published, the request comes
// back to emit it (its run id is derived from the request, so it is stored
// once).
func termAfterEvent(run *Run) bus.Verdict {
	if run.emitErr != nil {
		return bus.Defer(eventRetry)
	}
	return bus.Terminate()
}

// eventRetry is how soon a run whose event could not be published is
// delivered again to emit it.
const eventRetry = 5 * time.Second

// execute does the pipeline. It returns done once the run has emitted its
// event (run.Result), or a retry (the try used up one of MaxAttempts: a
// model or queueing failure) or a deferral (it did not: a gate said later,
// a shutdown, a bus outage) when the request should be redelivered after a
// delay without an event.
func (r *Runner) execute(ctx context.Context, log *zap.Logger, run *Run, pol Policy, held *heldClaim, lease time.Duration) bus.Verdict {
	if cp := held.checkpoint(); cp != nil && cp.Result != nil {
		return r.resume(ctx, log, run, pol, cp)
	}
	// 1. Input gates, then the overlap lease.
	// Leases taken by input gates are released before the run's event is
	// emitted (see emit), so work started on seeing the event finds them free.
	var taken []Releaser
	run.release = func() {
		for _, g := range taken {
			g.Release(context.WithoutCancel(ctx), run)
		}
		taken = nil
	}
	defer run.release()
	// Last, once the policy's gates let the run go ahead: the overlap
	// lease, held under the run claim.
	input := append(pol.Input[:len(pol.Input):len(pol.Input)], overlapGate{r: r, pol: pol.Overlap, held: held, lease: lease})
	if run.resumed != "" {
		// It passed them when it started; now it goes on with the call a
		// person decided on, whatever the hour (and holds no overlap
		// lease: it held none while parked either).
		input = nil
	}
	for _, g := range input {
		err := g.Check(ctx, run)
		if err == nil {
			if rel, ok := g.(Releaser); ok {
				taken = append(taken, rel)
			}
			continue
		}
		var d *DeferError
		if errors.As(err, &d) {
			after := max(d.After, 100*time.Millisecond) // never a tight loop, never "no retry"
			log.Debug("deferred", zap.String("reason", d.Reason), zap.Duration("after", after))
			return bus.Defer(after)
		}
		if s, ok := AsSkip(err); ok {
			r.skip(ctx, run, s)
			return bus.Done()
		}
		return r.gateFailed(ctx, log, run, pol, fmt.Errorf("input gate: %w", err))
	}

	// A request whose targets are all unknown can never be delivered: say
	// so before spending model calls, and do not retry.
	if unknown := r.unknownTargets(run.Targets); len(unknown) > 0 && len(unknown) == len(run.Targets) {
		r.fail(ctx, run, model.ClassPermanent, fmt.Errorf("targets %v: no such connector (configured: %v); fix the request's or the source's targets", unknown, r.targets))
		return bus.Done()
	}

	// 2. Model and tools, with progress signals so JetStream does not
	// redeliver: the tools in the run's scope, as they are now. The tool
	// loop keeps its conversation in the claim as it goes (see
	// claimJournal), and a run that has one goes on from it: no tool call
	// that finished is made again, no reply the model gave asked again.
	set, err := r.settings(ctx, run, pol)
	if err != nil {
		return r.gateFailed(ctx, log, run, pol, err)
	}
	ts := r.toolset(run, pol, set)
	var from *tools.State
	var fm *flushMark
	if cp := held.checkpoint(); cp != nil && cp.Conversation != nil {
		s := unpackState(cp.Conversation)
		from, fm = &s, cp.Flush
		run.approvals = slices.Clone(cp.Approvals)
		log.Info("going on from the run's checkpoint", zap.String("run", run.ID), zap.Int("steps", s.Steps), zap.Int("tool_calls", len(s.Calls)), zap.Bool("flush", fm != nil))
	}
	out, err := r.callModel(ctx, run, pol, set, ts, from, fm, claimJournal{r: r, run: run, held: held, requestID: run.Request.ID, lease: lease})
	out = r.sendable(out)
	run.Output = &out // also on error: the tokens spent are reported
	if errors.Is(err, tools.ErrWaiting) && run.parked != "" {
		return bus.Done() // handle parks it
	}
	run.parked = ""
	if err != nil {
		if ctx.Err() != nil {
			log.Info("run interrupted by shutdown; putting the request back")
			return bus.Defer(0)
		}
		var big *tooLargeError
		switch {
		case errors.As(err, &big):
			r.failWithAlert(ctx, run, pol, model.ClassPermanent, big)
			return bus.Done()
		case errors.Is(err, errCheckpoint) && held.lost():
			// Another instance took the run over while this one looked
			// dead: it goes on from the last checkpoint; leave it the run.
			log.Warn("run taken over by another instance; leaving it the run", zap.Error(err))
			return bus.Defer(r.cfg.Backoff[0])
		case errors.Is(err, errCheckpoint):
			return r.gateFailed(ctx, log, run, pol, err)
		}
		class := model.Classify(err)
		if errors.Is(err, tools.ErrMaxSteps) {
			class = model.ClassPermanent
		}
		if class != model.ClassPermanent && run.Attempt < r.cfg.MaxAttempts {
			delay := r.cfg.Backoff[min(run.Attempt-1, len(r.cfg.Backoff)-1)]
			delay = max(delay, model.RetryAfter(err))
			log.Warn("model call failed; will retry", zap.String("class", string(class)), zap.Int("attempt", run.Attempt), zap.Duration("retry_in", delay), zap.Error(err))
			return bus.Retry(delay)
		}
		r.failWithAlert(ctx, run, pol, class, err)
		return bus.Done()
	}

	// 3. Output gates.
	gates := pol.Output
	if len(gates) == 0 {
		gates = r.defaultGates()
	}
	for _, g := range gates {
		if err := g.Inspect(ctx, run, out); err != nil {
			r.releaseDedup(ctx, run)
			if s, ok := AsSkip(err); ok {
				r.skip(ctx, run, s)
				return bus.Done()
			}
			return r.gateFailed(ctx, log, run, pol, fmt.Errorf("output gate: %w", err))
		}
	}

	// The done event, prepared now: with the notice it is checkpointed in
	// the claim before anything is queued, so a retry (a target that could
	// not be queued, a crash) queues and reports exactly this.
	res := r.result(run, bus.OutcomeDone)
	res.Reply = out.Text
	res.StopReason, res.ReplyTruncated = out.StopReason, out.Truncated
	if run.Notice != nil {
		known := r.knownTargets(run)
		res.Text, res.Urgency, res.Targets, res.Truncated = run.Notice.Text, run.Notice.Urgency, known, run.Notice.Truncated
		for _, t := range known {
			res.NotificationIDs = append(res.NotificationIDs, connectors.NotificationID(run.ID, "", t))
		}
		cp := &checkpoint{Result: res, Notice: run.Notice, Targets: run.Targets}
		r.fit(run, res, r.eventMax()-jsonSize(cp.Notice)-jsonSize(cp.Targets))
		if err := held.save(ctx, r, run.Request.ID, cp, lease); err != nil {
			if !held.lost() {
				// Another instance that took the run over (same run id)
				// may own this key now: only release what is still ours.
				r.releaseDedup(ctx, run)
			}
			return r.gateFailed(ctx, log, run, pol, fmt.Errorf("checkpoint: %w", err))
		}
	}
	return r.finish(ctx, log, run, pol, res)
}

// resume finishes a run from its checkpoint: nothing before it runs again.
func (r *Runner) resume(ctx context.Context, log *zap.Logger, run *Run, pol Policy, cp *checkpoint) bus.Verdict {
	log.Info("resuming a run from its checkpoint", zap.String("run", run.ID), zap.String("outcome", cp.Result.Outcome))
	run.Notice, run.Targets = cp.Notice, cp.Targets
	if run.release != nil {
		run.release() // no input gate ran; nothing to hold
	}
	return r.finish(ctx, log, run, pol, cp.Result)
}

// finish queues the run's notice (idempotent: notification ids are
// Nats-Msg-Ids) and emits its event.
func (r *Runner) finish(ctx context.Context, log *zap.Logger, run *Run, pol Policy, res *Result) bus.Verdict {
	if run.Notice != nil {
		if _, err := r.enqueue(ctx, run, run.Notice.Text, run.Notice.Urgency, ""); err != nil {
			// Some targets may be queued already: keep the dedup key (the
			// checkpoint retries this very notice) and try again.
			return r.gateFailed(ctx, log, run, pol, fmt.Errorf("queue notification: %w", err))
		}
	}
	r.emit(ctx, run, res)
	return bus.Done()
}

// gateFailed handles an error that is not a decision: a gate, or the bus
// under it, could not answer. The work is not dropped: the request goes back
// with backoff and counts an attempt; after the last one the run fails with
// an error event (and an alert). At shutdown the request is put back as is.
func (r *Runner) gateFailed(ctx context.Context, log *zap.Logger, run *Run, pol Policy, err error) bus.Verdict {
	if ctx.Err() != nil {
		return bus.Defer(0)
	}
	if r.storeFull(err) {
		// The store has no space: the request is safe in its stream and
		// waits, without spending attempts, until space is freed. The bus
		// logged the state once; a line per request would bury it.
		log.Debug("store full; the request waits", zap.Error(err))
		return bus.Defer(r.cfg.Backoff[0])
	}
	if busUnreachable(err) && r.bus.Ready(ctx) != nil {
		// The bus itself does not answer (and a readiness ping agrees): the
		// request is safe in its stream, so wait for the bus without
		// spending attempts, however long the outage lasts, instead of
		// failing work that will run fine later. Errors the bus answers
		// with, and timeouts while it answers pings, count attempts.
		log.Warn("bus unreachable; will retry", zap.Duration("retry_in", r.cfg.Backoff[0]), zap.Error(err))
		return bus.Defer(r.cfg.Backoff[0])
	}
	if run.Attempt < r.cfg.MaxAttempts {
		delay := r.cfg.Backoff[min(run.Attempt-1, len(r.cfg.Backoff)-1)]
		log.Warn("run could not go on; will retry", zap.Int("attempt", run.Attempt), zap.Duration("retry_in", delay), zap.Error(err))
		return bus.Retry(delay)
	}
	r.failWithAlert(ctx, run, pol, model.ClassTransient, err)
	return bus.Done()
}

func (r *Runner) releaseDedup(ctx context.Context, run *Run) {
	if run.Notice == nil || run.Notice.DedupKey == "" {
		return
	}
	if err := bus.ReleaseValue(context.WithoutCancel(ctx), r.bus.Dedup, run.Notice.DedupKey, run.ID); err != nil {
		r.log.Debug("dedup key not given back (it expires with its window)", zap.String("run", run.ID), zap.Error(err))
	}
	run.Notice.DedupKey = ""
}

// RecordMax is how many bytes of a tool call's arguments, result and
// error a run's event keeps; the model got them whole.
const RecordMax = 1024

// claimLease is how long a run claim lasts without renewal: two ack waits
// (60s by default), renewed every third of it.
func (r *Runner) claimLease() time.Duration { return 2 * r.cfg.AckWait }

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func newRunID() string { return bus.NewID() }
