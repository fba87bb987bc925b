package connectors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
)

// wait bounds every wait for an event.
const wait = 15 * time.Second

// fake is a connector whose Send does what fn says for the attempt-th call
// with a notification ID, and records every call.
type fake struct {
	fn       func(ctx context.Context, n connectors.Notification, attempt int) error
	mu       sync.Mutex
	calls    []call
	attempts map[string]int
}

type call struct {
	n  connectors.Notification
	at time.Time
}

var _ connectors.Connector = (*fake)(nil)

func (f *fake) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	f.mu.Lock()
	if f.attempts == nil {
		f.attempts = map[string]int{}
	}
	f.attempts[n.ID]++
	attempt := f.attempts[n.ID]
	f.calls = append(f.calls, call{n: n, at: time.Now()})
	f.mu.Unlock()
	var err error
	if f.fn != nil {
		err = f.fn(ctx, n, attempt)
	}
	if err != nil {
		return connectors.Receipt{}, err
	}
	return connectors.Receipt{Parts: 1, MessageIDs: []string{fmt.Sprintf("%s#%d", n.ID, attempt)}}, nil
}

func (f *fake) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// parallel is a fake whose Send may run n at a time.
type parallel struct {
	*fake
	n int
}

var _ connectors.Concurrent = parallel{}

func (p parallel) Concurrency() int { return p.n }

// fastRetries keeps retries within a test's patience.
var fastRetries = connectors.DispatcherConfig{MaxAttempts: 8, Backoff: []time.Duration{20 * time.Millisecond}, SendTimeout: 5 * time.Second, Horizon: time.Minute}

// run starts a dispatcher and returns a stop function that cancels it and
// returns Run's error once Run has returned.
func run(t *testing.T, b *bus.Bus, reg connectors.Registry, cfg connectors.DispatcherConfig) (stop func() error) {
	t.Helper()
	return start(t, connectors.NewDispatcher(b, reg, cfg, nil))
}

// start runs d like run.
func start(t *testing.T, d *connectors.Dispatcher) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(wait):
				err = errors.New("Dispatcher.Run did not return after ctx was cancelled")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// delivery is a delivery event read back from AGENTWORK_EVENTS.
type delivery struct {
	outcome string
	ev      bus.Event
	res     connectors.Result
}

// watch follows the delivery events in the events stream from the start.
func watch(t *testing.T, b *bus.Bus) <-chan delivery {
	t.Helper()
	cons, err := b.JetStream().OrderedConsumer(t.Context(), bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subjects.Event(bus.SourceDelivery, "*")},
	})
	if err != nil {
		t.Fatalf("events consumer: %v", err)
	}
	ch := make(chan delivery, 100)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev, err := bus.DecodeEvent(m.Data())
		var r connectors.Result
		if err == nil {
			err = ev.DecodeData(&r)
		}
		if err != nil {
			t.Errorf("delivery event %s: %v", m.Subject(), err)
			return
		}
		ch <- delivery{outcome: m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:], ev: ev, res: r}
	})
	if err != nil {
		t.Fatalf("consume events: %v", err)
	}
	t.Cleanup(cc.Stop)
	return ch
}

func next(t *testing.T, ch <-chan delivery) delivery {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(wait):
		t.Fatal("no delivery event within", wait)
		return delivery{}
	}
}

// counts returns how many delivery events of each outcome the stream holds.
func counts(t *testing.T, b *bus.Bus) map[string]uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(b.Subjects.Event(bus.SourceDelivery, "*")))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for subj, n := range info.State.Subjects {
		out[subj[strings.LastIndexByte(subj, '.')+1:]] = n
	}
	return out
}

func note(id, target, text string) connectors.Notification {
	return connectors.Notification{
		ID: "run-" + id + "." + target, RunID: "run-" + id, RequestID: "req-" + id,
		Source: "heartbeat", Name: "default", Text: text, Urgency: "info",
		Target: target, Time: time.Date(2026, 11, 21, 9, 0, 3, 0, time.UTC),
	}
}

func enqueue(t *testing.T, b *bus.Bus, ns ...connectors.Notification) {
	t.Helper()
	for _, n := range ns {
		if err := connectors.Enqueue(t.Context(), b, n); err != nil {
			t.Fatalf("Enqueue(%s) = %v", n.ID, err)
		}
	}
}

func stopped(t *testing.T, stop func() error) {
	t.Helper()
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
}

