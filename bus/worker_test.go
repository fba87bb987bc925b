package bus_test

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

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// workWait bounds every wait for something a worker does.
const workWait = 15 * time.Second

const (
	workStream  = "WORK"
	workDurable = "workers"
)

// newWork starts a bus with a stream of its own for t and returns the bus
// and a config for workers on it.
func newWork(t *testing.T) (*bus.Bus, bus.WorkerConfig) {
	t.Helper()
	b := bustest.New(t)
	if _, err := b.JetStream().CreateStream(t.Context(), jetstream.StreamConfig{Name: workStream, Subjects: []string{"work.>"}}); err != nil {
		t.Fatal(err)
	}
	return b, bus.WorkerConfig{
		Stream:        workStream,
		Consumer:      jetstream.ConsumerConfig{Durable: workDurable, AckWait: time.Minute},
		ShutdownGrace: workWait,
	}
}

// publishWork publishes n messages, work.0 ... work.<n-1>, with data "0" ... .
func publishWork(t *testing.T, b *bus.Bus, n int) {
	t.Helper()
	for i := range n {
		if _, err := b.JetStream().Publish(t.Context(), fmt.Sprintf("work.%d", i), fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// startWorker runs a worker until the test ends or stop is called; stop
// returns Run's error.
func startWorker(t *testing.T, b *bus.Bus, cfg bus.WorkerConfig, h bus.Handler) (w *bus.Worker, stop func() error) {
	t.Helper()
	w, err := bus.NewWorker(b.JetStream(), cfg, h)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-errc:
			case <-time.After(2 * workWait):
				t.Error("Worker.Run did not return after its ctx ended")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return w, stop
}

// eventuallyTrue waits until cond holds, for at most workWait.
func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(workWait)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within %s", what, workWait)
		}
	}
}

func consumerInfo(t *testing.T, b *bus.Bus) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := b.JetStream().Consumer(t.Context(), workStream, workDurable)
	if err != nil {
		return &jetstream.ConsumerInfo{NumAckPending: -1} // not created yet
	}
	ci, err := c.Info(t.Context())
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return ci
}

// advisories delivers the stream sequence of every message the work
// consumer is told about with the advisory of prefix (naks, terms).
func advisories(t *testing.T, b *bus.Bus, prefix string) <-chan uint64 {
	t.Helper()
	ch := make(chan uint64, 100)
	sub, err := b.Conn().Subscribe(prefix+"."+workStream+"."+workDurable, func(m *nats.Msg) {
		var adv struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil {
			t.Errorf("advisory %s: %v", m.Data, err)
			return
		}
		ch <- adv.StreamSeq
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(workWait):
		t.Fatalf("%s: not within %s", what, workWait)
		panic("unreachable")
	}
}

func numDelivered(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.NumDelivered
}

// No more handlers run at once than Concurrency, and the worker then holds
// the next message without starting it.
func TestWorkerBoundsConcurrency(t *testing.T) {
	t.Parallel()
	b, cfg := newWork(t)
	const total, limit = 12, 3
	cfg.Concurrency = limit
	var active, most, handled atomic.Int64
	started := make(chan struct{}, total)
	release := make(chan struct{})
	allDone := make(chan struct{})
	publishWork(t, b, total)
	startWorker(t, b, cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
		n := active.Add(1)
		for {
			if old := most.Load(); n <= old || most.CompareAndSwap(old, n) {
				break
			}
		}
		started <- struct{}{}
		<-release
		active.Add(-1)
		if handled.Add(1) == total {
			close(allDone)
		}
		return bus.Done()
	})
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll) // before the worker's stop, should the test fail
	for range limit {
		recv(t, "a handler started", started)
	}
	// The worker holds one more (waiting for a slot) but does not start it.
	eventuallyTrue(t, "a message held beyond the running ones", func() bool { return consumerInfo(t, b).NumAckPending > limit })
	if n := active.Load(); n != limit {
		t.Fatalf("%d handlers running with %d messages held, want %d", n, consumerInfo(t, b).NumAckPending, limit)
	}
	releaseAll()
	recv(t, "every message handled", allDone)
	if n := most.Load(); n != limit {
		t.Errorf("at most %d handlers ran at once, want %d", n, limit)
	}
	eventuallyTrue(t, "every message acked", func() bool { return consumerInfo(t, b).NumAckPending == 0 })
	if ci := consumerInfo(t, b); ci.Delivered.Consumer != total {
		t.Errorf("delivered %d times, want %d (none redelivered)", ci.Delivered.Consumer, total)
	}
}

