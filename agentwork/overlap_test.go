package agentwork_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model"
)

// slowModel holds every run of the request name "slow" until release is
// closed; other runs answer at once. It reports each run as it starts and
// counts how many runs of "slow" went on at once at most.
type slowModel struct {
	started chan string
	release chan struct{}

	mu         sync.Mutex
	now, most  int
	releaseOne sync.Once
}

func newSlowModel() *slowModel {
	return &slowModel{started: make(chan string, 100), release: make(chan struct{})}
}

func (m *slowModel) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	name := req.Meta["name"]
	if name != "slow" {
		m.started <- name
		return model.Reply{Text: "ok", Model: "slow-model"}, nil
	}
	// Counted before it is reported: a test that unblocks the runs as soon
	// as the second one started must find both counted.
	m.mu.Lock()
	m.now++
	m.most = max(m.most, m.now)
	m.mu.Unlock()
	m.started <- name
	defer func() {
		m.mu.Lock()
		m.now--
		m.mu.Unlock()
	}()
	select {
	case <-m.release:
		return model.Reply{Text: "ok", Model: "slow-model"}, nil
	case <-ctx.Done():
		return model.Reply{}, ctx.Err()
	}
}

func (m *slowModel) unblock() { m.releaseOne.Do(func() { close(m.release) }) }

func (m *slowModel) concurrent() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.most
}

// waitStarted waits until a run of name calls the model.
func (m *slowModel) waitStarted(t *testing.T, name string) {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case got := <-m.started:
			if got == name {
				return
			}
		case <-timeout:
			t.Fatalf("no run of %q called the model within %s", name, waitTimeout)
		}
	}
}

// eventOf waits for the run event caused by request id.
func eventOf(s *sink, id string) received {
	s.t.Helper()
	evs := s.wait("the event of request "+id, func(evs []received) bool {
		for _, e := range runOnly(evs) {
			if e.Event.CausationID == id {
				return true
			}
		}
		return false
	})
	for _, e := range runOnly(evs) {
		if e.Event.CausationID == id {
			return e
		}
	}
	return received{}
}

