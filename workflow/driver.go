package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
)

// The engine's durable consumers, shared by all instances.
const (
	consumerCommands = "workflow"
	consumerTimers   = "workflow-timers"
	consumerSteps    = "workflow-steps"
)

// timerPrefix is the first token of the engine's timer keys (TimerKey).
const timerPrefix = "wf"

// record is a run's KV value: the run, and the driver's fields.
type record struct {
	Run
	// Outbox holds the effects decided and maybe not yet carried out, in
	// batches, each tagged with the message whose handler decided it.
	Outbox []batch `json:"outbox,omitempty"`
	// Retries are the ids of the retry commands applied (the last
	// maxRetryIDs): a RetryFrom is a command, applied once per id.
	Retries []string `json:"retries,omitempty"`
}

const maxRetryIDs = 16

// batch is the effects one write of one handler decided.
type batch struct {
	// Root is the message being handled (its consumer and stream
	// sequence): the handler of that message owns the batch.
	Root    string    `json:"root"`
	At      time.Time `json:"at"`
	Effects []stored  `json:"effects"`
}

// inline reports whether b holds work that its root handler makes and
// feeds back to Decide (tool calls, notifications): only that handler (or
// a redelivery of its message) may carry b out and drop it.
func (b batch) inline() bool {
	return slices.ContainsFunc(b.Effects, stored.inline)
}

// stored is one effect as the outbox keeps it: one field is set.
type stored struct {
	Agent  *RunAgent         `json:"agent,omitempty"`
	Tool   *CallTool         `json:"tool,omitempty"`
	Notify *SendNotification `json:"notify,omitempty"`
	Child  *StartChild       `json:"child,omitempty"`
	Set    *SetTimer         `json:"set_timer,omitempty"`
	Unset  *CancelTimer      `json:"cancel_timer,omitempty"`
	Stop   *CancelStep       `json:"cancel_step,omitempty"`
	Emit   *Emit             `json:"emit,omitempty"`
	Alert  *Alert            `json:"alert,omitempty"`
	Ask    *AskApproval      `json:"ask_approval,omitempty"`
	Unask  *CancelApproval   `json:"cancel_approval,omitempty"`
	// Parent tells the parent run that this child run ended (the driver's
	// own effect, added to the write that ends a child run).
	Parent *childEnd `json:"parent,omitempty"`
}

func wrap(e Effect) stored {
	switch e := e.(type) {
	case RunAgent:
		return stored{Agent: &e}
	case CallTool:
		return stored{Tool: &e}
	case SendNotification:
		return stored{Notify: &e}
	case StartChild:
		return stored{Child: &e}
	case SetTimer:
		return stored{Set: &e}
	case CancelTimer:
		return stored{Unset: &e}
	case CancelStep:
		return stored{Stop: &e}
	case Emit:
		return stored{Emit: &e}
	case Alert:
		return stored{Alert: &e}
	case AskApproval:
		return stored{Ask: &e}
	case CancelApproval:
		return stored{Unask: &e}
	}
	panic(fmt.Sprintf("workflow: effect %T has no stored form", e))
}

func (s stored) key() string {
	switch {
	case s.Agent != nil:
		return s.Agent.Key()
	case s.Tool != nil:
		return s.Tool.Key()
	case s.Notify != nil:
		return s.Notify.Key()
	case s.Child != nil:
		return s.Child.Key()
	case s.Set != nil:
		return s.Set.Key()
	case s.Unset != nil:
		return s.Unset.Key()
	case s.Stop != nil:
		return s.Stop.Key()
	case s.Emit != nil:
		return s.Emit.Key()
	case s.Alert != nil:
		return s.Alert.Key()
	case s.Ask != nil:
		return s.Ask.Key()
	case s.Unask != nil:
		return s.Unask.Key()
	case s.Parent != nil:
		return "end:" + s.Parent.Child
	}
	return ""
}

func (s stored) inline() bool { return s.Tool != nil || s.Notify != nil }