// A message that waits for a slot and is then handled slowly, longer than
// AckWait in all, is not redelivered: the worker signals progress for it
// all along. Without the signals it is.
func TestWorkerProgressHoldsSlowMessages(t *testing.T) {
	t.Parallel()
	for _, signals := range []bool{true, false} {
		t.Run(fmt.Sprintf("signals=%v", signals), func(t *testing.T) {
			t.Parallel()
			b, cfg := newWork(t)
			const ackWait = time.Second
			cfg.Consumer.AckWait = ackWait
			if !signals {
				cfg.Signal = func(jetstream.Msg) error { return nil }
			}
			var calls atomic.Int64
			done := make(chan struct{}, 10)
			publishWork(t, b, 2)
			// Each message takes 1.5 AckWait, so the second one waits that
			// long for the slot and then is handled that long.
			_, stop := startWorker(t, b, cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
				calls.Add(1)
				select {
				case <-time.After(ackWait * 3 / 2):
				case <-ctx.Done():
					return bus.Defer(0)
				}
				done <- struct{}{}
				return bus.Done()
			})
			if signals {
				recv(t, "first message handled", done)
				recv(t, "second message handled", done)
				if err := stop(); err != nil {
					t.Fatalf("Run = %v, want nil", err)
				}
				if ci := consumerInfo(t, b); ci.Delivered.Consumer != 2 || ci.NumRedelivered != 0 || calls.Load() != 2 {
					t.Errorf("delivered %d times (%d redelivered), handled %d times; want 2, 0, 2", ci.Delivered.Consumer, ci.NumRedelivered, calls.Load())
				}
				return
			}
			eventuallyTrue(t, "a message redelivered without progress signals", func() bool { return consumerInfo(t, b).Delivered.Consumer > 2 })
		})
	}
}

// At shutdown the messages the worker holds but has not started are put
// back at once, while the one in flight finishes; another worker then gets
// them long before AckWait.
func TestWorkerShutdownPutsBackUnstarted(t *testing.T) {
	t.Parallel()
	b, cfg := newWork(t)
	cfg.PullMax = 4 // some wait in the client's buffer, not only in the callback
	const total = 6
	publishWork(t, b, total)
	started, release := make(chan struct{}, 1), make(chan struct{})
	var handledFirst atomic.Int64
	w, stop := startWorker(t, b, cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
		if handledFirst.Add(1) == 1 {
			started <- struct{}{}
			<-release
		}
		return bus.Done()
	})
	recv(t, "first handler started", started)
	eventuallyTrue(t, "messages held beyond the running one", func() bool { return consumerInfo(t, b).NumAckPending >= 3 })
	held := consumerInfo(t, b).NumAckPending - 1
	naks := advisories(t, b, server.JSAdvisoryConsumerMsgNakPre)
	returned := make(chan error, 1)
	go func() { returned <- stop() }()
	for range held {
		recv(t, "an unstarted message put back", naks)
	}
	if err := w.Ready(); !errors.Is(err, bus.ErrNotConsuming) {
		t.Errorf("Ready while shutting down = %v, want ErrNotConsuming", err)
	}
	close(release)
	if err := recv(t, "Run returned", returned); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if n := handledFirst.Load(); n != 1 {
		t.Fatalf("the stopping worker handled %d messages, want only the one in flight", n)
	}
	var rest atomic.Int64
	allDone := make(chan struct{})
	startWorker(t, b, cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
		if rest.Add(1) == total-1 {
			close(allDone)
		}
		return bus.Done()
	})
	recv(t, "the rest handled by the next worker (AckWait is a minute)", allDone)
}