// Two runs of the same work, the second published while the first holds
// the model: what the second does depends on the overlap mode.
func TestOverlapModes(t *testing.T) {
	t.Parallel()
	allowGate := agentwork.InputGateFunc(func(_ context.Context, run *agentwork.Run) error {
		run.Overlap = agentwork.OverlapAllow // as a cron job's own overlap does
		return nil
	})
	tests := []struct {
		name string
		pol  agentwork.Policy
		// second is what the second run does: "queued" (done once the
		// first ended), "alongside" (calls the model while the first
		// does), or "skip".
		second     string
		detail     string // in the second's skip detail
		concurrent int
	}{
		{name: "skip", pol: agentwork.Policy{Overlap: agentwork.Overlap{Mode: agentwork.OverlapSkip}},
			second: "skip", detail: "is still going", concurrent: 1},
		{name: "queue", pol: agentwork.Policy{Overlap: agentwork.Overlap{Mode: agentwork.OverlapQueue, Poll: 20 * time.Millisecond}},
			second: "queued", concurrent: 1},
		{name: "queue, overtaken by newer work", pol: agentwork.Policy{Overlap: agentwork.Overlap{Mode: agentwork.OverlapQueue, Poll: 20 * time.Millisecond,
			Superseded: func(run *agentwork.Run, _ time.Time) bool { return run.Request.Metadata["n"] == "2" }}},
			second: "skip", detail: "a newer cron tick has replaced this one", concurrent: 1},
		{name: "allow", pol: agentwork.Policy{Overlap: agentwork.Overlap{Mode: agentwork.OverlapAllow}},
			second: "alongside", concurrent: 2},
		{name: "default: allow", second: "alongside", concurrent: 2},
		{name: "an input gate allows this run", pol: agentwork.Policy{Input: []agentwork.InputGate{allowGate}, Overlap: agentwork.Overlap{Mode: agentwork.OverlapSkip}},
			second: "alongside", concurrent: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			m := newSlowModel()
			t.Cleanup(m.unblock)
			startRunner(t, b, m, testConfig(), map[string]agentwork.Policy{"cron": tt.pol})
			req := func(n string) agentwork.Request {
				return agentwork.Request{Source: "cron", Name: "slow", Prompt: "go", Metadata: map[string]string{"n": n}}
			}
			first := publish(t, b, req("1"))
			m.waitStarted(t, "slow")
			running, err := agentwork.Running(t.Context(), b, agentwork.OverlapKey("cron", "slow"))
			if err != nil {
				t.Fatal(err)
			}
			if tt.pol.Overlap.Mode == agentwork.OverlapSkip && tt.pol.Input == nil || tt.pol.Overlap.Mode == agentwork.OverlapQueue {
				if running == nil || running.RequestID != first || running.Owner != b.Instance() {
					t.Fatalf("Running = %+v, want the lease of request %s held by %s", running, first, b.Instance())
				}
			} else if running != nil {
				t.Fatalf("Running = %+v, want no lease taken", running)
			}
			// Work of another name is not held up.
			other := publish(t, b, agentwork.Request{Source: "cron", Name: "other", Prompt: "go"})
			if ev := eventOf(events, other); ev.Run.Outcome != bus.OutcomeDone {
				t.Fatalf("run of another name = %s %s, want done while the first runs", ev.Run.Outcome, ev.Run.Reason)
			}

			second := publish(t, b, req("2"))
			switch tt.second {
			case "queued":
				waitClaimState(t, b, second, "deferred") // waiting, not run
			case "alongside":
				m.waitStarted(t, "slow")
			case "skip":
				ev := eventOf(events, second)
				if ev.Run.Outcome != bus.OutcomeSkip || ev.Run.Reason != agentwork.ReasonBusy || !strings.Contains(ev.Run.Detail, tt.detail) ||
					!strings.Contains(ev.Run.Detail, running.RunID) || !strings.Contains(ev.Run.Detail, b.Instance()) {
					t.Errorf("second run = %s %s %q, want skip busy naming run %s on %s and saying %q",
						ev.Run.Outcome, ev.Run.Reason, ev.Run.Detail, running.RunID, b.Instance(), tt.detail)
				}
			}
			m.unblock()
			firstEv := eventOf(events, first)
			secondEv := eventOf(events, second)
			if firstEv.Run.Outcome != bus.OutcomeDone {
				t.Fatalf("first run = %s, want done", firstEv.Run.Outcome)
			}
			if tt.second != "skip" && secondEv.Run.Outcome != bus.OutcomeDone {
				t.Errorf("second run = %s %s, want done", secondEv.Run.Outcome, secondEv.Run.Detail)
			}
			if got := m.concurrent(); got != tt.concurrent {
				t.Errorf("runs of the same work at once = %d, want %d", got, tt.concurrent)
			}
			// The lease is given back before the event: work started on
			// seeing the event finds it free.
			if running, err := agentwork.Running(t.Context(), b, agentwork.OverlapKey("cron", "slow")); err != nil || running != nil {
				t.Errorf("Running after the runs ended = %+v, %v; want none", running, err)
			}
			third := publish(t, b, req("3"))
			if ev := eventOf(events, third); ev.Run.Outcome != bus.OutcomeDone {
				t.Errorf("a run after the others ended = %s %s, want done", ev.Run.Outcome, ev.Run.Detail)
			}
			waitRequestsSettled(t, b)
			checkRunEvents(t, b, events.final())
		})
	}
}

