package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/workflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for something the engine does.
const waitTimeout = 30 * time.Second

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
	if err := set.Validate(workflow.Options{}); err != nil {
		t.Fatal(err)
	}
	return set
}

// sideEffects are the tools of the tests, each with a side effect a test
// can read: line appends "<run> <step>" to a file (not idempotent), put
// writes a file of its own (idempotent).
type sideEffects struct {
	dir   string
	mu    sync.Mutex
	calls map[string]int // put calls by name
	// block, if set, is called inside line after its line is written.
	block func(ctx context.Context, line string) error
}

func newSideEffects(t *testing.T) *sideEffects {
	return &sideEffects{dir: t.TempDir(), calls: map[string]int{}}
}

type lineArgs struct {
	Line string `json:"line"`
}

func (s *sideEffects) tools() *tools.Registry {
	line := tools.Func("line", "append a line", func(ctx context.Context, a lineArgs) (string, error) {
		s.mu.Lock()
		f, err := os.OpenFile(filepath.Join(s.dir, "lines"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			_, err = f.WriteString(a.Line + "\n")
			f.Close()
		}
		block := s.block
		s.mu.Unlock()
		if err != nil {
			return "", err
		}
		if block != nil {
			if err := block(ctx, a.Line); err != nil {
				return "", err
			}
		}
		return `{"wrote":"` + a.Line + `"}`, nil
	})
	put := tools.Func("put", "write a file", func(_ context.Context, a lineArgs) (string, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.calls[a.Line]++
		return `{"put":"` + a.Line + `"}`, os.WriteFile(filepath.Join(s.dir, "put-"+strings.ReplaceAll(a.Line, " ", "_")), []byte(a.Line), 0o600)
	})
	put.Idempotent = true
	reg, err := tools.NewRegistry(line, put)
	if err != nil {
		panic(err)
	}
	return reg
}

// lines returns how often each line was written.
func (s *sideEffects) lines(t *testing.T) map[string]int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(s.dir, "lines"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if l != "" {
			n[l]++
		}
	}
	return n
}

func testConfig(set workflow.Set, reg ...tools.Source) workflow.Config {
	return workflow.Config{Definitions: set, Tools: reg, AckWait: 2 * time.Second, ShutdownGrace: 2 * time.Second, Concurrency: 8}
}

// engine runs an engine on its own connection to b until stop (or the
// test's end).
type engine struct {
	*workflow.Engine
	stop func()
}

func startEngine(t *testing.T, b *bus.Bus, cfg workflow.Config, hook func(point, key string) error) *engine {
	t.Helper()
	c := bustest.Client(t, b)
	e := workflow.NewEngine(c, cfg)
	if hook != nil {
		workflow.SetHook(e, hook)
	}
	return &engine{Engine: e, stop: runInBackground(t, "Engine", e.Run)}
}