// A handler still running when the shutdown grace is over has its ctx
// cancelled; Run waits for it, and its Defer(0) puts the message back for
// the next worker at once.
func TestWorkerShutdownCancelsAfterGrace(t *testing.T) {
	t.Parallel()
	b, cfg := newWork(t)
	cfg.ShutdownGrace = 200 * time.Millisecond
	publishWork(t, b, 1)
	started := make(chan struct{})
	var handlerErr error
	_, stop := startWorker(t, b, cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
		close(started)
		<-ctx.Done()
		handlerErr = ctx.Err()
		return bus.Defer(0)
	})
	recv(t, "handler started", started)
	begun := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if took := time.Since(begun); took < cfg.ShutdownGrace {
		t.Errorf("Run returned %s after cancel, want it to wait the grace of %s", took, cfg.ShutdownGrace)
	}
	if !errors.Is(handlerErr, context.Canceled) {
		t.Errorf("the handler's ctx ended with %v, want context.Canceled", handlerErr)
	}
	again := make(chan uint64, 1)
	startWorker(t, b, cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
		again <- numDelivered(m)
		return bus.Done()
	})
	if n := recv(t, "the message redelivered (AckWait is a minute)", again); n != 2 {
		t.Errorf("NumDelivered = %d, want 2", n)
	}
}

// A handler in flight at shutdown finishes within the grace, with its ctx
// intact, and its verdict is settled before Run returns.
func TestWorkerShutdownLetsHandlersFinish(t *testing.T) {
	t.Parallel()
	b, cfg := newWork(t)
	publishWork(t, b, 1)
	started, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	var handlerErr error
	w, stop := startWorker(t, b, cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
		close(started)
		<-release
		handlerErr = ctx.Err()
		finished.Store(true)
		return bus.Done()
	})
	recv(t, "handler started", started)
	returned := make(chan error, 1)
	go func() { returned <- stop() }()
	eventuallyTrue(t, "shutdown begun", func() bool { return w.Ready() != nil })
	close(release)
	if err := recv(t, "Run returned", returned); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if !finished.Load() || handlerErr != nil {
		t.Errorf("Run returned with the handler finished=%v, its ctx %v; want finished with its ctx alive", finished.Load(), handlerErr)
	}
	if ci := consumerInfo(t, b); ci.NumAckPending != 0 || ci.AckFloor.Consumer != 1 {
		t.Errorf("ack pending %d, ack floor %d; want the message acked before Run returned", ci.NumAckPending, ci.AckFloor.Consumer)
	}
}

// A panicking handler does not take the worker down: the panic is logged
// with the message's subject and the message is retried.
func TestWorkerPanicIsRetried(t *testing.T) {
	t.Parallel()
	b, cfg := newWork(t)
	core, logs := observer.New(zapcore.ErrorLevel)
	cfg.Log, cfg.PanicDelay = zap.New(core), 10*time.Millisecond
	publishWork(t, b, 1)
	seen := make(chan uint64, 2)
	_, stop := startWorker(t, b, cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
		n := numDelivered(m)
		seen <- n
		if n == 1 {
			panic("a bug")
		}
		return bus.Done()
	})
	if n := recv(t, "first delivery", seen); n != 1 {
		t.Fatalf("NumDelivered = %d, want 1", n)
	}
	if n := recv(t, "the message retried after the panic", seen); n != 2 {
		t.Fatalf("NumDelivered = %d, want 2", n)
	}
	eventuallyTrue(t, "the message acked", func() bool { return consumerInfo(t, b).NumAckPending == 0 })
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	entries := logs.FilterMessageSnippet("panicked").AllUntimed()
	if len(entries) != 1 || entries[0].ContextMap()["subject"] != "work.0" {
		t.Errorf("panic log entries = %+v, want one naming subject work.0", entries)
	}
}

