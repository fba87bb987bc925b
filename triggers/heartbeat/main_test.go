package heartbeat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for something the pipeline does.
const waitTimeout = 15 * time.Second

// monday is 2026-03-09 10:00:30 UTC, a Monday, half a minute after a
// minute boundary (so a first start does not fire at once).
var monday = time.Date(2026, 3, 9, 10, 0, 30, 0, time.UTC)

// nextYear is 2027-03-08 10:00:30 UTC, a Monday: the clock of tests that
// run the schedule only to look at it. Its ticks lie ahead of the real
// clock, so the timers of the time engine (which fire on the server's
// clock) do not fire during the test.
var nextYear = time.Date(2027, 3, 8, 10, 0, 30, 0, time.UTC)

const checklistText = "# Heartbeat\n\n- [ ] Check that the nightly backup finished\n<!-- private note -->\n"

// writeChecklist writes HEARTBEAT.md into dir.
func writeChecklist(t *testing.T, dir, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "HEARTBEAT.md"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeModel counts calls and answers with fn (default: the script rules).
type fakeModel struct {
	// runs counts calls that start a run (the last message is the user's).
	runs  atomic.Int64
	calls atomic.Int64
	// active and maxActive track concurrent runs.
	active, maxActive atomic.Int64
	mu                sync.Mutex
	prompts           []string
	fn                func(ctx context.Context, req model.Request) (model.Reply, error)
}

func newModel(fn func(ctx context.Context, req model.Request) (model.Reply, error)) *fakeModel {
	return &fakeModel{fn: fn}
}

// scripted answers with the script provider's rules.
func scripted(t *testing.T, rules ...script.Rule) *fakeModel {
	t.Helper()
	p, err := script.New(script.Config{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	return newModel(p.Complete)
}

func (m *fakeModel) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	m.calls.Add(1)
	first := len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == model.RoleUser
	if first {
		m.runs.Add(1)
		m.mu.Lock()
		m.prompts = append(m.prompts, req.Messages[len(req.Messages)-1].Content)
		m.mu.Unlock()
		n := m.active.Add(1)
		defer m.active.Add(-1)
		for {
			old := m.maxActive.Load()
			if n <= old || m.maxActive.CompareAndSwap(old, n) {
				break
			}
		}
	}
	return m.fn(ctx, req)
}

func (m *fakeModel) lastPrompt() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.prompts) == 0 {
		return ""
	}
	return m.prompts[len(m.prompts)-1]
}

// notifyReply is a reply that calls notify_user with each text, in order.
func notifyReply(texts ...string) model.Reply {
	r := model.Reply{Text: "checked"}
	for i, s := range texts {
		args, _ := json.Marshal(map[string]string{"text": s})
		r.ToolCalls = append(r.ToolCalls, model.ToolCall{ID: fmt.Sprintf("call_%d", i), Name: tools.NotifyName, Arguments: string(args)})
	}
	return r
}

// answer returns fn for a fixed first reply; the reply after tool results
// is plain text, as a real model's would be.
func answer(first model.Reply) func(context.Context, model.Request) (model.Reply, error) {
	return func(_ context.Context, req model.Request) (model.Reply, error) {
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == model.RoleTool {
			return model.Reply{Text: "done"}, nil
		}
		return first, nil
	}
}

// newHeartbeat builds a heartbeat on b whose checklist lives in dir.
func newHeartbeat(t *testing.T, b *bus.Bus, cfg heartbeat.Config, clk clock.Clock, dir string) *heartbeat.Heartbeat {
	t.Helper()
	h, err := heartbeat.New(b, cfg, heartbeat.WithClock(clk), heartbeat.WithBaseDir(dir))
	if err != nil {
		t.Fatalf("heartbeat.New: %v", err)
	}
	h.SetQueuePoll(20 * time.Millisecond)
	return h
}

// startRunner runs a real runner on b with the heartbeat's policy and one
// connector named console.
func startRunner(t *testing.T, b *bus.Bus, p model.Provider, h *heartbeat.Heartbeat, clk clock.Clock) {
	t.Helper()
	reg, err := tools.NewRegistry(tools.Notify())
	if err != nil {
		t.Fatal(err)
	}
	r := agentwork.NewRunner(b, p, reg, agentwork.Config{
		Concurrency: 4, MaxAttempts: 2, Backoff: []time.Duration{10 * time.Millisecond}, ShutdownGrace: 5 * time.Second,
	}, agentwork.WithClock(clk.Now), agentwork.WithConnectors("console"))
	r.Handle(bus.SourceHeartbeat, h.Policy())
	runInBackground(t, "Runner", r.Run)
}