// TestDispatcherRetries: retryable errors are retried after the delay the
// connector asked for (NakWithDelay), or the configured backoff when it
// named none, and the notification is reported delivered once, with the
// number of attempts.
func TestDispatcherRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		err     error
		backoff time.Duration
		gap     time.Duration
	}{
		// The backoff is an hour: only honouring After delivers in time.
		{"retry-after from the connector", connectors.Retry(errors.New("429 Too Many Requests"), 150*time.Millisecond), time.Hour, 150 * time.Millisecond},
		{"backoff for a retryable error without delay", connectors.Retry(errors.New("502"), 0), 150 * time.Millisecond, 150 * time.Millisecond},
		{"backoff for a plain error", errors.New("connection reset"), 150 * time.Millisecond, 150 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watch(t, b)
			chat := &fake{fn: func(_ context.Context, _ connectors.Notification, attempt int) error {
				if attempt < 3 {
					return tc.err
				}
				return nil
			}}
			n := note("1", "chat", "Disk /var is 95% full")
			enqueue(t, b, n)
			stop := run(t, b, connectors.Registry{"chat": chat}, connectors.DispatcherConfig{MaxAttempts: 5, Backoff: []time.Duration{tc.backoff}, SendTimeout: 5 * time.Second})

			d := next(t, events)
			if d.outcome != connectors.OutcomeDelivered || d.res.Attempts != 3 || d.res.Connector != "chat" || d.res.Notification.ID != n.ID {
				t.Fatalf("event = %s %+v, want delivered by chat after 3 attempts of %s", d.outcome, d.res, n.ID)
			}
			if d.ev.Type != "agentwork.delivery.delivered" || d.ev.RunID != n.RunID || d.ev.CausationID != n.RequestID {
				t.Errorf("envelope type %q runid %q causationid %q, want agentwork.delivery.delivered, %s, %s", d.ev.Type, d.ev.RunID, d.ev.CausationID, n.RunID, n.RequestID)
			}
			stopped(t, stop)
			calls := chat.Calls()
			if len(calls) != 3 {
				t.Fatalf("Send called %d times, want 3", len(calls))
			}
			for i := 1; i < len(calls); i++ {
				if gap := calls[i].at.Sub(calls[i-1].at); gap < tc.gap {
					t.Errorf("attempt %d came %s after attempt %d, want at least %s", i+1, gap, i, tc.gap)
				}
			}
			if got := counts(t, b); got[connectors.OutcomeDelivered] != 1 || got[connectors.OutcomeFailed] != 0 {
				t.Errorf("delivery events = %v, want exactly one delivered", got)
			}
		})
	}
}

// TestDispatcherFailures: what can never succeed is reported failed once,
// without further attempts; what keeps failing is given up after
// MaxAttempts. The dispatcher goes on delivering afterwards.
func TestDispatcherFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		send      func() error
		attempts  int
		permanent bool
		errText   string
	}{
		{"permanent error", func() error { return connectors.Permanent(errors.New("401 Unauthorized")) }, 1, true, "401 Unauthorized"},
		{"panic", func() error { panic("nil map") }, 1, true, "connector panicked: nil map"},
		{"attempts exhausted", func() error { return errors.New("503") }, 3, false, "503"},
		{"retryable attempts exhausted", func() error { return connectors.Retry(errors.New("429"), 10*time.Millisecond) }, 3, false, "429"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watch(t, b)
			chat := &fake{fn: func(_ context.Context, n connectors.Notification, _ int) error {
				if n.Text == "fine" {
					return nil
				}
				return tc.send()
			}}
			bad, good := note("1", "chat", "doomed"), note("2", "chat", "fine")
			enqueue(t, b, bad)
			cfg := fastRetries
			cfg.MaxAttempts = 3
			stop := run(t, b, connectors.Registry{"chat": chat}, cfg)

			d := next(t, events)
			if d.outcome != connectors.OutcomeFailed || d.res.Notification.ID != bad.ID || d.res.Attempts != tc.attempts ||
				d.res.Permanent != tc.permanent || !strings.Contains(d.res.Error, tc.errText) {
				t.Fatalf("event = %s %+v, want failed after %d attempts, permanent %v, error with %q", d.outcome, d.res, tc.attempts, tc.permanent, tc.errText)
			}
			enqueue(t, b, good)
			if d := next(t, events); d.outcome != connectors.OutcomeDelivered || d.res.Notification.ID != good.ID {
				t.Fatalf("after the failure: event = %s %+v, want %s delivered", d.outcome, d.res, good.ID)
			}
			stopped(t, stop)
			if got := len(chat.Calls()); got != tc.attempts+1 {
				t.Errorf("Send called %d times, want %d for the failure and 1 for the next", got, tc.attempts+1)
			}
			if got := counts(t, b); got[connectors.OutcomeFailed] != 1 || got[connectors.OutcomeDelivered] != 1 {
				t.Errorf("delivery events = %v, want one failed and one delivered", got)
			}
		})
	}
}

