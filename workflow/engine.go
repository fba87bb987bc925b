package workflow

import (
	"cmp"
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

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
)

// StepSource is the source of the runner requests of agent steps (and so
// of their events, agentwork.step.done|skip|error). Register the engine's
// policy for it: runner.Handle(workflow.StepSource, engine.StepPolicy()).
const StepSource = bus.SourceStep

// Errors of the Engine's API.
var (
	// ErrNoWorkflow: no workflow of that name in the engine's Definitions.
	ErrNoWorkflow = errors.New("workflow: no such workflow")
	// ErrNoRun: no run of that id (never started, or expired:
	// bus.WorkflowRunTTL after it ended).
	ErrNoRun = errors.New("workflow: no such run")
	// ErrDepth: a run would be deeper than MaxDepth (a chain of event
	// triggers that starts itself).
	ErrDepth = errors.New("workflow: too deep")
)

// Config configures an Engine. Zero fields take the documented defaults.
type Config struct {
	// Definitions are the workflows by name: Start starts runs of these,
	// and a child step starts the one of its name. A run keeps the
	// definition it started with.
	Definitions Set
	// Tools are where tool steps find their tools, in order (a name
	// already taken is left out): the runner's registry, then its MCP
	// sources, as given to agentwork.NewRunner and WithToolSource.
	Tools []tools.Source
	// Secrets are cut out of what the engine stores and sends: the tool
	// calls recorded on steps, tool results taken as outputs, the events'
	// errors (as agentwork.WithSecrets).
	Secrets []string
	// Connectors are the connector names notifications may go to; a
	// notify step to another fails. Empty: any well-formed target.
	Connectors []string
	// Approvals asks for the approvals of approval steps (the one
	// approval.Service of the process, which signs the links). Nil: an
	// approval step fails, saying so.
	Approvals Approvals
	// Grants checks targets against the grant of the webhook credential
	// called credential, as it is now: nil when it allows them all, else
	// an error naming the first target refused and the grant's field (the
	// webhook handler's CheckTargets). The notify and approval targets of
	// a run a credential started (Cause.Credential; its child runs too)
	// are checked before anything is sent; without Grants such a run's
	// steps that send fail. Runs of the operator (admin token, cron,
	// event triggers) are not checked.
	Grants func(credential string, targets []string) error
	// Concurrency is how many messages each of the engine's three
	// consumers (commands, timers, agent steps' outcomes) handles at once.
	// Default 8.
	Concurrency int
	// AckWait is the consumers' ack wait: a message whose instance died
	// (no progress signal) is handed to another after it. Default 30s.
	AckWait time.Duration
	// ShutdownGrace is how long handlers in flight may finish when Run's
	// ctx ends; tool calls still running then are cut, and recorded as
	// interrupted (or made again, for an idempotent tool) by whichever
	// instance takes their message over. Default 10s.
	ShutdownGrace time.Duration
	// RecordMax bounds the arguments, result and error of a tool call as
	// a step's record keeps them (bytes; each cut with a note). Default
	// 4096.
	RecordMax int
}

func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.RecordMax <= 0 {
		c.RecordMax = 4096
	}
	return c
}

// Approvals is what the engine needs of the approvals
// (*approval.Service): asking, idempotently by id, and cancelling.
type Approvals interface {
	Ask(ctx context.Context, r approval.Request) (approval.Approval, bool, error)
	Cancel(ctx context.Context, id, reason string) (approval.Approval, error)
}

var _ Approvals = (*approval.Service)(nil)

// Option configures an Engine.
type Option func(*Engine)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(e *Engine) { e.log = l } }

// WithClock sets the clock Decide is given (default time.Now). Timers fire
// in real time whatever it says.
func WithClock(now func() time.Time) Option { return func(e *Engine) { e.now = now } }

// Engine runs workflow runs on the bus. Any number of engines (in one
// process or many) may share a bus: each run's state is one KV record
// written by compare-and-set, and the engines' consumers are shared, so
// any instance carries any run on. Its methods are safe for concurrent
// use.
type Engine struct {
	bus    *bus.Bus
	cfg    Config
	log    *zap.Logger
	now    func() time.Time
	timers *bus.Timers

	// inflight holds the cancel funcs of the tool calls this process is
	// making, by effect key (CancelStep).
	inflight sync.Map

	// hook, if set (tests), is called at the named points of a handler;
	// an error makes the handler stop there as if the process died.
	hook func(point, key string) error
}

