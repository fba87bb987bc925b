package bus_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// replayWork starts a bus with a stream taking work.> and other.> for t,
// and returns it with a worker config on work.> whose ReplayHorizon is an
// hour and whose clock says it is now an hour after at: messages stored
// before at are past the horizon, later ones within it. Its log records
// errors.
func replayWork(t *testing.T, at *time.Time) (*bus.Bus, bus.WorkerConfig, *observer.ObservedLogs) {
	t.Helper()
	b := bustest.New(t)
	if _, err := b.JetStream().CreateStream(t.Context(), jetstream.StreamConfig{Name: workStream, Subjects: []string{"work.>", "other.>"}}); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.ErrorLevel)
	return b, bus.WorkerConfig{
		Stream:        workStream,
		Consumer:      jetstream.ConsumerConfig{Durable: workDurable, FilterSubject: "work.>", AckWait: time.Minute},
		ShutdownGrace: workWait,
		ReplayHorizon: time.Hour,
		Now:           func() time.Time { return at.Add(time.Hour) },
		Log:           zap.New(core),
	}, logs
}

func publish(t *testing.T, b *bus.Bus, subjects ...string) {
	t.Helper()
	for _, s := range subjects {
		if _, err := b.JetStream().Publish(t.Context(), s, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
}

// handled runs a worker with cfg that reports the subject of each message
// it handles; stop ends it.
func handled(t *testing.T, b *bus.Bus, cfg bus.WorkerConfig) (<-chan string, func() error) {
	t.Helper()
	got := make(chan string, 100)
	_, stop := startWorker(t, b, cfg, func(_ context.Context, m jetstream.Msg) bus.Verdict {
		got <- m.Subject()
		return bus.Done()
	})
	return got, stop
}

// expect receives the subjects want, in order, then checks that the
// consumer has handed out nothing else.
func expect(t *testing.T, got <-chan string, b *bus.Bus, want ...string) {
	t.Helper()
	var seen []string
	for range want {
		seen = append(seen, recv(t, fmt.Sprintf("message %d of %v handled", len(seen)+1, want), got))
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("handled %v, want %v", seen, want)
	}
	eventuallyTrue(t, "all acked", func() bool { ci := consumerInfo(t, b); return ci.NumAckPending == 0 && ci.NumPending == 0 })
	select {
	case s := <-got:
		t.Fatalf("handled %s besides %v", s, want)
	default:
	}
}

// A worker whose consumer is missing, on a stream that holds messages on
// its filter older than its ReplayHorizon, creates the consumer to start
// at the horizon: the older messages are not handed out (their "done"
// records may have expired, so they would be done again), and the range
// and count left out are logged as an error. The consumer is then kept as
// it is: a later Run goes on where it stood.
func TestWorkerMissingConsumerStartsAtReplayHorizon(t *testing.T) {
	t.Parallel()
	var at time.Time
	b, cfg, logs := replayWork(t, &at)
	publish(t, b, "other.old", "work.old1", "work.old2", "work.old3") // seq 1-4
	at = time.Now()                                                   // after the server stored them
	publish(t, b, "other.new", "work.new1", "work.new2")              // seq 5-7

	got, stop := handled(t, b, cfg)
	expect(t, got, b, "work.new1", "work.new2")
	entries := logs.FilterMessageSnippet("replay horizon").AllUntimed()
	if len(entries) != 1 {
		t.Fatalf("error logs about the replay horizon: %v, want one", logs.AllUntimed())
	}
	fields := entries[0].ContextMap()
	for k, want := range map[string]uint64{"first_seq": 2, "last_seq": 4, "messages": 3} {
		if fields[k] != want {
			t.Errorf("logged %s = %v, want %d (all fields: %v)", k, fields[k], want, fields)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// Run again, on the consumer now there, with a clock for which every
	// message is past the horizon: it goes on where it stood.
	publish(t, b, "work.later")
	at = time.Now().Add(time.Hour)
	got, _ = handled(t, b, cfg)
	expect(t, got, b, "work.later")
	if n := logs.Len(); n != 1 {
		t.Errorf("error logs after a Run on the existing consumer: %v, want only the first", logs.AllUntimed())
	}
}

// A consumer that exists is never moved: one an operator created to start
// at the beginning hands out every message, old or not, and nothing is
// logged.
func TestWorkerKeepsExistingConsumerWhereItIs(t *testing.T) {
	t.Parallel()
	var at time.Time
	b, cfg, logs := replayWork(t, &at)
	publish(t, b, "work.old1", "work.old2")
	at = time.Now()
	if _, err := b.JetStream().CreateConsumer(t.Context(), workStream, jetstream.ConsumerConfig{
		Durable: workDurable, FilterSubject: "work.>", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	got, _ := handled(t, b, cfg)
	expect(t, got, b, "work.old1", "work.old2")
	if logs.Len() != 0 {
		t.Errorf("error logs: %v, want none", logs.AllUntimed())
	}
	if ci := consumerInfo(t, b); ci.Config.AckWait != time.Minute {
		t.Errorf("AckWait of the existing consumer after Run = %s, want the worker's 1m (its settings are updated)", ci.Config.AckWait)
	}
}

// A missing consumer on a stream with nothing on its filter older than
// the horizon starts at the beginning, as it would without one.
func TestWorkerNewConsumerWithinReplayHorizon(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		before []string // published before the horizon
		after  []string // published after it
	}{
		{"empty stream", nil, nil},
		{"only messages within the horizon", nil, []string{"work.new1", "work.new2"}},
		{"old messages on other subjects only", []string{"other.old"}, []string{"work.new1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var at time.Time
			b, cfg, logs := replayWork(t, &at)
			publish(t, b, tc.before...)
			at = time.Now()
			publish(t, b, tc.after...)
			got, _ := handled(t, b, cfg)
			eventuallyTrue(t, "consumer created", func() bool { return consumerInfo(t, b).NumAckPending >= 0 })
			publish(t, b, "work.last")
			expect(t, got, b, append(slices.Clone(tc.after), "work.last")...)
			if p := consumerInfo(t, b).Config.DeliverPolicy; p != jetstream.DeliverAllPolicy {
				t.Errorf("deliver policy = %s, want all", p)
			}
			if logs.Len() != 0 {
				t.Errorf("error logs: %v, want none", logs.AllUntimed())
			}
		})
	}
}