// TestDispatcherIsolatesConnectors: a connector that hangs and one that
// fails do not hold up another connector's deliveries.
func TestDispatcherIsolatesConnectors(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	release := make(chan struct{})
	stuck := &fake{fn: func(ctx context.Context, _ connectors.Notification, _ int) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	failing := &fake{fn: func(context.Context, connectors.Notification, int) error {
		return connectors.Permanent(errors.New("403 blocked by user"))
	}}
	good := &fake{}
	enqueue(t, b, note("s", "stuck", "x"), note("f", "failing", "x"))
	for i := range 5 {
		enqueue(t, b, note(fmt.Sprint(i), "good", fmt.Sprint("message ", i)))
	}
	stop := run(t, b, connectors.Registry{"stuck": stuck, "failing": failing, "good": good}, fastRetries)

	got := map[string]int{}
	for range 6 {
		d := next(t, events)
		got[d.res.Connector+" "+d.outcome]++
	}
	if want := map[string]int{"good delivered": 5, "failing failed": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("while stuck hangs: events %v, want %v", got, want)
	}
	close(release)
	if d := next(t, events); d.res.Connector != "stuck" || d.outcome != connectors.OutcomeDelivered {
		t.Fatalf("after release: event %s %+v, want stuck delivered", d.outcome, d.res)
	}
	stopped(t, stop)
}

// TestDispatcherDeliversDuplicateOnce: the same notification queued twice
// (a run redelivered after a crash re-enqueues it) reaches the chat once.
func TestDispatcherDeliversDuplicateOnce(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	chat := &fake{}
	n, other := note("1", "chat", "Disk full"), note("2", "chat", "Disk full")
	enqueue(t, b, n, n, other)
	stop := run(t, b, connectors.Registry{"chat": chat}, fastRetries)
	for range 2 {
		if d := next(t, events); d.outcome != connectors.OutcomeDelivered {
			t.Fatalf("event %s %+v, want delivered", d.outcome, d.res)
		}
	}
	stopped(t, stop)
	var ids []string
	for _, c := range chat.Calls() {
		ids = append(ids, c.n.ID)
	}
	if want := []string{n.ID, other.ID}; !slices.Equal(ids, want) {
		t.Errorf("Send calls = %v, want %v (the duplicate once)", ids, want)
	}
	if got := counts(t, b); got[connectors.OutcomeDelivered] != 2 {
		t.Errorf("delivery events = %v, want two delivered", got)
	}
	// The sent claims are kept while a redelivery can come, not for the
	// bucket's 7 days.
	for _, id := range []string{n.ID, other.ID} {
		s, err := b.JetStream().Stream(t.Context(), "KV_"+bus.BucketLocks)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.GetLastMsgForSubject(t.Context(), "$KV."+bus.BucketLocks+".send."+id)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.Header.Get("Nats-TTL"), bus.SettledTTL.String(); got != want {
			t.Errorf("sent claim %s TTL = %q, want %q", id, got, want)
		}
	}
}

// TestDispatcherReleasesDedup: the runner holds a notification's text in
// agentwork_dedup (value = its run id). When no connector delivers it, the
// key is freed so the next identical notification is sent; when one did,
// or the key belongs to another run, it stays.
func TestDispatcherReleasesDedup(t *testing.T) {
	t.Parallel()
	const key = "heartbeat.5d41402abc4b2a76b9719d911017c592"
	for _, tc := range []struct {
		name     string
		owner    string   // the dedup value; "" = this run
		targets  []string // of the notification, in the order they finish
		wantHeld bool
	}{
		{"only target fails permanently", "", []string{"bad"}, false},
		{"every target fails", "", []string{"bad", "bad2"}, false},
		{"key of another run", "run-other", []string{"bad"}, true},
		{"another target delivered first", "", []string{"good", "bad"}, true},
		{"a target fails while another delivers later", "", []string{"bad", "good"}, true},
		{"delivered", "", []string{"good"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watch(t, b)
			owner := tc.owner
			if owner == "" {
				owner = "run-1"
			}
			if _, err := b.Dedup.Create(t.Context(), key, []byte(owner), jetstream.KeyTTL(time.Hour)); err != nil {
				t.Fatalf("dedup Create: %v", err)
			}
			// Targets finish in order: each waits for the previous one's event.
			turns := map[string]chan struct{}{}
			reg := connectors.Registry{}
			for _, target := range tc.targets {
				turn := make(chan struct{})
				turns[target] = turn
				reg[target] = &fake{fn: func(ctx context.Context, _ connectors.Notification, _ int) error {
					select {
					case <-turn:
					case <-ctx.Done():
						return ctx.Err()
					}
					if strings.HasPrefix(target, "bad") {
						return connectors.Permanent(errors.New("400 chat not found"))
					}
					return nil
				}}
				n := note("1", target, "Disk full")
				n.DedupKey = key
				n.Targets = tc.targets
				enqueue(t, b, n)
			}
			stop := run(t, b, reg, fastRetries)
			for _, target := range tc.targets {
				close(turns[target])
				if d := next(t, events); d.res.Connector != target {
					t.Fatalf("event from %s, want %s", d.res.Connector, target)
				}
			}
			stopped(t, stop)
			e, err := b.Dedup.Get(t.Context(), key)
			switch {
			case tc.wantHeld && err != nil:
				t.Fatalf("dedup key after %v: %v, want it held", tc.targets, err)
			case tc.wantHeld && string(e.Value()) != owner:
				t.Fatalf("dedup key value = %q, want %q", e.Value(), owner)
			case !tc.wantHeld && !errors.Is(err, jetstream.ErrKeyNotFound):
				t.Fatalf("dedup key after %v: err = %v, want it released (ErrKeyNotFound)", tc.targets, err)
			}
			// The markers last the retry horizon (6m for fastRetries: a
			// minute's rate limits, then 5m of attempts), not the bucket's
			// 7 days.
			markers := markerTTLs(t, b)
			if _, ok := markers["delivered.run-1"]; !ok && slices.Contains(tc.targets, "good") {
				t.Errorf("markers %v, want delivered.run-1", markers)
			}
			for key, ttl := range markers {
				if ttl != "6m0s" {
					t.Errorf("%s TTL = %q, want 6m0s (fastRetries' retry horizon)", key, ttl)
				}
			}
			if !tc.wantHeld {
				// Released means the next identical notification gets through
				// the runner's atomic Create.
				if _, err := b.Dedup.Create(t.Context(), key, []byte("run-2"), jetstream.KeyTTL(time.Hour)); err != nil {
					t.Fatalf("Create after release = %v, want nil", err)
				}
			}
		})
	}
}

// markerTTLs returns the Nats-TTL of each delivered.* and failed.* key in
// agentwork_locks.
func markerTTLs(t *testing.T, b *bus.Bus) map[string]string {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), "KV_"+bus.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, prefix := range []string{"delivered", "failed"} {
		info, err := s.Info(t.Context(), jetstream.WithSubjectFilter("$KV."+bus.BucketLocks+"."+prefix+".>"))
		if err != nil {
			t.Fatal(err)
		}
		for subj := range info.State.Subjects {
			m, err := s.GetLastMsgForSubject(t.Context(), subj)
			if err != nil {
				t.Fatal(err)
			}
			out[strings.TrimPrefix(subj, "$KV."+bus.BucketLocks+".")] = m.Header.Get("Nats-TTL")
		}
	}
	return out
}

