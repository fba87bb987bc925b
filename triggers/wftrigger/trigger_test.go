package wftrigger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/triggers/cron"
	"github.com/agentwork/agentwork/triggers/wftrigger"
	"github.com/agentwork/agentwork/workflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitFor = 30 * time.Second

// defs decodes and validates a workflows section.
func defs(t *testing.T, src string) workflow.Set {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	set, err := workflow.Decode(&n, "workflows")
	if err != nil {
		t.Fatal(err)
	}
	check := func(expr string, loc *time.Location) error { _, err := cron.ParseSchedule(expr, loc); return err }
	if err := set.Validate(workflow.Options{Schedule: check}); err != nil {
		t.Fatal(err)
	}
	return set
}

// instance is one agentwork instance's engine and workflow trigger, on
// its own connection to the bus.
type instance struct {
	bus     *bus.Bus
	engine  *workflow.Engine
	trigger *wftrigger.Trigger
	stops   []func()
}

func (in *instance) stop() {
	for _, s := range slices.Backward(in.stops) {
		s()
	}
}

func newInstance(t *testing.T, b *bus.Bus, set workflow.Set) *instance {
	t.Helper()
	noop := tools.Func("noop", "do nothing", func(context.Context, struct{}) (string, error) { return `{"ok":true}`, nil })
	reg, err := tools.NewRegistry(noop)
	if err != nil {
		t.Fatal(err)
	}
	c := bustest.Client(t, b)
	e := workflow.NewEngine(c, workflow.Config{Definitions: set, Tools: []tools.Source{reg}, AckWait: 2 * time.Second, ShutdownGrace: 2 * time.Second})
	tr, err := wftrigger.New(c, e)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	in := &instance{bus: c, engine: e, trigger: tr}
	in.stops = append(in.stops, run(t, "Engine", e.Run))
	return in
}

// runTrigger runs the instance's trigger until it is ready.
func (in *instance) runTrigger(t *testing.T) {
	t.Helper()
	in.stops = append(in.stops, run(t, "Trigger", in.trigger.Run))
	waitUntil(t, "the trigger to be ready", func() bool { return in.trigger.Ready(t.Context()) == nil })
}