// Who holds a lease: a live run blocks the work; a lease whose holder is
// gone does not, however long it was meant to last.
func TestOverlapLeaseHolders(t *testing.T) {
	t.Parallel()
	const earlierRun = "0190d6a4-0000-7000-8000-00000000dead"
	hour := time.Now().Add(time.Hour).UTC()
	tests := []struct {
		name string
		// holder is the stored lease record (client: another live
		// instance in this process).
		holder func(client *bus.Bus) any
		// takeover: the request's claim is an earlier, crashed take of run
		// earlierRun.
		takeover bool
		want     string
	}{
		{name: "another live instance of this process: busy", holder: func(c *bus.Bus) any {
			return agentwork.OverlapLease{Lease: c.NewLease(hour), RunID: "r", Since: time.Now().Add(-time.Minute).UTC()}
		}, want: "skip"},
		{name: "an external instance before its lease expires: busy", holder: func(*bus.Bus) any {
			return agentwork.OverlapLease{Lease: bus.Lease{Owner: "other-host", Token: "t", Expires: hour}, RunID: "r"}
		}, want: "skip"},
		{name: "a process on this data dir that is gone: free at once", holder: func(*bus.Bus) any {
			return agentwork.OverlapLease{Lease: bus.Lease{Owner: "killed", Token: "t", Boot: "deadbeef", Expires: hour}, RunID: "r"}
		}, want: "done"},
		{name: "expired", holder: func(*bus.Bus) any {
			return agentwork.OverlapLease{Lease: bus.Lease{Owner: "other-host", Token: "t", Expires: time.Now().Add(-time.Second).UTC()}, RunID: "r"}
		}, want: "done"},
		{name: "unreadable", holder: func(*bus.Bus) any { return json.RawMessage(`"not a lease"`) }, want: "done"},
		{name: "an earlier take of the same run, whose claim this run took over", holder: func(c *bus.Bus) any {
			return agentwork.OverlapLease{Lease: c.NewLease(hour), RunID: earlierRun}
		}, takeover: true, want: "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			client := bustest.Client(t, b)
			events := watchEvents(t, b)
			raw, err := json.Marshal(tt.holder(client))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Locks.Put(t.Context(), agentwork.OverlapKey("cron", "job"), raw); err != nil {
				t.Fatal(err)
			}
			id := bus.NewID()
			if tt.takeover {
				putClaim(t, b, id, claimRecord{State: "running", RunID: earlierRun, Owner: "gone", Expires: time.Now().Add(-time.Second), Attempts: 1})
			}
			m := newSlowModel()
			startRunner(t, b, m, testConfig(), map[string]agentwork.Policy{"cron": {Overlap: agentwork.Overlap{Mode: agentwork.OverlapSkip}}})
			if _, err := agentwork.Publish(t.Context(), b, agentwork.Request{Source: "cron", Name: "job", Prompt: "go"}, agentwork.PublishOptions{EventID: id}); err != nil {
				t.Fatal(err)
			}
			ev := eventOf(events, id)
			if ev.Run.Outcome != tt.want {
				t.Fatalf("run = %s %s %q, want %s", ev.Run.Outcome, ev.Run.Reason, ev.Run.Detail, tt.want)
			}
			if tt.want == bus.OutcomeSkip && (ev.Run.Reason != agentwork.ReasonBusy || !strings.Contains(ev.Run.Detail, "the cron run r ")) {
				t.Errorf("skip %s %q, want busy naming run r", ev.Run.Reason, ev.Run.Detail)
			}
			if tt.takeover && ev.Event.RunID != earlierRun {
				t.Errorf("run id = %s, want the taken-over run's %s", ev.Event.RunID, earlierRun)
			}
		})
	}
}

// The overlap lease is short and renewed with the run claim: a run that
// outlasts it still holds its work.
func TestOverlapLeaseIsRenewedWithTheClaim(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	m := newSlowModel()
	t.Cleanup(m.unblock)
	cfg := testConfig()
	cfg.AckWait = time.Second // leases of 2s, renewed every 667ms
	startRunner(t, b, m, cfg, map[string]agentwork.Policy{"cron": {Overlap: agentwork.Overlap{Mode: agentwork.OverlapSkip}}})
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	w, err := b.Locks.Watch(ctx, agentwork.OverlapKey("cron", "slow"), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first := publish(t, b, agentwork.Request{Source: "cron", Name: "slow", Prompt: "go"})
	m.waitStarted(t, "slow")
	// Wait, on the watch, until the lease is written at a time past the
	// expiry it was first taken with.
	var taken time.Time
	for renewedPastExpiry := false; !renewedPastExpiry; {
		select {
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var l agentwork.OverlapLease
			if err := json.Unmarshal(e.Value(), &l); err != nil {
				t.Fatal(err)
			}
			if taken.IsZero() {
				taken = l.Expires
			}
			renewedPastExpiry = time.Now().After(taken)
		case <-ctx.Done():
			t.Fatalf("the overlap lease was not renewed past its first expiry %s", taken)
		}
	}
	second := publish(t, b, agentwork.Request{Source: "cron", Name: "slow", Prompt: "go"})
	if ev := eventOf(events, second); ev.Run.Outcome != bus.OutcomeSkip || ev.Run.Reason != agentwork.ReasonBusy {
		t.Fatalf("second run = %s %s, want skip busy: the first still runs", ev.Run.Outcome, ev.Run.Reason)
	}
	m.unblock()
	if ev := eventOf(events, first); ev.Run.Outcome != bus.OutcomeDone {
		t.Fatalf("first run = %s, want done", ev.Run.Outcome)
	}
}
