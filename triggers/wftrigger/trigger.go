package wftrigger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers"
	"github.com/agentwork/agentwork/triggers/cron"
	"github.com/agentwork/agentwork/workflow"
)

// Producer is the CloudEvents source of the trigger's own events (the
// error event of a chain stopped at the depth limit). Events of this
// source start no runs.
const Producer = "agentwork/workflow-trigger"

// ConsumerName is the durable consumer of the event triggers on the
// events stream, shared by every instance.
const ConsumerName = "workflow-triggers"

// OutcomeError is the outcome of the trigger's error event:
// agentwork.workflow.error on <prefix>.event.workflow.error.
const OutcomeError = "error"

var (
	_ triggers.Trigger = (*Trigger)(nil)
	_ cron.Starter     = (*Trigger)(nil)
	_ api.Readier      = (*Trigger)(nil)
)

// Trigger starts the runs of the workflows' cron and event triggers. Safe
// for concurrent use.
type Trigger struct {
	bus         *bus.Bus
	engine      *workflow.Engine
	log         *zap.Logger
	concurrency int
	events      []eventTrigger
	jobs        []cron.Job
	worker      *bus.Worker // set by Run
	ready       chan struct{}
}

// eventTrigger is one event trigger, compiled.
type eventTrigger struct {
	id       string // ID(workflow, index)
	workflow string
	index    int
	typ      string // a glob (path.Match)
	subject  string // a glob; "": any
	cond     *workflow.Condition
}

// Option configures a Trigger.
type Option func(*Trigger)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(t *Trigger) { t.log = l } }

// WithConcurrency sets how many events the consumer handles at once
// (default 8).
func WithConcurrency(n int) Option { return func(t *Trigger) { t.concurrency = n } }

// New returns the trigger of the workflows the engine runs
// (engine.Definitions()). It compiles the event triggers' patterns and
// conditions, and makes the cron triggers' jobs; an error names the
// workflow and trigger. It does no I/O.
func New(b *bus.Bus, engine *workflow.Engine, opts ...Option) (*Trigger, error) {
	t := &Trigger{bus: b, engine: engine, log: zap.NewNop(), concurrency: 8, ready: make(chan struct{})}
	for _, o := range opts {
		o(t)
	}
	defs := engine.Definitions()
	names := make([]string, 0, len(defs))
	for name := range defs {
		names = append(names, name)
	}
	slices.Sort(names)
	var errs []error
	for _, name := range names {
		def := defs[name]
		for i, on := range def.On {
			where := fmt.Sprintf("workflows.%s.on[%d]", name, i)
			if (on.Cron != nil || on.Event != nil) && len(required(def)) > 0 {
				t.log.Warn("a workflow started by a cron or event trigger has required inputs without defaults: those runs fail to start, with an error event",
					zap.String("workflow", name), zap.Strings("inputs", required(def)))
			}
			switch {
			case on.Cron != nil:
				t.jobs = append(t.jobs, cron.Job{
					ID: ID(name, i), Name: "workflow " + name, Workflow: name,
					Schedule: on.Cron.Schedule, Timezone: on.Cron.Timezone,
				})
			case on.Event != nil:
				et, err := compile(name, i, *on.Event)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s.event: %w", where, err))
					continue
				}
				t.events = append(t.events, et)
			}
		}
	}
	return t, errors.Join(errs...)
}