func TestRetryHorizon(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  connectors.DispatcherConfig
		want time.Duration
	}{
		// 24h of rate limits, 1s+5s+30s+2m+10m+10m+10m of backoff, 8 × (30s
		// send + 30s ack wait).
		{connectors.DispatcherConfig{}, 24*time.Hour + 41*time.Minute},
		{connectors.DispatcherConfig{MaxAttempts: 1, Horizon: time.Minute}, 2 * time.Minute},
		{connectors.DispatcherConfig{MaxAttempts: 3, Backoff: []time.Duration{time.Minute}, SendTimeout: 10 * time.Second, AckWait: 5 * time.Second, Horizon: time.Hour}, time.Hour + 3*time.Minute},
		{connectors.DispatcherConfig{MaxAttempts: 2, Backoff: []time.Duration{time.Hour, time.Second}, Horizon: 30 * time.Second}, time.Hour + 3*time.Minute},
	} {
		if got := tc.cfg.RetryHorizon(); got != tc.want {
			t.Errorf("%+v.RetryHorizon() = %s, want %s", tc.cfg, got, tc.want)
		}
	}
}

// TestDispatcherShutdown: cancelling Run lets the send in flight finish and
// report before Run returns.
func TestDispatcherShutdown(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	started, release := make(chan struct{}), make(chan struct{})
	var sendCtxErr error
	chat := &fake{fn: func(ctx context.Context, _ connectors.Notification, _ int) error {
		close(started)
		<-release
		sendCtxErr = ctx.Err()
		return nil
	}}
	enqueue(t, b, note("1", "chat", "in flight"))
	stop := run(t, b, connectors.Registry{"chat": chat}, fastRetries)
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("Send was not called")
	}
	returned := make(chan error, 1)
	go func() { returned <- stop() }()
	select {
	case err := <-returned:
		t.Fatalf("Run returned (%v) while a send was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after the send finished")
	}
	if sendCtxErr != nil {
		t.Errorf("the in-flight send's ctx was cancelled by shutdown (%v); want it to run to completion", sendCtxErr)
	}
	if d := next(t, events); d.outcome != connectors.OutcomeDelivered {
		t.Errorf("event %s, want delivered", d.outcome)
	}
	if got := counts(t, b); got[connectors.OutcomeDelivered] != 1 {
		t.Errorf("delivery events = %v, want the in-flight one delivered", got)
	}
}

// TestDispatcherMalformedDelivery: a message on a delivery subject that is
// not an envelope with a notification is reported failed and dropped, and
// the connector is not called.
func TestDispatcherMalformedDelivery(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	chat := &fake{}
	if _, err := b.JetStream().Publish(t.Context(), b.Subjects.Delivery("chat"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	stop := run(t, b, connectors.Registry{"chat": chat}, fastRetries)
	d := next(t, events)
	if d.outcome != connectors.OutcomeFailed || !d.res.Permanent || !strings.Contains(d.res.Error, "malformed") || d.res.Connector != "chat" {
		t.Fatalf("event %s %+v, want a permanent failure of chat naming the malformed delivery", d.outcome, d.res)
	}
	stopped(t, stop)
	if n := len(chat.Calls()); n != 0 {
		t.Errorf("Send called %d times for a malformed delivery, want 0", n)
	}
}

// TestDispatcherInstancesShareWork: two instances on one bus share each
// connector's durable consumer: every notification is sent once.
func TestDispatcherInstancesShareWork(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	b2 := client(t, b)
	events := watch(t, b)
	chat := &fake{}
	const total = 20
	for i := range total {
		enqueue(t, b, note(fmt.Sprint(i), "chat", fmt.Sprint("message ", i)))
	}
	stop1 := run(t, b, connectors.Registry{"chat": chat}, fastRetries)
	stop2 := run(t, b2, connectors.Registry{"chat": chat}, fastRetries)
	for range total {
		if d := next(t, events); d.outcome != connectors.OutcomeDelivered {
			t.Fatalf("event %s %+v, want delivered", d.outcome, d.res)
		}
	}
	stopped(t, stop1)
	stopped(t, stop2)
	seen := map[string]int{}
	for _, c := range chat.Calls() {
		seen[c.n.ID]++
	}
	if len(seen) != total {
		t.Errorf("%d distinct notifications sent, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s sent %d times, want once", id, n)
		}
	}
}

// TestDispatcherBadName: a connector name that cannot be a subject token
// stops Run before any consumer starts.
func TestDispatcherBadName(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	d := connectors.NewDispatcher(b, connectors.Registry{"good": &fake{}, "Bad.Name": &fake{}}, fastRetries, nil)
	err := d.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), `"Bad.Name"`) {
		t.Fatalf("Run with connector Bad.Name = %v, want an error naming it", err)
	}
	if _, err := b.JetStream().Consumer(t.Context(), bus.StreamDeliveries, connectors.ConsumerName("good")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("consumer deliver_good after a failed Run: %v, want none created", err)
	}
}

