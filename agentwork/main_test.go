package agentwork_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for something the pipeline does.
const waitTimeout = 15 * time.Second

// testConfig is a runner config with retry delays small enough for tests.
func testConfig() agentwork.Config {
	return agentwork.Config{
		Concurrency:   4,
		MaxAttempts:   3,
		Backoff:       []time.Duration{10 * time.Millisecond},
		ShutdownGrace: 5 * time.Second,
	}
}

// startRunner runs a runner on b with the notify_user tool and the given
// policies until the test ends or stop is called. stop waits for Run to
// return, so after it every run of this instance has ended.
func startRunner(t *testing.T, b *bus.Bus, p model.Provider, cfg agentwork.Config, policies map[string]agentwork.Policy, opts ...agentwork.Option) (stop func()) {
	t.Helper()
	reg, err := tools.NewRegistry(tools.Notify())
	if err != nil {
		t.Fatal(err)
	}
	r := agentwork.NewRunner(b, p, reg, cfg, opts...)
	for src, pol := range policies {
		r.Handle(src, pol)
	}
	return runInBackground(t, "Runner", r.Run)
}

// startDispatcher delivers queued notifications to the connectors in reg.
func startDispatcher(t *testing.T, b *bus.Bus, reg connectors.Registry) (stop func()) {
	t.Helper()
	d := connectors.NewDispatcher(b, reg, connectors.DispatcherConfig{
		MaxAttempts: 2, Backoff: []time.Duration{10 * time.Millisecond}, SendTimeout: 5 * time.Second,
	}, nil)
	return runInBackground(t, "Dispatcher", d.Run)
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

// scripted returns the script provider for cfg, wrapped to count model
// runs (see counted).
func scripted(t *testing.T, cfg script.Config) (*atomic.Int64, model.Provider) {
	t.Helper()
	p, err := script.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return counted(p)
}

// counted wraps p to count model runs: conversations started, that is
// calls whose last message is the user's prompt. The tool loop's follow-up
// calls (after a tool result) belong to the same run and are not counted.
func counted(p model.Provider) (*atomic.Int64, model.Provider) {
	var n atomic.Int64
	return &n, model.ProviderFunc(func(ctx context.Context, req model.Request) (model.Reply, error) {
		if k := len(req.Messages); k > 0 && req.Messages[k-1].Role == model.RoleUser {
			n.Add(1)
		}
		return p.Complete(ctx, req)
	})
}

// publish publishes a request and returns its id.
func publish(t *testing.T, b *bus.Bus, req agentwork.Request) string {
	t.Helper()
	pub, err := agentwork.Publish(t.Context(), b, req, agentwork.PublishOptions{})
	if err != nil {
		t.Fatalf("Publish(%+v): %v", req, err)
	}
	return pub.ID
}

// received is one message seen on <prefix>.event.>.
type received struct {
	Subject string
	Header  nats.Header
	Event   bus.Event
	// Run is the data of a run event (source other than delivery).
	Run agentwork.Result
	// Delivery is the data of a delivery event.
	Delivery connectors.Result
}

func (r received) isRun() bool { return r.Run.Outcome != "" }

// sink records every event published, through a core subscription: it
// sees each publish, also those the events stream drops as duplicates, so
// a run that emitted twice is caught.
type sink struct {
	t    *testing.T
	nc   *nats.Conn
	mu   sync.Mutex
	evs  []received
	bad  []error
	wake chan struct{}
}

func watchEvents(t *testing.T, b *bus.Bus) *sink {
	t.Helper()
	s := &sink{t: t, nc: b.Conn(), wake: make(chan struct{}, 1)}
	sub, err := b.Conn().Subscribe(b.Subjects.Events(), func(m *nats.Msg) {
		r := received{Subject: m.Subject, Header: m.Header}
		ev, err := bus.DecodeEvent(m.Data)
		if err == nil {
			r.Event = ev
			if ev.Type == bus.TypeOf(bus.SourceDelivery, connectors.OutcomeDelivered) || ev.Type == bus.TypeOf(bus.SourceDelivery, connectors.OutcomeFailed) {
				err = ev.DecodeData(&r.Delivery)
			} else {
				err = ev.DecodeData(&r.Run)
			}
		}
		s.mu.Lock()
		if err != nil {
			s.bad = append(s.bad, fmt.Errorf("event on %s: %w", m.Subject, err))
		}
		s.evs = append(s.evs, r)
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

func (s *sink) snapshot() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, err := range s.bad {
		s.t.Error(err)
	}
	s.bad = nil
	return append([]received(nil), s.evs...)
}

// wait blocks until cond holds for the events seen so far.
func (s *sink) wait(what string, cond func([]received) bool) []received {
	s.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		evs := s.snapshot()
		if cond(evs) {
			return evs
		}
		select {
		case <-s.wake:
		case <-deadline.C:
			s.t.Fatalf("timed out after %s waiting for %s; events so far:\n%s", waitTimeout, what, dump(evs))
			return nil
		}
	}
}

// runEvents waits for n run events (not delivery events) and returns them.
func (s *sink) runEvents(n int) []received {
	s.t.Helper()
	return runOnly(s.wait(fmt.Sprintf("%d run event(s)", n), func(evs []received) bool { return len(runOnly(evs)) >= n }))
}

// final returns every event after the publishers are done: call it once
// the runners (and dispatchers) whose events count have been stopped.
func (s *sink) final() []received {
	s.t.Helper()
	if err := s.nc.Flush(); err != nil {
		s.t.Fatal(err)
	}
	return s.snapshot()
}

func runOnly(evs []received) []received {
	var out []received
	for _, e := range evs {
		if e.isRun() {
			out = append(out, e)
		}
	}
	return out
}

func deliveryOnly(evs []received, outcome string) []received {
	var out []received
	for _, e := range evs {
		if e.Event.Type == bus.TypeOf(bus.SourceDelivery, outcome) {
			out = append(out, e)
		}
	}
	return out
}

func dump(evs []received) string {
	var s string
	for _, e := range evs {
		data, _ := json.Marshal(e.Event.Data)
		s += fmt.Sprintf("  %s runid=%s causationid=%s %s\n", e.Subject, e.Event.RunID, e.Event.CausationID, data)
	}
	if s == "" {
		return "  (none)\n"
	}
	return s
}

// recorder is a connector that records what it was asked to send. fail,
// if set, decides the outcome of each call (call counts from 1).
type recorder struct {
	fail  func(n connectors.Notification, call int) error
	mu    sync.Mutex
	calls int
	sent  []connectors.Notification // successful sends
	wake  chan struct{}
}

var _ connectors.Connector = (*recorder)(nil)

func newRecorder(fail func(n connectors.Notification, call int) error) *recorder {
	return &recorder{fail: fail, wake: make(chan struct{}, 1)}
}

func (c *recorder) Send(_ context.Context, n connectors.Notification) (connectors.Receipt, error) {
	c.mu.Lock()
	c.calls++
	var err error
	if c.fail != nil {
		err = c.fail(n, c.calls)
	}
	if err == nil {
		c.sent = append(c.sent, n)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	if err != nil {
		return connectors.Receipt{}, err
	}
	return connectors.Receipt{Parts: 1}, nil
}

func (c *recorder) delivered() []connectors.Notification {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]connectors.Notification(nil), c.sent...)
}

// waitSent blocks until the connector has sent n notifications.
func (c *recorder) waitSent(t *testing.T, n int) []connectors.Notification {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		if got := c.delivered(); len(got) >= n {
			return got
		}
		select {
		case <-c.wake:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %d sent notification(s); have %d", waitTimeout, n, len(c.delivered()))
		}
	}
}