// required returns the inputs of def a run must be given.
func required(def *workflow.Workflow) []string {
	var out []string
	for name, in := range def.Inputs {
		if in.Required && in.Default == nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func compile(name string, i int, e workflow.EventTrigger) (eventTrigger, error) {
	et := eventTrigger{id: ID(name, i), workflow: name, index: i, typ: strings.TrimSpace(e.Type), subject: strings.TrimSpace(e.Subject)}
	if et.typ == "" {
		return et, errors.New("type: empty; want the event type to match, e.g. agentwork.cron.error (globs: agentwork.cron.*)")
	}
	for field, pat := range map[string]string{"type": et.typ, "subject": et.subject} {
		if _, err := path.Match(pat, ""); err != nil {
			return et, fmt.Errorf("%s: %q is not a pattern (a glob of *, ? and [...])", field, pat)
		}
	}
	if e.If != "" {
		c, err := workflow.CompileCondition(e.If)
		if err != nil {
			return et, fmt.Errorf("if: %w", err)
		}
		et.cond = c
	}
	return et, nil
}

// ID is the id of trigger index of workflow name: of its cron job, and
// the prefix of its runs' idempotency keys. wf-<name>-<index>; a name too
// long for a job id (64 characters) is cut and a hash of it added.
func ID(name string, index int) string {
	id := "wf-" + name + "-" + strconv.Itoa(index)
	if len(id) <= 64 {
		return id
	}
	h := sha256.Sum256([]byte(name))
	tail := "-" + hex.EncodeToString(h[:4]) + "-" + strconv.Itoa(index)
	return "wf-" + name[:64-3-len(tail)] + tail
}

// CronJobs returns the jobs of the workflows' cron triggers, for
// cron.WithWorkflows(t.CronJobs(), t).
func (t *Trigger) CronJobs() []cron.Job { return slices.Clone(t.jobs) }

// Sources is empty: the trigger publishes no runner requests.
func (t *Trigger) Sources() []string { return nil }

// Policy is empty: see Sources.
func (t *Trigger) Policy() agentwork.Policy { return agentwork.Policy{} }

// Ready reports nil once the event consumer takes events (or, without
// event triggers, once Run runs).
func (t *Trigger) Ready(context.Context) error {
	select {
	case <-t.ready:
	default:
		return errors.New("workflow triggers: not started")
	}
	if t.worker != nil {
		return t.worker.Ready()
	}
	return nil
}

// StartTick starts the run of a tick of a workflow's cron job (cron.Starter):
// cause cron, id <job>@<tick>; key "" (a run by hand) starts a run of its
// own. A run that cannot start for a reason that a retry does not change
// (its inputs, a workflow no longer defined) is reported as an error event
// and is no error here: the tick is done.
func (t *Trigger) StartTick(ctx context.Context, j cron.Job, tick time.Time, key string, manual bool) (string, error) {
	cause := workflow.Cause{Kind: workflow.CauseCron, ID: j.ID + "@" + tick.UTC().Format(time.RFC3339)}
	if manual {
		cause.Kind = workflow.CauseManual
	}
	run, _, err := t.engine.Start(ctx, j.Workflow, nil, workflow.StartOptions{IdempotencyKey: key, Cause: cause})
	if err == nil {
		return run.ID, nil
	}
	if manual || !final(err) {
		return "", err
	}
	return "", t.report(ctx, failure{trigger: j.ID, workflow: j.Workflow, msgID: "cron." + key, err: err,
		cause: map[string]any{"kind": workflow.CauseCron, "job": j.ID, "tick": tick.UTC()}})
}

// ForgoTick settles the run of a tick the cron scheduler records as
// missed (cron.Starter): stored as skipped (missed) unless an earlier try
// started it; false when it did.
func (t *Trigger) ForgoTick(ctx context.Context, j cron.Job, tick time.Time, key string) (bool, error) {
	at := tick.UTC().Format(time.RFC3339)
	return t.engine.Forgo(ctx, j.Workflow, workflow.StartOptions{IdempotencyKey: key, Cause: workflow.Cause{Kind: workflow.CauseCron, ID: j.ID + "@" + at}},
		"not started: the tick of "+at+" was missed (recorded by the cron scheduler)")
}

// final reports whether a Start error would come again on a retry.
func final(err error) bool {
	return errors.Is(err, workflow.ErrDepth) || errors.Is(err, workflow.ErrNoWorkflow) || errors.As(err, new(*workflow.InputError))
}

// Run serves the event triggers until ctx is done: one durable consumer
// on the events stream, shared by every instance, created to deliver the
// events published from then on (never the stream's history) and keeping
// its place across restarts. Without event triggers it removes that
// consumer, if any (so that a trigger added later does not start with the
// events of the time between), and waits for ctx. It returns nil after a
// clean stop.
func (t *Trigger) Run(ctx context.Context) error {
	if len(t.events) == 0 {
		t.removeConsumer(ctx)
		close(t.ready)
		<-ctx.Done()
		return nil
	}
	w, err := bus.NewWorker(t.bus.JetStream(), bus.WorkerConfig{
		Stream: bus.StreamEvents,
		Consumer: jetstream.ConsumerConfig{
			Durable:       ConsumerName,
			Description:   "agentwork workflows: the event triggers",
			FilterSubject: t.bus.Subjects.Events(),
			DeliverPolicy: jetstream.DeliverNewPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			MaxAckPending: 10_000,
		},
		Concurrency: t.concurrency,
		Log:         t.log,
	}, t.handle)
	if err != nil {
		return err
	}
	t.worker = w
	close(t.ready)
	return w.Run(ctx)
}

// removeConsumer removes the event triggers' consumer when no instance
// pulls from it: an instance of an older config (a rolling change) that
// still serves event triggers keeps it, and the last one to stop serving
// them leaves it to the next start without them.
func (t *Trigger) removeConsumer(ctx context.Context) {
	js := t.bus.JetStream()
	c, err := js.Consumer(ctx, bus.StreamEvents, ConsumerName)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return
	}
	var info *jetstream.ConsumerInfo
	if err == nil {
		info, err = c.Info(ctx)
	}
	if err == nil && info.NumWaiting > 0 {
		t.log.Info("the event triggers' consumer is left in place: another instance still serves event triggers")
		return
	}
	if err == nil {
		err = js.DeleteConsumer(ctx, bus.StreamEvents, ConsumerName)
	}
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && ctx.Err() == nil {
		t.log.Warn("the event triggers' consumer, no longer used, was not removed", zap.Error(err))
	}
}

// handle hands one event to the event triggers.
func (t *Trigger) handle(ctx context.Context, m jetstream.Msg) bus.Verdict {
	ev, err := bus.DecodeEvent(m.Data())
	if err != nil {
		t.log.Debug("not a CloudEvent; no trigger looks at it", zap.String("subject", m.Subject()), zap.Error(err))
		return bus.Done()
	}
	if ev.Source == Producer {
		return bus.Done() // the trigger's own: they would start loops of their own
	}
	env := eventEnv(ev)
	var matched []eventTrigger
	for _, et := range t.events {
		ok, err := et.match(ev, env)
		if err != nil {
			// A condition that fails on this event: said once, not retried.
			if rerr := t.report(ctx, failure{trigger: et.id, workflow: et.workflow, event: ev, msgID: et.id + "." + ev.ID,
				err: fmt.Errorf("workflows.%s.on[%d].event.if: %w", et.workflow, et.index, err)}); rerr != nil {
				return bus.Retry(time.Second)
			}
			continue
		}
		if ok {
			matched = append(matched, et)
		}
	}
	if len(matched) == 0 {
		return bus.Done()
	}
	depth, err := t.depth(ctx, ev)
	if err != nil {
		t.log.Warn("event trigger: the depth of the event's run cannot be read; tried again", zap.String("event", ev.ID), zap.Error(err))
		return bus.Retry(time.Second)
	}
	for _, et := range matched {
		if err := t.start(ctx, et, ev, env, depth); err != nil {
			if ctx.Err() != nil {
				return bus.Defer(0)
			}
			t.log.Warn("event trigger: the run did not start; tried again", zap.String("trigger", et.id), zap.String("event", ev.ID), zap.Error(err))
			return bus.Retry(time.Second) // the runs started already are the same runs again
		}
	}
	return bus.Done()
}

// match reports whether ev (env: as expressions see it) is one of et's.
func (et eventTrigger) match(ev bus.Event, env map[string]any) (bool, error) {
	if ok, _ := path.Match(et.typ, ev.Type); !ok {
		return false, nil
	}
	if et.subject != "" {
		if ok, _ := path.Match(et.subject, ev.Subject); !ok {
			return false, nil
		}
	}
	if et.cond == nil {
		return true, nil
	}
	return et.cond.Test(workflow.Env{Event: env, Index: -1})
}

// start starts et's run for ev: at most one per trigger and event.
func (t *Trigger) start(ctx context.Context, et eventTrigger, ev bus.Event, env map[string]any, depth int) error {
	run, created, err := t.engine.Start(ctx, et.workflow, nil, workflow.StartOptions{
		IdempotencyKey: et.id + "." + ev.ID,
		Cause:          workflow.Cause{Kind: workflow.CauseEvent, ID: ev.ID},
		Depth:          depth,
		Event:          env,
	})
	switch {
	case err == nil:
		if created {
			t.log.Info("event trigger started a run", zap.String("trigger", et.id), zap.String("event", ev.ID), zap.String("run", run.ID), zap.Int("depth", depth))
		}
		return nil
	case final(err):
		f := failure{trigger: et.id, workflow: et.workflow, event: ev, msgID: et.id + "." + ev.ID, err: err}
		if errors.Is(err, workflow.ErrDepth) {
			f.depth = depth
			f.chain = t.chain(ctx, ev)
		}
		return t.report(ctx, f)
	}
	return err
}

// eventEnv is ev as expressions and runs see it: {id, type, subject,
// source, time, data, runid}.
func eventEnv(ev bus.Event) map[string]any {
	env := map[string]any{"id": ev.ID, "type": ev.Type, "subject": ev.Subject, "source": ev.Source, "time": ev.Time.UTC().Format(time.RFC3339Nano)}
	if ev.RunID != "" {
		env["runid"] = ev.RunID
	}
	var data any
	if len(ev.Data) > 0 && json.Unmarshal(ev.Data, &data) == nil {
		env["data"] = data
	}
	return env
}

// workflowEvent reports whether ev is an event of a workflow run (its
// runid is the run).
func workflowEvent(typ string) bool {
	return strings.HasPrefix(typ, bus.TypeOf(bus.SourceWorkflow, ""))
}

// runOf returns the workflow run an event (as eventEnv gives it) belongs
// to: a workflow run's own event, or a runner run of one of its agent
// steps (metadata workflow_run), or a notification of one; "" for
// others.
func runOf(env map[string]any) string {
	typ, _ := env["type"].(string)
	if workflowEvent(typ) {
		id, _ := env["runid"].(string)
		return id
	}
	data, _ := env["data"].(map[string]any)
	md, _ := data["metadata"].(map[string]any)
	id, _ := md["workflow_run"].(string)
	return id
}

// depth is the depth of a run that ev starts: one deeper than the run
// the event belongs to (see runOf), 0 for an event of no run. A workflow
// event carries its run's depth; for other events the run is read (one
// that expired counts as depth 0).
func (t *Trigger) depth(ctx context.Context, ev bus.Event) (int, error) {
	env := eventEnv(ev)
	id := runOf(env)
	if id == "" {
		return 0, nil
	}
	if workflowEvent(ev.Type) {
		if data, ok := env["data"].(map[string]any); ok {
			if d, ok := data["depth"].(float64); ok {
				return int(d) + 1, nil
			}
		}
	}
	run, err := t.engine.Get(ctx, id)
	if errors.Is(err, workflow.ErrNoRun) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	return run.Depth + 1, nil
}

// chain names the runs that led to ev, newest first: <workflow>/<run>
// (depth N), each started by an event of the next. It stops where a run
// was started otherwise or has expired.
func (t *Trigger) chain(ctx context.Context, ev bus.Event) []string {
	var out []string
	id := runOf(eventEnv(ev))
	for range workflow.MaxDepth + 2 {
		if id == "" {
			break
		}
		run, err := t.engine.Get(ctx, id)
		if err != nil {
			out = append(out, id+" (expired)")
			break
		}
		out = append(out, fmt.Sprintf("%s/%s (depth %d, %s)", run.Workflow, run.ID, run.Depth, run.Cause.Kind))
		id = ""
		if run.Cause.Kind == workflow.CauseEvent && run.Event != nil {
			id = runOf(run.Event)
		}
	}
	return out
}

// failure is a run a trigger could not start, to report.
type failure struct {
	trigger, workflow string
	event             bus.Event // zero for a cron trigger
	cause             map[string]any
	msgID             string
	depth             int
	chain             []string
	err               error
}

// report publishes the error event of f (agentwork.workflow.error,
// subject the workflow), once per msgID within the stream's duplicate
// window.
func (t *Trigger) report(ctx context.Context, f failure) error {
	data := map[string]any{"trigger": f.trigger, "workflow": f.workflow, "error": f.err.Error()}
	if f.event.ID != "" {
		data["event"] = map[string]any{"id": f.event.ID, "type": f.event.Type, "subject": f.event.Subject, "source": f.event.Source}
	}
	if f.cause != nil {
		data["cause"] = f.cause
	}
	if errors.Is(f.err, workflow.ErrDepth) {
		data["depth"], data["limit"], data["chain"] = f.depth, workflow.MaxDepth, f.chain
	}
	ev, err := bus.NewEvent(Producer, bus.TypeOf(bus.SourceWorkflow, OutcomeError), f.workflow, time.Now(), data)
	if err != nil {
		return err
	}
	ev.CausationID = f.event.ID
	t.log.Warn("workflow trigger: no run started", zap.String("trigger", f.trigger), zap.String("event", f.event.ID), zap.Error(f.err))
	if _, err := t.bus.Publish(ctx, t.bus.Subjects.Event(bus.SourceWorkflow, OutcomeError), ev, "wftrigger."+f.msgID); err != nil {
		return fmt.Errorf("workflow trigger %s: report %v: %w", f.trigger, f.err, err)
	}
	return nil
}