// lateSafe reports whether carrying s out again at any later time has the
// effect of once: a timer set only while the run still holds it, a
// cancel, a command the receiver applies once. The others are deduplicated
// for the bus's duplicate windows only (minutes), so a handler removes the
// batch holding them once it carried them out.
func (s stored) lateSafe() bool {
	return s.Set != nil || s.Unset != nil || s.Stop != nil || s.Parent != nil || s.Unask != nil
}

// work is the launch an inline effect belongs to.
func (s stored) work() Work {
	if s.Tool != nil {
		return s.Tool.Work
	}
	return s.Notify.Work
}

// childEnd is the end of a child run, sent to its parent.
type childEnd struct {
	Child   string     `json:"child"`
	Parent  string     `json:"parent"`
	Step    string     `json:"step"`
	Item    int        `json:"item"`
	Attempt int        `json:"attempt"`
	Gen     int        `json:"gen"`
	Status  RunStatus  `json:"status"`
	Output  any        `json:"output,omitempty"`
	Err     *StepError `json:"error,omitempty"`
}

// command is the data of a message of the commands stream.
type command struct {
	Run string `json:"run"`
	// ID identifies a cancel or retry request (a retry is applied once
	// per ID).
	ID     string    `json:"id,omitempty"`
	Reason string    `json:"reason,omitempty"`
	From   string    `json:"from,omitempty"`
	Child  *childEnd `json:"child,omitempty"`
	// Ask and Approval are an approval step's decision: the approval's
	// Resume carries Ask (which launch asked) and adds Approval (the
	// outcome). AskError, instead of Approval, says the approval could
	// not be asked.
	Ask      *askRef           `json:"ask,omitempty"`
	Approval *approval.Outcome `json:"approval,omitempty"`
	AskError string            `json:"ask_error,omitempty"`
}

// askRef is the launch of an approval step that asked.
type askRef struct {
	Step    string `json:"step"`
	Item    int    `json:"item"`
	Attempt int    `json:"attempt"`
	Gen     int    `json:"gen"`
	ID      string `json:"id"`
}

// command publishes a command on <prefix>.workflow.<verb>.<name> with
// message id msgID, and returns once the stream stored it.
func (e *Engine) command(ctx context.Context, verb, name string, c command, msgID string) error {
	ev, err := bus.NewEvent("agentwork/workflow", bus.TypeOf(bus.SourceWorkflow, verb+"_requested"), c.Run, e.now(), c)
	if err != nil {
		return err
	}
	ev.RunID = c.Run
	if _, err := e.bus.Publish(ctx, e.bus.Subjects.Workflow(verb, name), ev, msgID); err != nil {
		return fmt.Errorf("workflow: %s %s: %w", verb, c.Run, err)
	}
	return nil
}