// queued returns every notification stored on the deliveries stream.
func queued(t *testing.T, b *bus.Bus) []connectors.Notification {
	t.Helper()
	ctx := t.Context()
	st, err := b.JetStream().Stream(ctx, bus.StreamDeliveries)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []connectors.Notification
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ev, err := bus.DecodeEvent(m.Data)
		if err != nil {
			t.Fatalf("delivery %d: %v", seq, err)
		}
		var n connectors.Notification
		if err := ev.DecodeData(&n); err != nil {
			t.Fatalf("delivery %d: %v", seq, err)
		}
		out = append(out, n)
	}
	return out
}

// waitRequestsSettled blocks until the runner consumer has acked or
// terminated every request stored so far (nothing pending, nothing in flight).
func waitRequestsSettled(t *testing.T, b *bus.Bus) jetstream.ConsumerInfo {
	t.Helper()
	st, err := b.JetStream().Stream(t.Context(), bus.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return waitConsumer(t, b, fmt.Sprintf("the runner to settle stream seq %d", si.State.LastSeq), func(ci *jetstream.ConsumerInfo) bool {
		return ci.NumPending == 0 && ci.NumAckPending == 0 && ci.AckFloor.Stream >= si.State.LastSeq
	})
}

// waitConsumer blocks until the runner consumer's state satisfies cond.
// JetStream has no notification for consumer state, so this polls.
func waitConsumer(t *testing.T, b *bus.Bus, what string, cond func(*jetstream.ConsumerInfo) bool) jetstream.ConsumerInfo {
	t.Helper()
	ctx := t.Context()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	var last *jetstream.ConsumerInfo
	for {
		if cons, err := b.JetStream().Consumer(ctx, bus.StreamRequests, agentwork.ConsumerName); err == nil {
			if ci, err := cons.Info(ctx); err == nil {
				last = ci
				if cond(ci) {
					return *ci
				}
			}
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s; consumer: %+v", waitTimeout, what, last)
		}
	}
}

// claimRecord is the run claim as stored in agentwork_locks (run.<request id>).
type claimRecord struct {
	State    string    `json:"state"`
	RunID    string    `json:"run_id"`
	Owner    string    `json:"owner"`
	Boot     string    `json:"boot,omitempty"`
	Expires  time.Time `json:"expires"`
	Attempts int       `json:"attempts"`
	Outcome  string    `json:"outcome,omitempty"`
}

// waitClaimState waits, on a KV watch, until the run claim of requestID is
// in state (the raw JSON is matched, so fields the record type lacks do not
// matter).
func waitClaimState(t *testing.T, b *bus.Bus, requestID, state string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	w, err := b.Locks.Watch(ctx, "run."+requestID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	want := `"state":"` + state + `"`
	var last string
	for {
		select {
		case e := <-w.Updates():
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				last = string(e.Value())
				if strings.Contains(last, want) {
					return
				}
			}
		case <-ctx.Done():
			t.Fatalf("run claim of %s never reached %s (last %s)", requestID, state, last)
		}
	}
}

// keyTTL returns the per-key TTL the latest write of key in agentwork_locks
// carries ("": none, the bucket's TTL applies).
func keyTTL(t *testing.T, b *bus.Bus, key string) string {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), "KV_"+bus.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(t.Context(), "$KV."+bus.BucketLocks+"."+key)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return m.Header.Get("Nats-TTL")
}

func readClaim(t *testing.T, b *bus.Bus, requestID string) claimRecord {
	t.Helper()
	e, err := b.Locks.Get(t.Context(), "run."+requestID)
	if err != nil {
		t.Fatalf("claim of %s: %v", requestID, err)
	}
	var c claimRecord
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func putClaim(t *testing.T, b *bus.Bus, requestID string, c claimRecord) {
	t.Helper()
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Locks.Put(t.Context(), "run."+requestID, raw); err != nil {
		t.Fatal(err)
	}
}

func notifyPolicy(b *bus.Bus, window time.Duration) agentwork.Policy {
	return agentwork.Policy{Output: []agentwork.OutputGate{agentwork.NotifyGate{}, &agentwork.DedupGate{KV: b.Dedup, Window: window}}}
}

// must returns v, panicking on err: for setup that cannot fail.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