// slow is a Send that takes d, like a chat API that answers late, or
// returns early when ctx is done.
func slow(d time.Duration) func(context.Context, connectors.Notification, int) error {
	return func(ctx context.Context, _ connectors.Notification, _ int) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// eventually waits until cond holds, for at most wait.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(wait)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within %s", what, wait)
		}
	}
}

// ackPending returns how many notifications the consumer of connector
// name has handed out and not had settled.
func ackPending(t *testing.T, b *bus.Bus, name string) int {
	t.Helper()
	c, err := b.JetStream().Consumer(t.Context(), bus.StreamDeliveries, connectors.ConsumerName(name))
	if err != nil {
		return -1 // not created yet
	}
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info.NumAckPending
}

// naks delivers the stream sequence of every notification the consumer of
// connector name is told to redeliver (JetStream's nak advisory).
func naks(t *testing.T, b *bus.Bus, name string) <-chan uint64 {
	t.Helper()
	ch := make(chan uint64, 10)
	sub, err := b.Conn().Subscribe(server.JSAdvisoryConsumerMsgNakPre+"."+bus.StreamDeliveries+"."+connectors.ConsumerName(name), func(m *nats.Msg) {
		var adv server.JSConsumerDeliveryNakAdvisory
		if err := json.Unmarshal(m.Data, &adv); err != nil {
			t.Errorf("nak advisory %s: %v", m.Data, err)
			return
		}
		select {
		case ch <- adv.StreamSeq:
		default:
		}
	})
	if err != nil {
		t.Fatalf("subscribe to nak advisories: %v", err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// TestDispatcherSlowSendsSentOnce: a notification that waits for a free
// send slot and is then sent slowly, longer than AckWait in all, is not
// handed to another instance meanwhile: it is sent once. (Without progress
// signals JetStream redelivers it to the idle instance mid-send.)
func TestDispatcherSlowSendsSentOnce(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	b2 := client(t, b)
	events := watch(t, b)
	const ackWait = time.Second
	cfg := fastRetries
	cfg.AckWait = ackWait
	// Each send takes 1.5 AckWait, so the second notification waits that
	// long for the slot and then sends that long.
	chat := &fake{fn: slow(ackWait * 3 / 2)}
	first, second := note("1", "chat", "first"), note("2", "chat", "second")
	enqueue(t, b, first, second)
	stop1 := run(t, b, connectors.Registry{"chat": chat}, cfg)
	// Both are with the first instance: one sending, one waiting for the slot.
	eventually(t, "both notifications handed to the first instance", func() bool { return ackPending(t, b, "chat") == 2 })
	// The second instance idles with a pull request out, ready to take
	// whatever JetStream redelivers.
	stop2 := run(t, b2, connectors.Registry{"chat": chat}, cfg)
	for range 2 {
		if d := next(t, events); d.outcome != connectors.OutcomeDelivered {
			t.Fatalf("event %s %+v, want delivered", d.outcome, d.res)
		}
	}
	stopped(t, stop1)
	stopped(t, stop2)
	seen := map[string]int{}
	for _, c := range chat.Calls() {
		seen[c.n.ID]++
	}
	if seen[first.ID] != 1 || seen[second.ID] != 1 || len(seen) != 2 {
		t.Errorf("Send calls per notification = %v, want each of %s, %s once", seen, first.ID, second.ID)
	}
}

// TestDispatcherSkipsSentNotification: a notification that was sent
// already and reaches the dispatcher again (its ack was lost in a crash, or
// it was queued again after the stream's duplicate window) is acked, not
// sent a second time, and reported delivered once.
func TestDispatcherSkipsSentNotification(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	chat := &fake{}
	n, after := note("1", "chat", "Disk full"), note("2", "chat", "later")
	enqueue(t, b, n)
	stop := run(t, b, connectors.Registry{"chat": chat}, fastRetries)
	if d := next(t, events); d.outcome != connectors.OutcomeDelivered || d.res.Notification.ID != n.ID {
		t.Fatalf("event %s %+v, want %s delivered", d.outcome, d.res, n.ID)
	}
	// The same notification stored again under another Nats-Msg-Id, so the
	// stream does not drop it as a duplicate.
	ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf("delivery", "queued"), n.Target, n.Time, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(t.Context(), b.Subjects.Delivery(n.Target), ev, n.ID+".again"); err != nil {
		t.Fatalf("publish the copy: %v", err)
	}
	// One send at a time: once the next one is delivered, the copy is settled.
	enqueue(t, b, after)
	if d := next(t, events); d.outcome != connectors.OutcomeDelivered || d.res.Notification.ID != after.ID {
		t.Fatalf("event %s %+v, want %s delivered", d.outcome, d.res, after.ID)
	}
	stopped(t, stop)
	var ids []string
	for _, c := range chat.Calls() {
		ids = append(ids, c.n.ID)
	}
	if want := []string{n.ID, after.ID}; !slices.Equal(ids, want) {
		t.Errorf("Send calls = %v, want %v (the copy not sent)", ids, want)
	}
	if got := counts(t, b); got[connectors.OutcomeDelivered] != 2 || got[connectors.OutcomeFailed] != 0 {
		t.Errorf("delivery events = %v, want two delivered", got)
	}
	if got := ackPending(t, b, "chat"); got != 0 {
		t.Errorf("%d notifications still unacked, want the copy acked", got)
	}
}

// TestDispatcherStalledSendSentOnce: an instance stalls in the middle of a
// send for longer than AckWait: no progress signal reaches JetStream, which
// hands the notification out again, but the instance still renews its send
// claim. Whichever instance gets the redelivery (both take two at a time)
// sees the live claim and puts the notification back instead of sending it:
// it is sent once and reported delivered once.
func TestDispatcherStalledSendSentOnce(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	b2 := client(t, b)
	events := watch(t, b)
	naked := naks(t, b, "chat")
	cfg := fastRetries
	cfg.AckWait = time.Second
	started := make(chan struct{})
	// The first send lasts until the redelivery has been put back, so
	// longer than AckWait; without the claim, the redelivery is sent.
	chat := &fake{fn: func(ctx context.Context, _ connectors.Notification, attempt int) error {
		if attempt > 1 {
			return nil
		}
		close(started)
		select {
		case <-naked:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	n := note("1", "chat", "Disk /var is 95% full")
	enqueue(t, b, n)
	reg := connectors.Registry{"chat": parallel{chat, 2}}
	stalled := connectors.NewDispatcher(b, reg, cfg, nil)
	connectors.Stall(stalled, false)
	stop1 := start(t, stalled)
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("Send was not called")
	}
	stop2 := run(t, b2, reg, cfg)

	if d := next(t, events); d.outcome != connectors.OutcomeDelivered || d.res.Notification.ID != n.ID || d.res.Attempts != 1 {
		t.Fatalf("event %s %+v, want %s delivered at attempt 1", d.outcome, d.res, n.ID)
	}
	eventually(t, "the notification acked", func() bool { return ackPending(t, b, "chat") == 0 })
	stopped(t, stop1)
	stopped(t, stop2)
	if calls := chat.Calls(); len(calls) != 1 {
		t.Errorf("Send called %d times, want once", len(calls))
	}
	if got := counts(t, b); got[connectors.OutcomeDelivered] != 1 || got[connectors.OutcomeFailed] != 0 {
		t.Errorf("delivery events = %v, want exactly one delivered", got)
	}
}

// TestDispatcherTakesOverStoppedSend: an instance stops in the middle of a
// send, signalling no progress and renewing no claim (its process froze or
// died). Another instance takes the send over once the claim's lease ran
// out and sends it once. When the frozen instance comes back, its next
// renewal finds the claim taken and cancels its own send, which reports
// nothing.
func TestDispatcherTakesOverStoppedSend(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	b2 := client(t, b)
	events := watch(t, b)
	cfg := fastRetries
	cfg.AckWait, cfg.ShutdownGrace, cfg.SendTimeout = time.Second, time.Minute, time.Minute
	started := make(chan struct{})
	abandoned := make(chan error, 1)
	frozen := &fake{fn: func(ctx context.Context, _ connectors.Notification, _ int) error {
		close(started)
		<-ctx.Done()
		abandoned <- ctx.Err()
		return ctx.Err()
	}}
	n := note("1", "chat", "Disk /var is 95% full")
	enqueue(t, b, n)
	dead := connectors.NewDispatcher(b, connectors.Registry{"chat": frozen}, cfg, nil)
	resume := connectors.Stall(dead, true)
	stopDead := start(t, dead)
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("Send was not called")
	}
	// It takes nothing more, as a dead process would: its consumer is
	// closed, while its send stays frozen within the minute of grace.
	deadReturned := make(chan error, 1)
	go func() { deadReturned <- stopDead() }()

	chat := &fake{}
	stop := run(t, b2, connectors.Registry{"chat": chat}, cfg)
	// Attempt 2: the frozen one counts.
	if d := next(t, events); d.outcome != connectors.OutcomeDelivered || d.res.Notification.ID != n.ID || d.res.Attempts != 2 {
		t.Fatalf("event %s %+v, want %s delivered at attempt 2 by the other instance", d.outcome, d.res, n.ID)
	}
	if calls := chat.Calls(); len(calls) != 1 {
		t.Fatalf("the other instance sent %d times, want once", len(calls))
	}

	resume()
	select {
	case err := <-abandoned:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the frozen send's ctx ended with %v, want context.Canceled", err)
		}
	case <-time.After(wait):
		t.Fatal("the frozen instance's send went on after its claim was taken over")
	}
	select {
	case err := <-deadReturned:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("the frozen instance's Run did not return")
	}
	eventually(t, "the notification acked", func() bool { return ackPending(t, b, "chat") == 0 })
	stopped(t, stop)
	if calls := chat.Calls(); len(calls) != 1 {
		t.Errorf("the other instance sent %d times, want once", len(calls))
	}
	if got := counts(t, b); got[connectors.OutcomeDelivered] != 1 || got[connectors.OutcomeFailed] != 0 {
		t.Errorf("delivery events = %v, want exactly one delivered and no failed", got)
	}
}

// TestDispatcherTakesOverSendOfStoppedProcess: the send claim of an earlier
// process on this data dir (killed mid-send) is taken over at once, not
// after its lease: that process is gone. The interrupted attempt counts.
func TestDispatcherTakesOverSendOfStoppedProcess(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	n := note("1", "chat", "Disk /var is 95% full")
	claim := `{"state":"sending","owner":"killed","token":"t","boot":"deadbeef","expires":"` +
		time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `","attempts":1}`
	if _, err := b.Locks.Put(t.Context(), "send."+n.ID, []byte(claim)); err != nil {
		t.Fatal(err)
	}
	enqueue(t, b, n)
	chat := &fake{}
	stop := run(t, b, connectors.Registry{"chat": chat}, fastRetries)
	if d := next(t, events); d.outcome != connectors.OutcomeDelivered || d.res.Notification.ID != n.ID || d.res.Attempts != 2 {
		t.Fatalf("event %s %+v, want %s delivered at attempt 2", d.outcome, d.res, n.ID)
	}
	stopped(t, stop)
	if calls := chat.Calls(); len(calls) != 1 {
		t.Errorf("Send called %d times, want once", len(calls))
	}
}

// TestDispatcherShutdownCancelsAfterGrace: a send still running when the
// shutdown grace is over is cancelled and its notification put back at
// once, not reported failed; another instance then delivers it, long
// before AckWait would have released it.
func TestDispatcherShutdownCancelsAfterGrace(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	cfg := fastRetries
	cfg.AckWait, cfg.ShutdownGrace, cfg.SendTimeout = time.Minute, 200*time.Millisecond, time.Minute
	started := make(chan struct{})
	sendErr := make(chan error, 1)
	hung := &fake{fn: func(ctx context.Context, _ connectors.Notification, _ int) error {
		close(started)
		<-ctx.Done()
		sendErr <- ctx.Err()
		return ctx.Err()
	}}
	n := note("1", "chat", "in flight")
	enqueue(t, b, n)
	stop := run(t, b, connectors.Registry{"chat": hung}, cfg)
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("Send was not called")
	}
	begun := time.Now()
	stopped(t, stop)
	if took := time.Since(begun); took < cfg.ShutdownGrace {
		t.Errorf("Run returned %s after cancel, want it to wait the grace of %s", took, cfg.ShutdownGrace)
	}
	select {
	case err := <-sendErr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the hung send's ctx ended with %v, want context.Canceled", err)
		}
	default:
		t.Fatal("Run returned while the hung send was still running")
	}

	chat := &fake{}
	stop = run(t, b, connectors.Registry{"chat": chat}, cfg)
	d := next(t, events)
	if d.outcome != connectors.OutcomeDelivered || d.res.Notification.ID != n.ID || d.res.Attempts != 2 {
		t.Fatalf("event %s %+v, want %s delivered at attempt 2 (no failure for the cancelled send)", d.outcome, d.res, n.ID)
	}
	stopped(t, stop)
	if got := counts(t, b); got[connectors.OutcomeFailed] != 0 || got[connectors.OutcomeDelivered] != 1 {
		t.Errorf("delivery events = %v, want one delivered and no failed", got)
	}
}

// TestDispatcherShutdownPutsBackWaiting: a notification this instance has
// pulled but not started sending when it stops is put back at once, not
// sent while the send in flight finishes; another instance delivers it.
func TestDispatcherShutdownPutsBackWaiting(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	cfg := fastRetries
	cfg.AckWait, cfg.SendTimeout = time.Minute, time.Minute
	release := make(chan struct{})
	chat := &fake{fn: func(ctx context.Context, n connectors.Notification, _ int) error {
		if n.Text != "in flight" {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	inFlight, waiting := note("1", "chat", "in flight"), note("2", "chat", "waiting")
	enqueue(t, b, inFlight, waiting)
	stop := run(t, b, connectors.Registry{"chat": chat}, cfg)
	eventually(t, "both notifications handed to the instance", func() bool { return ackPending(t, b, "chat") == 2 })
	naked := naks(t, b, "chat")
	returned := make(chan error, 1)
	go func() { returned <- stop() }()
	// The deliveries stream is the test's own: the waiting one is its second message.
	for putBack := false; !putBack; {
		select {
		case seq := <-naked:
			putBack = seq == 2
		case <-time.After(wait):
			t.Fatal("the waiting notification was not put back (nak'ed) on shutdown")
		}
	}
	close(release)
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after the send in flight finished")
	}
	if d := next(t, events); d.outcome != connectors.OutcomeDelivered || d.res.Notification.ID != inFlight.ID {
		t.Fatalf("event %s %+v, want the send in flight delivered", d.outcome, d.res)
	}
	if calls := chat.Calls(); len(calls) != 1 {
		t.Fatalf("the stopping instance sent %d notifications, want only the one in flight", len(calls))
	}

	other := &fake{}
	stop = run(t, b, connectors.Registry{"chat": other}, cfg)
	if d := next(t, events); d.outcome != connectors.OutcomeDelivered || d.res.Notification.ID != waiting.ID {
		t.Fatalf("event %s %+v, want %s delivered by the next instance", d.outcome, d.res, waiting.ID)
	}
	stopped(t, stop)
}

// TestDispatcherConfigValidate: every field is checked and named.
func TestDispatcherConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  connectors.DispatcherConfig
		want string // "" = valid
	}{
		{"zero takes the defaults", connectors.DispatcherConfig{}, ""},
		{"all set", connectors.DispatcherConfig{MaxAttempts: 3, Backoff: []time.Duration{time.Second}, SendTimeout: time.Second, AckWait: time.Second, ShutdownGrace: time.Second}, ""},
		{"ack wait too short", connectors.DispatcherConfig{AckWait: 500 * time.Millisecond}, "delivery.ack_wait: 500ms"},
		{"negative attempts", connectors.DispatcherConfig{MaxAttempts: -1}, "delivery.max_attempts"},
		{"negative backoff", connectors.DispatcherConfig{Backoff: []time.Duration{time.Second, -time.Second}}, "delivery.backoff[1]"},
		{"negative send timeout", connectors.DispatcherConfig{SendTimeout: -time.Second}, "delivery.send_timeout"},
		{"negative grace", connectors.DispatcherConfig{ShutdownGrace: -time.Second}, "delivery.shutdown_grace"},
		{"negative horizon", connectors.DispatcherConfig{Horizon: -time.Hour}, "delivery.horizon: -1h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// A dispatcher whose consumer is deleted under it returns an error instead
// of leaving that connector's notifications unsent.
func TestDispatcherStopsWhenItsConsumerIsDeleted(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	d := connectors.NewDispatcher(b, connectors.Registry{"rec": &fake{fn: func(context.Context, connectors.Notification, int) error { return nil }}}, connectors.DispatcherConfig{}, nil)
	errc := make(chan error, 1)
	go func() { errc <- d.Run(t.Context()) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := b.JetStream().Consumer(t.Context(), bus.StreamDeliveries, connectors.ConsumerName("rec")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("consumer never created")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.JetStream().DeleteConsumer(t.Context(), bus.StreamDeliveries, connectors.ConsumerName("rec")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "lost") {
			t.Fatalf("Run = %v, want a consumer lost error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run went on after its consumer was deleted")
	}
}

// parts is a connector that sends a text as three parts and, on each of
// its first attempts, confirms one more part before it fails.
type parts struct {
	mu    sync.Mutex
	sent  []string // parts in order of arrival
	skips []int    // n.SentParts per attempt
}

func (p *parts) Send(_ context.Context, n connectors.Notification) (connectors.Receipt, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	all := strings.Fields(n.Text)
	p.skips = append(p.skips, n.SentParts)
	rec := connectors.Receipt{Parts: n.SentParts}
	for i := n.SentParts; i < len(all); i++ {
		p.sent = append(p.sent, all[i])
		rec.Parts++
		rec.MessageIDs = append(rec.MessageIDs, fmt.Sprintf("m%d", i+1))
		if len(p.skips) < len(all) {
			return rec, connectors.Retry(errors.New("502 on the next part"), 0)
		}
	}
	return rec, nil
}

// TestDispatcherResumesSplitText: the parts an attempt confirmed are kept
// in the send claim, the next attempt sends only the rest, and the
// delivered event carries every part's message id.
func TestDispatcherResumesSplitText(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	chat := &parts{}
	n := note("1", "chat", "one two three")
	enqueue(t, b, n)
	stop := run(t, b, connectors.Registry{"chat": chat}, fastRetries)
	d := next(t, events)
	stopped(t, stop)
	if d.outcome != connectors.OutcomeDelivered || d.res.Attempts != 3 {
		t.Fatalf("event = %s after %d attempts, want delivered after 3", d.outcome, d.res.Attempts)
	}
	if !slices.Equal(chat.sent, []string{"one", "two", "three"}) || !slices.Equal(chat.skips, []int{0, 1, 2}) {
		t.Fatalf("parts sent %q with SentParts %v per attempt, want each part once, resumed at 0, 1, 2", chat.sent, chat.skips)
	}
	if d.res.Receipt == nil || d.res.Receipt.Parts != 3 || !slices.Equal(d.res.Receipt.MessageIDs, []string{"m1", "m2", "m3"}) {
		t.Fatalf("delivered receipt = %+v, want 3 parts with message ids m1 m2 m3", d.res.Receipt)
	}
}

// TestDispatcherDestination: a target with a destination is queued on
// its connector's subject and reaches the connector with the destination.
func TestDispatcherDestination(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	chat := &fake{}
	n := note("1", "chat:-1001234", "to another chat")
	n.ID = connectors.NotificationID(n.RunID, "", n.Target)
	enqueue(t, b, n)
	stop := run(t, b, connectors.Registry{"chat": chat}, fastRetries)
	d := next(t, events)
	stopped(t, stop)
	calls := chat.Calls()
	if d.outcome != connectors.OutcomeDelivered || len(calls) != 1 {
		t.Fatalf("event %s, %d sends; want delivered once", d.outcome, len(calls))
	}
	if got := calls[0].n; got.Connector() != "chat" || got.Destination() != "-1001234" {
		t.Fatalf("connector got target %q (connector %q, destination %q), want chat and -1001234", got.Target, got.Connector(), got.Destination())
	}
}

// States says how each connector's last send went (what /readyz and the
// console's overview show): up, failing, unknown before the first send;
// never an error text.
func TestDispatcherStates(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	failing := &fake{fn: func(context.Context, connectors.Notification, int) error {
		return connectors.Permanent(errors.New("403 blocked by user token-abcdef123456"))
	}}
	reg := connectors.Registry{"good": &fake{}, "failing": failing, "idle": &fake{}}
	d := connectors.NewDispatcher(b, reg, fastRetries, nil)
	if got := d.States(); got["good"] != connectors.StateUnknown || got["failing"] != connectors.StateUnknown || len(got) != 3 {
		t.Fatalf("States before any send = %v, want every connector unknown", got)
	}
	enqueue(t, b, note("g", "good", "x"), note("f", "failing", "x"))
	stop := start(t, d)
	for range 2 {
		next(t, events)
	}
	want := map[string]string{"good": connectors.StateUp, "failing": connectors.StateFailing, "idle": connectors.StateUnknown}
	if got := d.States(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("States after the sends = %v, want %v", got, want)
	}
	stopped(t, stop)
}