func run(t *testing.T, what string, fn func(context.Context) error) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	errc := make(chan error, 1)
	go func() { errc <- fn(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("%s.Run = %v, want nil", what, err)
				}
			case <-time.After(waitFor):
				t.Errorf("%s.Run did not return", what)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitUntil polls ok (what the bus holds has no event to wait on) until
// it holds, or fails the test after waitFor.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// drained waits until the event triggers' consumer has handed out and
// settled every event stored so far.
func drained(t *testing.T, b *bus.Bus) {
	t.Helper()
	waitUntil(t, "the event triggers to handle every event", func() bool {
		c, err := b.JetStream().Consumer(t.Context(), bus.StreamEvents, wftrigger.ConsumerName)
		if err != nil {
			return false
		}
		info, err := c.Info(t.Context())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// runsOf returns the runs of workflow name.
func runsOf(t *testing.T, e *workflow.Engine, name string) []workflow.Run {
	t.Helper()
	runs, err := e.List(t.Context(), workflow.Filter{Workflow: name, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// publish publishes a CloudEvent on <prefix>.event.<source>.<outcome>
// with message id msgID.
func publish(t *testing.T, b *bus.Bus, id, source, outcome, subject string, data any, msgID string) {
	t.Helper()
	ev, err := bus.NewEvent("test", bus.TypeOf(source, outcome), subject, time.Now(), data)
	if err != nil {
		t.Fatal(err)
	}
	ev.ID = id
	if _, err := b.Publish(t.Context(), b.Subjects.Event(source, outcome), ev, msgID); err != nil {
		t.Fatal(err)
	}
}

// errorEvents reads the trigger's error events.
func errorEvents(t *testing.T, b *bus.Bus) []bus.Event {
	t.Helper()
	cons, err := b.JetStream().OrderedConsumer(t.Context(), bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subjects.Event(bus.SourceWorkflow, wftrigger.OutcomeError)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []bus.Event
	for {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			ev, err := bus.DecodeEvent(m.Data())
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ev)
		}
		if n == 0 {
			return out
		}
	}
}

const cronFlow = `
ticking:
  on:
    - cron: {schedule: "* * * * * *"}
  steps:
    - {id: a, tool: noop}
`

// Two schedulers on one bus, each with its instance's workflow trigger:
// each tick starts one run, by whichever fired it.
func TestCronTriggerStartsOneRunPerTickAcrossTwoSchedulers(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	set := defs(t, cronFlow)
	results := make(chan cron.TickResult, 100)
	var scheds []*cron.Scheduler
	var stops []func()
	for range 2 {
		in := newInstance(t, b, set)
		jobs := in.trigger.CronJobs()
		if len(jobs) != 1 || jobs[0].ID != wftrigger.ID("ticking", 0) || jobs[0].Workflow != "ticking" {
			t.Fatalf("CronJobs() = %+v; want one job of workflow ticking", jobs)
		}
		s, err := cron.New(in.bus, cron.Config{}, cron.WithWorkflows(jobs, in.trigger), cron.WithTickObserver(func(r cron.TickResult) { results <- r }))
		if err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
		stops = append(stops, run(t, "Scheduler", s.Run))
	}
	var fired []time.Time
	deadline := time.After(waitFor)
	for len(fired) < 3 {
		select {
		case r := <-results:
			if r.What != "fired" {
				t.Fatalf("tick %+v; want fired", r)
			}
			fired = append(fired, r.Tick.UTC())
		case <-deadline:
			t.Fatalf("ticks fired: %v; want 3", fired)
		}
	}
	for _, stop := range stops {
		stop()
	}
drain:
	for {
		select {
		case r := <-results:
			fired = append(fired, r.Tick.UTC())
		default:
			break drain
		}
	}
	e := scheds[0]
	runs := runsOf(t, newInstance(t, b, set).engine, "ticking")
	causes := map[string]int{}
	for _, r := range runs {
		if r.Cause.Kind != workflow.CauseCron {
			t.Errorf("run %s cause %+v; want cron", r.ID, r.Cause)
		}
		causes[r.Cause.ID]++
	}
	if len(runs) != len(fired) {
		t.Errorf("%d runs for %d ticks fired (%v); want one each", len(runs), len(fired), causes)
	}
	for _, tick := range fired {
		id := wftrigger.ID("ticking", 0) + "@" + tick.Format(time.RFC3339)
		if causes[id] != 1 {
			t.Errorf("runs of tick %s: %d, want 1 (%v)", tick.Format(time.RFC3339), causes[id], causes)
		}
	}
	// The job is listed, with its workflow, and is the config's to change.
	st, err := e.Get(t.Context(), wftrigger.ID("ticking", 0))
	if err != nil || st.Job.Workflow != "ticking" || st.Job.Origin != cron.OriginWorkflow {
		t.Fatalf("Get(job) = %+v, %v; want the job of workflow ticking, origin workflow", st.Job, err)
	}
	// A tick started again is the same run.
	in := newInstance(t, b, set)
	j := st.Job
	before := len(runsOf(t, in.engine, "ticking"))
	id, err := in.trigger.StartTick(t.Context(), j, fired[0], cron.MsgID(j.ID, fired[0], 0), false)
	if err != nil || len(runsOf(t, in.engine, "ticking")) != before {
		t.Errorf("StartTick of a tick again = %s, %v; runs %d, want %d", id, err, len(runsOf(t, in.engine, "ticking")), before)
	}
	// A config without the workflow: its job goes at start.
	s, err := cron.New(b, cron.Config{})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, "Scheduler", s.Run)
	select {
	case <-s.Started():
	case <-time.After(waitFor):
		t.Fatal("scheduler not started")
	}
	if _, err := s.Get(t.Context(), j.ID); !errors.Is(err, cron.ErrNotFound) {
		t.Errorf("Get(job of a removed workflow) = %v; want not found", err)
	}
	stop()
}

const eventFlow = `
on-error:
  on:
    - event: {type: "agentwork.cron.*", subject: "nightly-*", if: "event.data.reason == 'boom'"}
  steps:
    - {id: a, tool: noop}
`

// An event trigger starts one run per matching event: type, subject and
// condition are each checked; an event redelivered (here: stored twice)
// on two instances starts one run; events from before the consumer was
// created start none, and the consumer keeps its place across a restart.
func TestEventTriggerMatchesAndStartsOneRunPerEvent(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	set := defs(t, eventFlow)
	boom := map[string]any{"reason": "boom"}
	publish(t, b, "before", bus.SourceCron, "error", "nightly-tests", boom, "before")
	in1, in2 := newInstance(t, b, set), newInstance(t, b, set)
	in1.runTrigger(t)
	in2.runTrigger(t)
	publish(t, b, "wrong-type", bus.SourceHeartbeat, "error", "nightly-tests", boom, "wrong-type")
	publish(t, b, "wrong-subject", bus.SourceCron, "error", "daily", boom, "wrong-subject")
	publish(t, b, "wrong-data", bus.SourceCron, "error", "nightly-tests", map[string]any{"reason": "fine"}, "wrong-data")
	for i := range 3 { // one event, stored three times: as handed out again
		publish(t, b, "match", bus.SourceCron, "error", "nightly-tests", boom, fmt.Sprintf("match-copy-%d", i))
	}
	publish(t, b, "match-2", bus.SourceCron, "done", "nightly-x", boom, "match-2")
	drained(t, b)
	got := map[string]int{}
	for _, r := range runsOf(t, in1.engine, "on-error") {
		got[r.Cause.ID]++
		if r.Cause.Kind != workflow.CauseEvent || r.Depth != 0 {
			t.Errorf("run %s: cause %+v, depth %d; want event, 0", r.ID, r.Cause, r.Depth)
		}
		if d, _ := r.Event["data"].(map[string]any); d["reason"] != "boom" || r.Event["id"] != r.Cause.ID {
			t.Errorf("run %s event = %v; want the event that started it", r.ID, r.Event)
		}
	}
	if want := map[string]int{"match": 1, "match-2": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runs by event: %v; want %v", got, want)
	}
	// Stopped, then started again: the events of the time between start
	// their runs.
	in1.stop()
	in2.stop()
	publish(t, b, "while-down", bus.SourceCron, "error", "nightly-y", boom, "while-down")
	in3 := newInstance(t, b, set)
	in3.runTrigger(t)
	drained(t, b)
	got = map[string]int{}
	for _, r := range runsOf(t, in3.engine, "on-error") {
		got[r.Cause.ID]++
	}
	if want := map[string]int{"match": 1, "match-2": 1, "while-down": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runs by event after a restart: %v; want %v", got, want)
	}
}

const selfFlow = `
selfie:
  on:
    - event: {type: agentwork.workflow.done, subject: selfie}
  steps:
    - {id: a, tool: noop}
`

// A workflow started by its own end event starts itself again, one
// deeper each time, until the depth limit: there one error event names
// the trigger and the chain, and no run starts.
func TestSelfTriggeringChainStopsAtTheDepthLimit(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	set := defs(t, selfFlow)
	in1, in2 := newInstance(t, b, set), newInstance(t, b, set)
	in1.runTrigger(t)
	in2.runTrigger(t)
	first, _, err := in1.engine.Start(t.Context(), "selfie", nil, workflow.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the error event", func() bool { return len(errorEvents(t, b)) > 0 })
	waitUntil(t, "every run to end", func() bool {
		for _, r := range runsOf(t, in1.engine, "selfie") {
			if !r.Status.Ended() {
				return false
			}
		}
		return true
	})
	drained(t, b)
	runs := runsOf(t, in1.engine, "selfie")
	depths := map[int]int{}
	for _, r := range runs {
		depths[r.Depth]++
		if r.Status != workflow.RunDone {
			t.Errorf("run %s ended %s, want done", r.ID, r.Status)
		}
	}
	if len(runs) != workflow.MaxDepth+1 {
		t.Errorf("%d runs (by depth %v); want %d: depths 0 to %d once each", len(runs), depths, workflow.MaxDepth+1, workflow.MaxDepth)
	}
	for d := 0; d <= workflow.MaxDepth; d++ {
		if depths[d] != 1 {
			t.Errorf("runs at depth %d: %d, want 1", d, depths[d])
		}
	}
	evs := errorEvents(t, b)
	if len(evs) != 1 {
		t.Fatalf("%d error events, want 1", len(evs))
	}
	var data struct {
		Trigger string   `json:"trigger"`
		Depth   int      `json:"depth"`
		Limit   int      `json:"limit"`
		Chain   []string `json:"chain"`
		Error   string   `json:"error"`
	}
	if err := json.Unmarshal(evs[0].Data, &data); err != nil {
		t.Fatal(err)
	}
	if evs[0].Type != "agentwork.workflow.error" || evs[0].Source != wftrigger.Producer || data.Trigger != wftrigger.ID("selfie", 0) ||
		data.Depth != workflow.MaxDepth+1 || data.Limit != workflow.MaxDepth || len(data.Chain) != workflow.MaxDepth+1 {
		t.Errorf("error event %s %s %s; want type agentwork.workflow.error naming trigger %s, depth %d, a chain of %d runs",
			evs[0].Type, evs[0].Source, evs[0].Data, wftrigger.ID("selfie", 0), workflow.MaxDepth+1, workflow.MaxDepth+1)
	}
	if last := data.Chain[len(data.Chain)-1]; len(data.Chain) > 0 && last != fmt.Sprintf("selfie/%s (depth 0, manual)", first.ID) {
		t.Errorf("chain ends %q; want the first run, started by hand", last)
	}
}

// A config without event triggers removes their consumer: one added
// later starts with the events from then on, not those of the time
// between.
func TestNoEventTriggersRemovesTheConsumer(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	boom := map[string]any{"reason": "boom"}
	in1 := newInstance(t, b, defs(t, eventFlow))
	in1.runTrigger(t)
	in1.stop()
	publish(t, b, "between", bus.SourceCron, "error", "nightly-tests", boom, "between")
	in2 := newInstance(t, b, defs(t, cronFlow))
	in2.runTrigger(t)
	if _, err := b.JetStream().Consumer(t.Context(), bus.StreamEvents, wftrigger.ConsumerName); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("consumer after a start without event triggers: %v; want it removed", err)
	}
	in2.stop()
	in3 := newInstance(t, b, defs(t, eventFlow))
	in3.runTrigger(t)
	publish(t, b, "after", bus.SourceCron, "error", "nightly-tests", boom, "after")
	// Events are handled in order: once the run of "after" is there, a
	// run of "between" would be too.
	waitUntil(t, "the run of the event after", func() bool { return len(runsOf(t, in3.engine, "on-error")) > 0 })
	drained(t, b)
	var got []string
	for _, r := range runsOf(t, in3.engine, "on-error") {
		got = append(got, r.Cause.ID)
	}
	if !slices.Equal(got, []string{"after"}) {
		t.Errorf("runs by event: %v; want only the event published after the trigger came back", got)
	}
}