// NewEngine returns an engine on b. It does no I/O; Run does.
func NewEngine(b *bus.Bus, cfg Config, opts ...Option) *Engine {
	e := &Engine{bus: b, cfg: cfg.withDefaults(), log: zap.NewNop(), now: time.Now, timers: bus.NewTimers(b)}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Definitions returns the workflows the engine starts runs of.
func (e *Engine) Definitions() Set { return e.cfg.Definitions }

// StartOptions adjust Start.
type StartOptions struct {
	// IdempotencyKey, if set, makes the run id a function of the workflow,
	// the cause's kind and credential, and the key: a repeated Start with
	// the same cause is the same run (created false). Keys of different
	// causes (a cron tick, an event, the admin, each credential) never
	// name the same run, so no caller can take another's run id.
	IdempotencyKey string
	// Cause says what started the run. Default: manual.
	Cause Cause
	// Depth is the run's depth: an event trigger passes the depth of the
	// run whose event it reacts to plus one, so a chain that starts itself
	// stops at MaxDepth (ErrDepth).
	Depth int
	// Event is the event that started the run, for an event trigger ({id,
	// type, subject, source, time, data}); templates read it as `event`.
	Event map[string]any
}

// Start starts a run of the workflow name with inputs. It checks the
// inputs (a joined error of *InputError: an HTTP API answers 400), stores
// the run (pending) and its start command, and returns the run as stored;
// the engines' consumers then carry it out. created is false when the
// idempotency key names a run that exists: that run is returned.
func (e *Engine) Start(ctx context.Context, name string, inputs map[string]any, o StartOptions) (Run, bool, error) {
	def := e.cfg.Definitions[name]
	if def == nil {
		return Run{}, false, fmt.Errorf("%w %q (workflows: %s)", ErrNoWorkflow, name, strings.Join(e.names(), ", "))
	}
	if o.Depth > MaxDepth {
		return Run{}, false, fmt.Errorf("%w: a run of %s would be %d deep, over the limit of %d (a chain of triggers that starts itself?)", ErrDepth, name, o.Depth, MaxDepth)
	}
	if o.Cause.Kind == "" {
		o.Cause.Kind = CauseManual
	}
	id := bus.Token(strings.ReplaceAll(bus.NewID(), "-", ""))
	if o.IdempotencyKey != "" {
		id = keyID(name, o)
	}
	run, err := NewRun(def, id, inputs, o.Cause, e.now())
	if err != nil {
		return Run{}, false, err
	}
	run.Depth, run.Event = o.Depth, o.Event
	return e.admit(ctx, run) // concurrency.go
}

// ErrMissed is the kind of the error of a run that never started because
// its cron tick was recorded as missed (see Forgo).
const ErrMissed ErrorKind = "missed"

// Forgo settles the run a Start with o would make (o.IdempotencyKey
// set) as one that never starts: it stores it as skipped (kind
// ErrMissed, why its message), unless a run of that id exists. It
// reports whether it stored it (false: the run exists, started by an
// earlier Start). A Start after it returns the skipped run. The cron
// scheduler settles a missed tick so: the tick is run or missed, never
// both.
func (e *Engine) Forgo(ctx context.Context, name string, o StartOptions, why string) (bool, error) {
	def := e.cfg.Definitions[name]
	if def == nil || o.IdempotencyKey == "" {
		return true, nil // nothing that this engine could start
	}
	if o.Cause.Kind == "" {
		o.Cause.Kind = CauseManual
	}
	now := e.now()
	run := Run{
		ID: keyID(name, o), Workflow: name, Def: def,
		Status: RunSkipped, Steps: map[string]*StepState{}, Cause: o.Cause, Depth: o.Depth,
		Error:     &StepError{Kind: ErrMissed, Message: why},
		CreatedAt: now, EndedAt: now, UpdatedAt: now,
	}
	forgone := true
	_, _, err := bus.UpdateAtExpiring(ctx, e.bus, e.bus.WorkflowRuns, run.ID, record{Run: run}, 0, bus.WorkflowRunTTL, func(*record, bool) (bool, error) {
		forgone = false
		return false, nil
	})
	if err != nil {
		return false, fmt.Errorf("workflow: settle run %s of %s: %w", run.ID, name, err)
	}
	return forgone, nil
}

// create stores run (pending) unless its id exists, and publishes its start
// command (again, for a pending run that exists: an earlier Start may have
// stored the run and failed to publish).
func (e *Engine) create(ctx context.Context, run Run) (Run, bool, error) {
	created := true
	rec, _, err := bus.UpdateAt(ctx, e.bus.WorkflowRuns, run.ID, record{Run: run}, 0, func(*record, bool) (bool, error) {
		created = false
		return false, nil
	})
	if err != nil {
		return Run{}, false, fmt.Errorf("workflow: store run %s: %w", run.ID, err)
	}
	if rec.Status == RunPending {
		if err := e.command(ctx, "start", rec.Workflow, command{Run: rec.ID}, rec.ID); err != nil {
			return rec.Run, created, err
		}
	}
	return rec.Run, created, nil
}

// Get returns the run id (ErrNoRun if there is none).
func (e *Engine) Get(ctx context.Context, id string) (Run, error) {
	rec, _, err := e.read(ctx, id)
	return rec.Run, err
}

// Filter selects runs for List. Zero fields select all.
type Filter struct {
	Workflow string
	Status   RunStatus
	// Limit bounds the runs returned (the newest first). Default 100.
	Limit int
}

// List returns the runs f selects, the newest first.
func (e *Engine) List(ctx context.Context, f Filter) ([]Run, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	keys, err := e.bus.Keys(ctx, e.bus.WorkflowRuns, ">")
	if err != nil {
		return nil, fmt.Errorf("workflow: list runs: %w", err)
	}
	var runs []Run
	for _, key := range keys {
		rec, _, err := e.read(ctx, key)
		if errors.Is(err, ErrNoRun) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if (f.Workflow == "" || rec.Workflow == f.Workflow) && (f.Status == "" || rec.Status == f.Status) {
			runs = append(runs, rec.Run)
		}
	}
	slices.SortFunc(runs, func(a, b Run) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(b.ID, a.ID))
	})
	if len(runs) > f.Limit {
		runs = runs[:f.Limit]
	}
	return runs, nil
}