// Run consumes the engine's work until ctx is done: the commands (start,
// cancel, retry, a child's end), the fired timers of workflow runs, and
// the outcomes of agent steps, each through a durable consumer that all
// instances share. It returns nil after a shutdown (see
// Config.ShutdownGrace), or an error when a consumer cannot be created or
// is lost.
func (e *Engine) Run(ctx context.Context) error {
	type consumer struct {
		stream, durable, filter string
		handle                  func(context.Context, jetstream.Msg) bus.Verdict
		horizon                 time.Duration
	}
	s := e.bus.Subjects
	consumers := []consumer{
		{bus.StreamWorkflows, consumerCommands, s.Workflows(), e.onCommand, bus.ReplayHorizon},
		{bus.StreamTimers, consumerTimers, s.TimerFired(timerPrefix) + ".>", e.onTimer, 0},
		{bus.StreamEvents, consumerSteps, s.Event(StepSource, "*"), e.onStepEvent, bus.ReplayHorizon},
	}
	var workers []*bus.Worker
	for _, c := range consumers {
		w, err := bus.NewWorker(e.bus.JetStream(), bus.WorkerConfig{
			Stream: c.stream,
			Consumer: jetstream.ConsumerConfig{
				Durable: c.durable, FilterSubject: c.filter, AckPolicy: jetstream.AckExplicitPolicy,
				AckWait: e.cfg.AckWait, MaxAckPending: 10_000,
			},
			Concurrency: e.cfg.Concurrency, ShutdownGrace: e.cfg.ShutdownGrace, ReplayHorizon: c.horizon,
			Log: e.log,
		}, c.handle)
		if err != nil {
			return err
		}
		workers = append(workers, w)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, w := range workers {
		g.Go(func() error { return w.Run(gctx) })
	}
	g.Go(func() error { e.releaseAll(gctx); return nil }) // concurrency.go
	return g.Wait()
}

// input is what one message asks of a run.
type input struct {
	run string
	ev  Event
	// retry is a retry command's id (applied once per run).
	retry string
	// agentRun is the runner's run id of an agent step's outcome.
	agentRun string
	// call is the tool call that produced a StepFinished, to record.
	call *tools.Call
}

func rootOf(kind string, m jetstream.Msg) (string, error) {
	meta, err := m.Metadata()
	if err != nil {
		return "", err
	}
	return kind + strconv.FormatUint(meta.Sequence.Stream, 10), nil
}

func (e *Engine) onCommand(ctx context.Context, m jetstream.Msg) bus.Verdict {
	root, err := rootOf("c", m)
	if err != nil {
		return bus.Retry(time.Second)
	}
	base := strings.TrimSuffix(e.bus.Subjects.Workflow("v", "n"), "v.n") // <prefix>.workflow.
	verb, _, _ := strings.Cut(strings.TrimPrefix(m.Subject(), base), ".")
	ev, err := bus.DecodeEvent(m.Data())
	var c command
	if err == nil {
		err = ev.DecodeData(&c)
	}
	if err != nil {
		e.log.Error("workflow command dropped: it does not decode", zap.String("subject", m.Subject()), zap.Error(err))
		return bus.Terminate()
	}
	in := input{run: c.Run}
	switch verb {
	case "start":
		in.ev = Started{}
	case "cancel":
		in.ev = Cancel{Reason: c.Reason}
	case "retry":
		in.ev, in.retry = RetryFrom{From: c.From}, c.ID
	case "child":
		if c.Child == nil {
			return bus.Terminate()
		}
		ce := c.Child
		in.ev = ChildFinished{Step: ce.Step, Item: ce.Item, Attempt: ce.Attempt, Status: ce.Status, Output: ce.Output, Err: ce.Err}
	case "approval":
		if c.Ask == nil || (c.Approval == nil && c.AskError == "") {
			e.log.Error("workflow approval command dropped: no decision in it", zap.String("subject", m.Subject()))
			return bus.Terminate()
		}
		a := c.Ask
		ad := ApprovalDecided{Step: a.Step, Item: a.Item, Attempt: a.Attempt, Gen: a.Gen, ID: a.ID}
		if o := c.Approval; o != nil {
			ad.State, ad.Verdict, ad.By, ad.Comment, ad.At = string(o.State), string(o.Verdict), o.By, o.Comment, o.At
			if o.Name != "" {
				ad.By += " (" + o.Name + ")"
			}
		} else {
			ad.Err = &StepError{Kind: ErrPermanent, Message: c.AskError}
		}
		in.ev = ad
	default:
		e.log.Error("workflow command dropped: unknown verb", zap.String("subject", m.Subject()))
		return bus.Terminate()
	}
	return e.transition(ctx, root, in)
}

// timerData is a workflow timer's payload.
type timerData struct {
	Run  string     `json:"run"`
	Fire TimerFired `json:"fire"`
}

func (e *Engine) onTimer(ctx context.Context, m jetstream.Msg) bus.Verdict {
	root, err := rootOf("t", m)
	if err != nil {
		return bus.Retry(time.Second)
	}
	t, err := e.timers.DecodeTimer(m.Subject(), m.Data())
	var d timerData
	if err == nil {
		err = json.Unmarshal(t.Data, &d)
	}
	if err != nil || d.Run == "" {
		e.log.Error("workflow timer dropped: it does not decode", zap.String("subject", m.Subject()), zap.Error(err))
		return bus.Terminate()
	}
	return e.transition(ctx, root, input{run: d.Run, ev: d.Fire})
}

func (e *Engine) onStepEvent(ctx context.Context, m jetstream.Msg) bus.Verdict {
	root, err := rootOf("s", m)
	if err != nil {
		return bus.Retry(time.Second)
	}
	ev, err := bus.DecodeEvent(m.Data())
	var res agentwork.Result
	if err == nil {
		err = ev.DecodeData(&res)
	}
	if err != nil {
		e.log.Error("agent step outcome dropped: it does not decode", zap.String("subject", m.Subject()), zap.Error(err))
		return bus.Terminate()
	}
	md := res.Metadata
	if md["workflow_run"] == "" {
		return bus.Done() // a request of source step not made by an engine
	}
	item, err1 := strconv.Atoi(md["workflow_item"])
	attempt, err2 := strconv.Atoi(md["workflow_attempt"])
	if err1 != nil || err2 != nil {
		e.log.Error("agent step outcome dropped: bad metadata", zap.Any("metadata", md))
		return bus.Terminate()
	}
	sf := StepFinished{Step: md["workflow_step"], Item: item, Attempt: attempt}
	switch res.Outcome {
	case bus.OutcomeDone:
		sf.Output = res.Reply
	case bus.OutcomeError:
		kind := ErrPermanent
		switch res.Class {
		case "transient":
			kind = ErrTransient
		case "timeout":
			kind = ErrTimeout
		}
		sf.Err = &StepError{Kind: kind, Message: "the agent run failed: " + res.Error}
	default:
		msg := "the runner skipped the agent run: " + res.Reason
		if res.Detail != "" {
			msg += " (" + res.Detail + ")"
		}
		sf.Err = &StepError{Kind: ErrPermanent, Message: msg}
	}
	return e.transition(ctx, root, input{run: md["workflow_run"], ev: sf, agentRun: ev.RunID})
}

// errAbort stops a handler where it is, as if its process died (a test
// hook said so).
var errAbort = errors.New("workflow: handler aborted")

// errGone: the run's record is not there (expired, or never made).
var errGone = errors.New("workflow: run gone")

// errConflict: another writer changed the record since it was read.
var errConflict = errors.New("workflow: record changed")

func (e *Engine) at(point, key string) error {
	if e.hook == nil {
		return nil
	}
	if err := e.hook(point, key); err != nil {
		return fmt.Errorf("%w at %s %s: %w", errAbort, point, key, err)
	}
	return nil
}

// chain is one handler's work on one run: the transition its message
// asks for, then each result of the inline work that transition (and
// those after it) started, one write per result, until nothing inline is
// left to do.
type chain struct {
	e    *Engine
	root string
	id   string
	// rec is the record as this chain last wrote it (known) or read it.
	rec   record
	rev   uint64
	known bool
	// done are the keys of the chain's effects carried out (inline ones:
	// their result fed to Decide).
	done map[string]bool
	// results receives the inline work's results; flying counts those
	// still to come.
	results chan result
	flying  int
	calls   context.Context
}

type result struct {
	in      input
	key     string
	aborted error // the work was cut short (shutdown, an abort): feed nothing
}

// transition handles one message for run in.run: see docs/workflows.md
// (The driver) for the protocol.
func (e *Engine) transition(ctx context.Context, root string, in input) bus.Verdict {
	log := e.log.With(zap.String("run", in.run), zap.String("root", root))
	calls, cancelCalls := context.WithCancel(ctx)
	c := &chain{e: e, root: root, id: in.run, done: map[string]bool{}, results: make(chan result, MaxConcurrency+8), calls: calls}
	defer func() {
		cancelCalls()
		for ; c.flying > 0; c.flying-- {
			<-c.results
		}
	}()
	err := c.loop(ctx, in)
	switch {
	case err == nil, errors.Is(err, errGone):
		return bus.Done()
	case errors.Is(err, errAbort):
		log.Warn("handler aborted", zap.Error(err))
		return bus.Leave()
	case ctx.Err() != nil:
		return bus.Defer(0)
	}
	var ce *bus.CorruptError
	if errors.As(err, &ce) {
		log.Error("workflow run record does not decode; its messages are dropped", zap.Error(err))
		return bus.Terminate()
	}
	log.Warn("workflow transition failed; the message is tried again", zap.Error(err))
	return bus.Retry(time.Second)
}

func (c *chain) loop(ctx context.Context, in input) error {
	evs := []input{in}
	first := true
	for {
		todo, err := c.apply(ctx, evs, first)
		if err != nil {
			return err
		}
		first = false
		if err := c.carry(ctx, todo); err != nil {
			return err
		}
		if c.flying == 0 {
			return c.cleanup(ctx)
		}
		var r result
		select {
		case r = <-c.results:
			c.flying--
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.aborted != nil {
			return r.aborted
		}
		c.done[r.key] = true
		evs = []input{r.in}
	}
}

// apply decides evs on the run and writes the outcome at the revision
// read, re-reading and deciding again on a conflict. Before the write it
// carries out (again) the batches of other handlers that hold nothing
// inline and drops them; on the message's first pass it takes over the
// batches of an earlier delivery of the same message (a crash): their
// effects are carried out again, and their inline work is made again
// (a notification, an idempotent tool) or fed back as interrupted. It
// returns the effects the write added, to carry out.
func (c *chain) apply(ctx context.Context, evs []input, first bool) ([]stored, error) {
	e := c.e
	for {
		if !c.known {
			rec, rev, err := e.read(ctx, c.id)
			if errors.Is(err, ErrNoRun) {
				return nil, errGone
			}
			if err != nil {
				return nil, err
			}
			c.rec, c.rev, c.known = rec, rev, true
		}
		base := c.rec
		dirty := false
		var outbox []batch
		var again, redo []stored
		var feed []input
		for _, b := range base.Outbox {
			switch {
			case b.Root == c.root && first:
				// An earlier delivery of this message decided these.
				dirty = true
				for _, s := range b.Effects {
					if !s.inline() {
						again = append(again, s)
						continue
					}
					w := s.work()
					if x := execOf(base.Run, w.Step, w.Item); x == nil || x.Status != StepRunning || x.Attempt != w.Attempt {
						continue
					}
					if s.Notify != nil || e.idempotent(s.Tool.Name) {
						redo = append(redo, s)
						continue
					}
					call := tools.Call{Name: s.Tool.Name, Arguments: argsJSON(s.Tool.Args), Outcome: tools.OutcomeInterrupted,
						Error: "the call was in flight when its instance stopped: whether it took effect is unknown, and the tool is not idempotent, so it is not made again"}
					call = call.Record(e.cfg.RecordMax, e.cfg.Secrets)
					feed = append(feed, input{run: c.id, call: &call, ev: StepFinished{Step: w.Step, Item: w.Item, Attempt: w.Attempt,
						Err: &StepError{Kind: ErrInterrupted, Message: "the tool call was in flight when its instance stopped; " + s.Tool.Name + " is not idempotent, so it is not made again"}}})
				}
			case b.Root == c.root:
				kept := b
				kept.Effects = slices.DeleteFunc(slices.Clone(b.Effects), func(s stored) bool { return c.done[s.key()] })
				if len(kept.Effects) != len(b.Effects) {
					dirty = true
				}
				if len(kept.Effects) > 0 {
					outbox = append(outbox, kept)
				}
			case b.inline():
				outbox = append(outbox, b) // another handler's work in flight
			default:
				// Another handler's, nothing inline: it may have died
				// before carrying it out. Doing it again is harmless.
				dirty = true
				again = append(again, b.Effects...)
			}
		}
		for _, s := range again {
			if err := e.carryOut(ctx, base.Run, s, true); err != nil {
				return nil, err
			}
		}
		run, retries := base.Run, base.Retries
		var effects []Effect
		for _, in := range append(feed, evs...) {
			if in.ev == nil {
				continue
			}
			if in.retry != "" {
				if slices.Contains(retries, in.retry) {
					continue
				}
			}
			next, effs, changed, err := decide(run, in.ev, e.now())
			if err != nil {
				e.log.Warn("workflow event does not apply", zap.String("run", c.id), zap.String("event", fmt.Sprintf("%T", in.ev)), zap.Error(err))
				continue
			}
			if !changed {
				continue
			}
			if in.retry != "" {
				retries = append(slices.Clone(retries), in.retry)
				if len(retries) > maxRetryIDs {
					retries = retries[len(retries)-maxRetryIDs:]
				}
			}
			if sf, ok := in.ev.(StepFinished); ok {
				if x := execOf(next, sf.Step, sf.Item); x != nil {
					if in.call != nil {
						x.Calls = append(slices.Clip(x.Calls), *in.call)
					}
					if in.agentRun != "" {
						x.AgentRuns = append(slices.Clip(x.AgentRuns), in.agentRun)
					}
				}
			}
			if next.Status.Ended() && !run.Status.Ended() && next.Parent != nil {
				p := next.Parent
				effects = append(effects, parentEffect{childEnd{Child: next.ID, Parent: p.Run, Step: p.Step, Item: p.Item, Attempt: p.Attempt,
					Gen: next.Gen, Status: next.Status, Output: next.Output, Err: next.Error}})
			}
			run, dirty = next, true
			effects = append(effects, effs...)
		}
		if !dirty {
			return nil, nil
		}
		rec := record{Run: run, Outbox: outbox, Retries: retries}
		var added []stored
		for _, ef := range effects {
			if p, ok := ef.(parentEffect); ok {
				added = append(added, stored{Parent: &p.childEnd})
				continue
			}
			added = append(added, wrap(ef))
		}
		added = append(added, redo...)
		if len(added) > 0 {
			rec.Outbox = append(slices.Clip(rec.Outbox), batch{Root: c.root, At: e.now().UTC(), Effects: added})
		}
		err := c.write(ctx, rec)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := e.at("written", c.root); err != nil {
			return nil, err
		}
		return added, nil
	}
}

// parentEffect carries a childEnd through the effects list of apply.
type parentEffect struct{ childEnd }

func (parentEffect) Key() string { return "" }
func (parentEffect) effect()     {}

// write stores rec at the chain's revision; an ended run's record expires
// bus.WorkflowRunTTL after it. errConflict when another writer came first.
func (c *chain) write(ctx context.Context, rec record) error {
	conflict := func(*record, bool) (bool, error) { return false, errConflict }
	var rev uint64
	var err error
	if rec.Status.Ended() {
		_, rev, err = bus.UpdateAtExpiring(ctx, c.e.bus, c.e.bus.WorkflowRuns, c.id, rec, c.rev, bus.WorkflowRunTTL, conflict)
	} else {
		_, rev, err = bus.UpdateAt(ctx, c.e.bus.WorkflowRuns, c.id, rec, c.rev, conflict)
	}
	c.e.bus.NoteWrite(err)
	if err != nil {
		c.known = false
		return err
	}
	c.rec, c.rev, c.known = rec, rev, true
	return nil
}

// cleanup removes the chain's batches from the record once everything in
// them was carried out, unless all that is left is safe to carry out again
// at any time (lateSafe): a batch left behind would be carried out again
// by the next handler of the run, maybe after the bus forgot the message
// ids that make it harmless.
func (c *chain) cleanup(ctx context.Context) error {
	for {
		if !c.known {
			rec, rev, err := c.e.read(ctx, c.id)
			if errors.Is(err, ErrNoRun) {
				return nil
			}
			if err != nil {
				return err
			}
			c.rec, c.rev, c.known = rec, rev, true
		}
		need := false
		outbox := slices.DeleteFunc(slices.Clone(c.rec.Outbox), func(b batch) bool {
			if b.Root != c.root {
				return false
			}
			for _, s := range b.Effects {
				if !s.lateSafe() {
					need = true
				}
			}
			return true
		})
		if !need {
			return nil
		}
		rec := c.rec
		rec.Outbox = outbox
		err := c.write(ctx, rec)
		if !errors.Is(err, errConflict) {
			return err
		}
	}
}

// carry carries out the effects a write added: inline work is started (its
// result comes back on c.results), the rest is done at once.
func (c *chain) carry(ctx context.Context, todo []stored) error {
	for _, s := range todo {
		if !s.inline() {
			if err := c.e.carryOut(ctx, c.rec.Run, s, false); err != nil {
				return err
			}
			c.done[s.key()] = true
			continue
		}
		c.flying++
		run := c.rec.Run
		go func() { c.results <- c.e.inline(c.calls, run, s) }()
	}
	return nil
}