// Each verdict settles the message as it says.
func TestWorkerVerdicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		verdict   bus.Verdict
		doubleAck bool
		// redelivered: the message comes again, at the earliest after this.
		redelivered bool
		after       time.Duration
		advisory    string // expected advisory prefix, if any
	}{
		{verdict: bus.Done()},
		{verdict: bus.Done(), doubleAck: true},
		{verdict: bus.Retry(300 * time.Millisecond), redelivered: true, after: 300 * time.Millisecond, advisory: server.JSAdvisoryConsumerMsgNakPre},
		{verdict: bus.Defer(300 * time.Millisecond), redelivered: true, after: 300 * time.Millisecond, advisory: server.JSAdvisoryConsumerMsgNakPre},
		{verdict: bus.Defer(0), redelivered: true, advisory: server.JSAdvisoryConsumerMsgNakPre},
		{verdict: bus.Terminate(), advisory: server.JSAdvisoryConsumerMsgTerminatedPre},
		{verdict: bus.Leave(), redelivered: true, after: time.Second}, // the AckWait
	} {
		t.Run(fmt.Sprintf("%v double=%v", tc.verdict, tc.doubleAck), func(t *testing.T) {
			t.Parallel()
			b, cfg := newWork(t)
			cfg.Consumer.AckWait, cfg.DoubleAck = time.Second, tc.doubleAck
			var adv <-chan uint64
			if tc.advisory != "" {
				adv = advisories(t, b, tc.advisory)
			}
			publishWork(t, b, 1)
			seen := make(chan time.Time, 2)
			settled := make(chan struct{})
			_, stop := startWorker(t, b, cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
				seen <- time.Now()
				if numDelivered(m) == 1 {
					return tc.verdict
				}
				close(settled)
				return bus.Done()
			})
			first := recv(t, "first delivery", seen)
			if tc.advisory != "" {
				if seq := recv(t, "advisory "+tc.advisory, adv); seq != 1 {
					t.Errorf("advisory for stream seq %d, want 1", seq)
				}
			}
			if tc.redelivered {
				second := recv(t, "redelivery", seen)
				if gap := second.Sub(first); gap < tc.after {
					t.Errorf("redelivered after %s, want at least %s", gap, tc.after)
				}
				recv(t, "redelivery handled", settled)
			}
			eventuallyTrue(t, "the message settled", func() bool { return consumerInfo(t, b).NumAckPending == 0 })
			if err := stop(); err != nil {
				t.Fatalf("Run = %v, want nil", err)
			}
			want := uint64(1)
			if tc.redelivered {
				want = 2
			}
			if ci := consumerInfo(t, b); ci.Delivered.Consumer != want {
				t.Errorf("delivered %d times, want %d", ci.Delivered.Consumer, want)
			}
		})
	}
}

// A worker whose durable consumer is deleted under it returns an error
// wrapping ErrConsumerLost instead of waiting for messages that never come.
func TestWorkerStopsWhenItsConsumerIsDeleted(t *testing.T) {
	t.Parallel()
	b, cfg := newWork(t)
	w, err := bus.NewWorker(b.JetStream(), cfg, func(context.Context, jetstream.Msg) bus.Verdict { return bus.Done() })
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan error, 1)
	go func() { returned <- w.Run(t.Context()) }()
	eventuallyTrue(t, "worker ready", func() bool { return w.Ready() == nil })
	if err := b.JetStream().DeleteConsumer(t.Context(), workStream, workDurable); err != nil {
		t.Fatal(err)
	}
	err = recv(t, "Run returned after its consumer was deleted", returned)
	if !errors.Is(err, bus.ErrConsumerLost) || !strings.Contains(err.Error(), workDurable) {
		t.Fatalf("Run = %v, want an error naming %s and wrapping ErrConsumerLost", err, workDurable)
	}
	if err := w.Ready(); !errors.Is(err, bus.ErrNotConsuming) {
		t.Errorf("Ready after Run returned = %v, want ErrNotConsuming", err)
	}
}