// Cancel asks for run id to be cancelled: its timers and steps in flight
// are cancelled and it ends cancelled (with reason in its events). It
// returns once the command is stored, with the run as it was; a run that
// has ended is returned as it is, and nothing changes.
func (e *Engine) Cancel(ctx context.Context, id, reason string) (Run, error) {
	rec, _, err := e.read(ctx, id)
	if err != nil || rec.Status.Ended() {
		return rec.Run, err
	}
	cid := bus.NewID()
	return rec.Run, e.command(ctx, "cancel", id, command{Run: id, ID: cid, Reason: reason}, "cancel."+cid)
}

// Retry asks for the ended run id (failed, cancelled or timed out) to run
// again from the top-level step from ("": where it failed): that step and
// those after it start afresh, those before keep their outputs. key, if
// set, makes a repeated request one retry (as an Idempotency-Key does). It
// checks the retry applies (ErrNotRetryable, or an error naming the step)
// and returns once the command is stored, with the run as it was.
func (e *Engine) Retry(ctx context.Context, id, from, key string) (Run, error) {
	rec, _, err := e.read(ctx, id)
	if err != nil {
		return rec.Run, err
	}
	if key == "" {
		key = bus.NewID()
	}
	if slices.Contains(rec.Retries, key) {
		return rec.Run, nil
	}
	if _, _, err := Decide(rec.Run, RetryFrom{From: from}, e.now()); err != nil {
		return rec.Run, err
	}
	return rec.Run, e.command(ctx, "retry", id, command{Run: id, ID: key, From: from}, "retry."+id+"."+key)
}

// read returns the record of run id and its revision (ErrNoRun if none).
func (e *Engine) read(ctx context.Context, id string) (record, uint64, error) {
	if !bus.ValidToken(id) {
		return record{}, 0, fmt.Errorf("%w %q (a run id is 1-64 characters of a-z, 0-9, _ and -)", ErrNoRun, id)
	}
	ent, err := e.bus.WorkflowRuns.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return record{}, 0, fmt.Errorf("%w %q", ErrNoRun, id)
	}
	if err != nil {
		return record{}, 0, fmt.Errorf("workflow: read run %s: %w", id, err)
	}
	var rec record
	if err := json.Unmarshal(ent.Value(), &rec); err != nil {
		return record{}, 0, &bus.CorruptError{Key: id, Revision: ent.Revision(), Err: err}
	}
	return rec, ent.Revision(), nil
}

func (e *Engine) names() []string {
	var names []string
	for n := range e.cfg.Definitions {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return []string{"none"}
	}
	return names
}

// derivedID is a run id that is a function of its parts: 32 hex digits.
// keyID is the id of the run of workflow name that a Start with o's
// idempotency key makes: scoped by the cause's kind and credential.
func keyID(name string, o StartOptions) string {
	return derivedID("key", name, o.Cause.Kind, o.Cause.Credential, o.IdempotencyKey)
}

func derivedID(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:16])
}

// StepPolicy is the runner policy of the agent steps' requests (source
// StepSource): each run takes its settings (tools, model, fallback,
// max_steps, memory) from its workflow run's definition snapshot, so a
// changed config does not change a running run; the model's notify_user
// calls are delivered, and its reply is the step's output (no notify_user
// call is no skip: the reply is still the output). The runner sends no
// alert of its own for a failed step: the run's failure alerts.
func (e *Engine) StepPolicy() agentwork.Policy {
	noAlert := false // a failed step is the run's to report (its alert)
	return agentwork.Policy{
		Alert:           &noAlert,
		Output:          []agentwork.OutputGate{stepGate{}},
		RequestSettings: e.stepSettings,
	}
}