// serveAPI serves h's NATS API on b until the test ends, as serve does
// beside Run.
func serveAPI(t *testing.T, b *bus.Bus, h *heartbeat.Heartbeat) {
	t.Helper()
	stop, err := b.StartService(h.Service())
	if err != nil {
		t.Fatalf("StartService: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop the API: %v", err)
		}
	})
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
				t.Errorf("%s.Run did not return within %s of cancel", what, waitTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// outcome is one heartbeat run event.
type outcome struct {
	Event  bus.Event
	Result agentwork.Result
}

func (o outcome) String() string {
	s := o.Result.Outcome
	if o.Result.Reason != "" {
		s += "/" + o.Result.Reason
	}
	if o.Result.Text != "" {
		s += " " + fmt.Sprintf("%q", o.Result.Text)
	}
	if o.Result.ScheduledAt != nil {
		s += " @" + o.Result.ScheduledAt.Format("15:04:05")
	}
	if o.Result.Manual {
		s += " manual"
	}
	return s
}

// sink records the heartbeat run events published on b.
type sink struct {
	t    *testing.T
	nc   *nats.Conn
	mu   sync.Mutex
	evs  []outcome
	wake chan struct{}
}

func watch(t *testing.T, b *bus.Bus) *sink {
	t.Helper()
	s := &sink{t: t, nc: b.Conn(), wake: make(chan struct{}, 1)}
	sub, err := b.Conn().Subscribe(b.Subjects.Event(bus.SourceHeartbeat, "*"), func(m *nats.Msg) {
		ev, err := bus.DecodeEvent(m.Data)
		var o outcome
		if err == nil {
			o.Event = ev
			err = ev.DecodeData(&o.Result)
		}
		if err != nil {
			t.Errorf("event on %s: %v", m.Subject, err)
			return
		}
		s.mu.Lock()
		s.evs = append(s.evs, o)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return s
}

func (s *sink) all() []outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]outcome(nil), s.evs...)
}

// wait blocks until n run events were seen and returns them.
func (s *sink) wait(n int) []outcome {
	s.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		if evs := s.all(); len(evs) >= n {
			return evs
		}
		select {
		case <-s.wake:
		case <-deadline.C:
			s.t.Fatalf("timed out after %s waiting for %d heartbeat event(s); have %v", waitTimeout, n, s.all())
		}
	}
}

// settle flushes the connection so every event published so far was seen.
func (s *sink) settle() []outcome {
	s.t.Helper()
	if err := s.nc.Flush(); err != nil {
		s.t.Fatal(err)
	}
	return s.all()
}

// waitFor polls cond (a KV read, a counter) until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
	}
}

// waitArmed waits until a running heartbeat has armed its timer (its
// next fire is in the state).
func waitArmed(t *testing.T, b *bus.Bus) {
	t.Helper()
	waitFor(t, "the heartbeat's timer armed", func() bool {
		e, err := b.State.Get(t.Context(), "heartbeat.default")
		if err != nil {
			return false
		}
		var st heartbeat.State
		return json.Unmarshal(e.Value(), &st) == nil && !st.NextFire.IsZero()
	})
}

// waitIdle waits until no heartbeat holds the overlap lease. The runner
// releases it just before the run's event; the lease is gone once the
// event is seen, so this returns at once unless that breaks.
func waitIdle(t *testing.T, b *bus.Bus) {
	t.Helper()
	waitFor(t, "the overlap lease to be released", func() bool {
		_, err := b.Locks.Get(t.Context(), agentwork.OverlapKey(bus.SourceHeartbeat, "default"))
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}

// state reads the heartbeat's state record (zero when there is none).
func state(t *testing.T, b *bus.Bus, name string) heartbeat.State {
	t.Helper()
	var st heartbeat.State
	e, err := b.State.Get(t.Context(), "heartbeat."+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return st
	}
	if err != nil {
		t.Fatalf("state heartbeat.%s: %v", name, err)
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// requestsStored counts the requests stored for the heartbeat name.
func requestsStored(t *testing.T, b *bus.Bus, name string) uint64 {
	t.Helper()
	st, err := b.JetStream().Stream(t.Context(), bus.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	subj := b.Subjects.Request(bus.SourceHeartbeat, name)
	info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subj]
}