// Run retries creating its consumer while JetStream cannot (here: the
// stream is not there yet), and consumes once it can.
func TestWorkerRetriesConsumerCreation(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	core, logs := observer.New(zapcore.WarnLevel)
	cfg := bus.WorkerConfig{Stream: "LATE", Consumer: jetstream.ConsumerConfig{Durable: workDurable}, Log: zap.New(core)}
	got := make(chan string, 1)
	startWorker(t, b, cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
		got <- string(m.Data())
		return bus.Done()
	})
	eventuallyTrue(t, "a retry logged", func() bool { return logs.FilterMessageSnippet("not ready").Len() > 0 })
	if _, err := b.JetStream().CreateStream(t.Context(), jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JetStream().Publish(t.Context(), "late", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if s := recv(t, "the message handled", got); s != "hello" {
		t.Errorf("handled %q, want hello", s)
	}
}

// Run gives up creating its consumer after StartTimeout and says why; a
// ctx that ends while it retries is a clean stop.
func TestWorkerStartTimeout(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := bus.WorkerConfig{Stream: "MISSING", Consumer: jetstream.ConsumerConfig{Durable: workDurable}, StartTimeout: 300 * time.Millisecond}
	w, err := bus.NewWorker(b.JetStream(), cfg, func(context.Context, jetstream.Msg) bus.Verdict { return bus.Done() })
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "MISSING") {
		t.Errorf("Run on a missing stream = %v, want an error naming the stream", err)
	}
	if err := w.Run(t.Context()); err == nil {
		t.Error("a second Run = nil, want an error")
	}
	cfg.StartTimeout = time.Hour
	w, err = bus.NewWorker(b.JetStream(), cfg, func(context.Context, jetstream.Msg) bus.Verdict { return bus.Done() })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run stopped while retrying = %v, want nil", err)
	}
}

func TestWorkerConfigValidate(t *testing.T) {
	t.Parallel()
	ok := bus.WorkerConfig{Stream: "S", Consumer: jetstream.ConsumerConfig{Durable: "d"}}
	for _, tc := range []struct {
		name string
		mod  func(*bus.WorkerConfig)
		want string // "" = valid
	}{
		{"minimal", func(*bus.WorkerConfig) {}, ""},
		{"no stream", func(c *bus.WorkerConfig) { c.Stream = "" }, "no stream"},
		{"no durable", func(c *bus.WorkerConfig) { c.Consumer.Durable = "" }, "durable"},
		{"ack none", func(c *bus.WorkerConfig) { c.Consumer.AckPolicy = jetstream.AckNonePolicy }, "explicit"},
		{"negative concurrency", func(c *bus.WorkerConfig) { c.Concurrency = -1 }, "negative"},
		{"negative replay horizon", func(c *bus.WorkerConfig) { c.ReplayHorizon = -time.Second }, "replay horizon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := ok
			tc.mod(&cfg)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestVerdictString(t *testing.T) {
	t.Parallel()
	for v, want := range map[bus.Verdict]string{
		bus.Done(): "done", {}: "done", bus.Retry(time.Second): "retry after 1s", bus.Defer(-time.Second): "defer after 0s",
		bus.Terminate(): "terminate", bus.Leave(): "leave",
	} {
		if got := v.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", v, got, want)
		}
	}
}

// A consumer deleted while the worker has no pull request waiting on the
// server (its one slot busy, the next message waiting for it) gets no word
// from the server; the worker still finds out, at the first missed pull
// heartbeat once it pulls again, and returns.
func TestWorkerFindsConsumerDeletedWhileBusy(t *testing.T) {
	t.Parallel()
	b, cfg := newWork(t)
	publishWork(t, b, 2)
	started, release := make(chan struct{}, 2), make(chan struct{})
	w, err := bus.NewWorker(b.JetStream(), cfg, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
		started <- struct{}{}
		<-release
		return bus.Done()
	})
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan error, 1)
	go func() { returned <- w.Run(t.Context()) }()
	recv(t, "the first message handled", started)
	eventuallyTrue(t, "the second message waiting for the slot", func() bool { return consumerInfo(t, b).NumAckPending == 2 })
	if err := b.JetStream().DeleteConsumer(t.Context(), workStream, workDurable); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := recv(t, "Run returned after its consumer was deleted", returned); !errors.Is(err, bus.ErrConsumerLost) {
		t.Fatalf("Run = %v, want an error wrapping ErrConsumerLost", err)
	}
}