func runInBackground(t *testing.T, what string, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	errc := make(chan error, 1)
	go func() { errc <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("%s.Run = %v, want nil", what, err)
				}
			case <-time.After(waitTimeout):
				t.Errorf("%s.Run did not return", what)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// events collects the workflow events of the bus, from its first.
type events struct {
	mu   sync.Mutex
	evs  []bus.Event
	more chan struct{}
}

func watchEvents(t *testing.T, b *bus.Bus) *events {
	t.Helper()
	return watchEventsOf(t, b, bus.SourceWorkflow)
}

// watchEventsOf collects the events of source.
func watchEventsOf(t *testing.T, b *bus.Bus, source string) *events {
	t.Helper()
	w := &events{more: make(chan struct{}, 1)}
	cons, err := b.JetStream().OrderedConsumer(t.Context(), bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subjects.Event(source, "*")},
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev, err := bus.DecodeEvent(m.Data())
		if err != nil {
			t.Errorf("event does not decode: %v", err)
			return
		}
		w.mu.Lock()
		w.evs = append(w.evs, ev)
		w.mu.Unlock()
		select {
		case w.more <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return w
}

// of returns the events of run of type agentwork.workflow.<outcome>.
func (w *events) of(run, outcome string) []bus.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []bus.Event
	for _, ev := range w.evs {
		if ev.RunID == run && (outcome == "" || ev.Type == bus.TypeOf(bus.SourceWorkflow, outcome)) {
			out = append(out, ev)
		}
	}
	return out
}

// wait waits until ok holds.
func (w *events) wait(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for !ok() {
		select {
		case <-w.more:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitRecord waits until the stored record of run satisfies ok, on the
// record's updates.
func waitRecord(t *testing.T, b *bus.Bus, run, what string, ok func([]byte) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	watch, err := b.WorkflowRuns.Watch(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Stop() }()
	for {
		select {
		case u := <-watch.Updates():
			if u != nil && ok(u.Value()) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitEnd waits for run's outcome event and returns the run as stored.
func waitEnd(t *testing.T, w *events, e *engine, run string) workflow.Run {
	t.Helper()
	w.wait(t, "run "+run+" to end", func() bool {
		for _, o := range []string{"done", "failed", "cancelled", "timed_out"} {
			if len(w.of(run, o)) > 0 {
				return true
			}
		}
		return false
	})
	r, err := e.Get(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const sixSteps = `
six:
  inputs: {n: {type: string, required: true}}
  steps:
    - {id: s1, tool: line, args: {line: "${{ inputs.n }} s1"}}
    - {id: s2, tool: line, args: {line: "${{ inputs.n }} s2"}}
    - {id: s3, tool: line, args: {line: "${{ inputs.n }} s3"}}
    - {id: s4, tool: line, args: {line: "${{ inputs.n }} s4"}}
    - {id: s5, tool: line, args: {line: "${{ inputs.n }} s5"}}
    - {id: s6, tool: line, args: {line: "${{ inputs.n }} s6"}}
`

// seqs sums the last sequences of the streams a run writes to.
func seqs(t *testing.T, b *bus.Bus) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, name := range []string{"KV_" + bus.BucketWorkflowRuns, bus.StreamEvents, bus.StreamWorkflows, bus.StreamTimers} {
		s, err := b.JetStream().Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = s.CachedInfo().State.LastSeq
	}
	return out
}

func TestSixToolStepsRunToDone(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	fx := newSideEffects(t)
	w := watchEvents(t, b)
	e := startEngine(t, b, testConfig(defs(t, sixSteps), fx.tools()), nil)
	before := seqs(t, b)
	run, created, err := e.Start(t.Context(), "six", map[string]any{"n": "r1"}, workflow.StartOptions{})
	if err != nil || !created || run.Status != workflow.RunPending {
		t.Fatalf("Start = %s, %v, %v; want a pending run, created", run.Status, created, err)
	}
	got := waitEnd(t, w, e, run.ID)
	if got.Status != workflow.RunDone {
		t.Fatalf("run ended %s (%v), want done", got.Status, got.Error)
	}
	for i := 1; i <= 6; i++ {
		id := fmt.Sprintf("s%d", i)
		st := got.Steps[id]
		want := map[string]any{"wrote": "r1 " + id}
		if fmt.Sprint(st.Output) != fmt.Sprint(want) || st.Status != workflow.StepDone || len(st.Calls) != 1 || st.Calls[0].Outcome != tools.OutcomeOK {
			t.Errorf("step %s = %s %v, calls %+v; want done %v with one ok call", id, st.Status, st.Output, st.Calls, want)
		}
		if n := fx.lines(t)["r1 "+id]; n != 1 {
			t.Errorf("line of %s written %d times, want 1", id, n)
		}
	}
	// Each step's events once, the run's once.
	counts := map[string]int{}
	for _, ev := range w.of(run.ID, "") {
		var d struct{ Step string }
		_ = json.Unmarshal(ev.Data, &d)
		counts[strings.TrimPrefix(ev.Type, "agentwork.workflow.")+" "+d.Step]++
	}
	for i := 1; i <= 6; i++ {
		for _, what := range []string{"step_started", "step_finished"} {
			if n := counts[fmt.Sprintf("%s s%d", what, i)]; n != 1 {
				t.Errorf("%s of s%d: %d events, want 1", what, i, n)
			}
		}
	}
	if counts["started "] != 1 || counts["done "] != 1 {
		t.Errorf("run events: %v; want started and done once", counts)
	}
	// Wait for the run's last write (the chain's cleanup) before counting:
	// on the run's record itself (the cleanup comes after the last event).
	waitRecord(t, b, run.ID, "the outbox to be empty", func(v []byte) bool { return !strings.Contains(string(v), `"outbox"`) })
	after := seqs(t, b)
	total := 0
	for k, v := range after {
		d := int(v - before[k])
		total += d
		t.Logf("writes to %s: %d", k, d)
	}
	t.Logf("bus writes for a run of 6 tool steps: %d (%.2f per step)", total, float64(total)/6)
}

// TestForgoIsRunOrMissed: a key Forgo settles never starts a run, and a
// key whose run started is not forgone.
func TestForgoIsRunOrMissed(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	set := defs(t, fmt.Sprintf(waiting, "queue"))
	e := startEngine(t, b, testConfig(set), nil)
	cron := workflow.Cause{Kind: workflow.CauseCron, ID: "wf-busy-0@t"}
	ok, err := e.Forgo(t.Context(), "busy", workflow.StartOptions{IdempotencyKey: "tick1", Cause: cron}, "missed")
	if err != nil || !ok {
		t.Fatalf("Forgo(tick1) = %v, %v; want true", ok, err)
	}
	run, created, err := e.Start(t.Context(), "busy", nil, workflow.StartOptions{IdempotencyKey: "tick1", Cause: cron})
	if err != nil || created || run.Status != workflow.RunSkipped || run.Error == nil || run.Error.Kind != workflow.ErrMissed {
		t.Fatalf("Start(tick1) after Forgo = %s %v, created %v, %v; want the skipped (missed) run, not created", run.Status, run.Error, created, err)
	}
	run, created, err = e.Start(t.Context(), "busy", nil, workflow.StartOptions{IdempotencyKey: "tick2", Cause: cron})
	if err != nil || !created {
		t.Fatalf("Start(tick2) = %v, %v", created, err)
	}
	if ok, err := e.Forgo(t.Context(), "busy", workflow.StartOptions{IdempotencyKey: "tick2", Cause: cron}, "missed"); err != nil || ok {
		t.Errorf("Forgo(tick2) after its run started = %v, %v; want false", ok, err)
	}
	if got, err := e.Get(t.Context(), run.ID); err != nil || got.Status == workflow.RunSkipped {
		t.Errorf("run of tick2 = %s, %v; want it left as it was", got.Status, err)
	}
}
