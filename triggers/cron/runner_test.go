package cron

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
)

// startRunner runs an agentwork runner with the script provider and the
// scheduler's policy for cron.
func startRunner(t *testing.T, b *bus.Bus, clk clock.Clock, s *Scheduler, rules ...script.Rule) {
	t.Helper()
	p, err := script.New(script.Config{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.Notify())
	if err != nil {
		t.Fatal(err)
	}
	r := agentwork.NewRunner(b, p, reg, agentwork.Config{
		AckWait: time.Second, Backoff: []time.Duration{50 * time.Millisecond}, ShutdownGrace: time.Second,
	}, agentwork.WithClock(clk.Now), agentwork.WithConnectors("ops"))
	r.Handle(bus.SourceCron, s.Policy())
	t.Cleanup(runUntil(t, r.Run))
}

// cronEvents subscribes to cron events (core NATS, from now on).
func cronEvents(t *testing.T, b *bus.Bus) <-chan bus.Event {
	t.Helper()
	ch := make(chan bus.Event, 100)
	sub, err := b.Conn().Subscribe(b.Subjects.Event(bus.SourceCron, "*"), func(m *nats.Msg) {
		ev, err := bus.DecodeEvent(m.Data)
		if err == nil {
			ch <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

func nextEvent(t *testing.T, ch <-chan bus.Event) (bus.Event, agentwork.Result) {
	t.Helper()
	select {
	case ev := <-ch:
		var res agentwork.Result
		if err := ev.DecodeData(&res); err != nil {
			t.Fatal(err)
		}
		return ev, res
	case <-time.After(waitFor):
		t.Fatal("no cron event")
	}
	panic("unreachable")
}

// deliveries reads the notifications queued for a connector.
func deliveries(t *testing.T, b *bus.Bus, target string) []connectors.Notification {
	t.Helper()
	cons, err := b.JetStream().OrderedConsumer(t.Context(), bus.StreamDeliveries, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subjects.Delivery(target)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []connectors.Notification
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
			var nt connectors.Notification
			if err := ev.DecodeData(&nt); err != nil {
				t.Fatal(err)
			}
			out = append(out, nt)
		}
		if n == 0 {
			return out
		}
	}
}

// A tick runs through the real runner: done event, delivery, state with
// the model's outcome, history.
func TestTickRunsEndToEnd(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, clk, Config{Jobs: []Job{minuteJob("report")}}, results)
	startRunner(t, b, clk, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{Text: "sales are up 5%"}})
	events := cronEvents(t, b)

	tick := t0.Truncate(time.Minute).Add(time.Minute)
	advanceTo(t, clk, tick, 1)
	ev, res := nextEvent(t, events)
	if ev.Type != "agentwork.cron.done" || ev.Subject != "report" || res.Text != "sales are up 5%" ||
		res.ScheduledAt == nil || !res.ScheduledAt.Equal(tick) || len(res.Targets) != 1 || res.Targets[0] != "ops" {
		t.Fatalf("event %s %s: %+v", ev.Type, ev.Subject, res)
	}
	st := waitState(t, b, "report", func(st State) bool { return st.LastOutcome != "" })
	if st.LastOutcome != bus.OutcomeDone || st.Runs != 1 || st.ConsecutiveFailures != 0 || st.LastRunID != ev.RunID || st.Fires != 1 {
		t.Fatalf("state = %+v", st)
	}
	if ds := deliveries(t, b, "ops"); len(ds) != 1 || ds[0].Text != "sales are up 5%" {
		t.Fatalf("deliveries = %+v", ds)
	}
	hist, err := NewClient(b).History(t.Context(), "report", 5)
	if err != nil || len(hist) != 1 || hist[0].Outcome != bus.OutcomeDone || hist[0].RunID != ev.RunID {
		t.Fatalf("History = %+v, %v", hist, err)
	}
}

// Consecutive failures: an alert after alert_after, a pause (with its
// reason and an alert) after pause_after; a paused job stops firing.
func TestFailuresAlertThenPause(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, clk, Config{Jobs: []Job{minuteJob("flaky")}, AlertAfter: 2, PauseAfter: 3}, results)
	startRunner(t, b, clk, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{
		Error: &script.Fault{Class: "permanent", Message: "model refuses"},
	}})
	events := cronEvents(t, b)

	tick := t0.Truncate(time.Minute)
	for i := 1; i <= 3; i++ {
		tick = tick.Add(time.Minute)
		advanceTo(t, clk, tick, 1)
		if _, res := nextEvent(t, events); res.Outcome != bus.OutcomeError || res.Class != "permanent" {
			t.Fatalf("run %d: %+v", i, res)
		}
		waitState(t, b, "flaky", func(st State) bool { return st.ConsecutiveFailures == i })
	}
	st := waitState(t, b, "flaky", func(st State) bool { return st.Paused })
	if !strings.Contains(st.PausedReason, "3 consecutive failed runs") || !strings.Contains(st.PausedReason, "model refuses") ||
		st.LastOutcome != bus.OutcomeError || st.LastReason != "permanent" {
		t.Fatalf("state = %+v", st)
	}
	ds := deliveries(t, b, "ops")
	if len(ds) != 2 || !strings.Contains(ds[0].Text, "failed 2 time(s) in a row") || !strings.Contains(ds[1].Text, "is paused after 3 failed runs") ||
		ds[0].Urgency != tools.UrgencyImportant {
		t.Fatalf("deliveries = %+v, want the alert after 2 failures and the pause notice", ds)
	}
	eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.entries["flaky"].index < 0
	})
	got, err := s.Get(t.Context(), "flaky")
	if err != nil || got.Status != StatusPaused || got.Next != nil {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

// retry re-runs a failed tick after its backoff, once.
func TestRetryAfterFailure(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(time.Date(2026, 5, 4, 9, 59, 30, 0, time.UTC))
	results := make(chan TickResult, 100)
	job := Job{ID: "hourly", Schedule: "0 * * * *", Prompt: "p", Retry: Retry{Attempts: 1, Backoff: Duration(time.Minute)}}
	s, _ := startScheduler(t, b, clk, Config{Jobs: []Job{job}}, results)
	startRunner(t, b, clk, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{
		Text: "fine now", Error: &script.Fault{Class: "permanent", Message: "first call fails", Times: 1},
	}})
	events := cronEvents(t, b)

	tick := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	advanceTo(t, clk, tick, 1)
	if _, res := nextEvent(t, events); res.Outcome != bus.OutcomeError {
		t.Fatalf("first run: %+v", res)
	}
	st := waitState(t, b, "hourly", func(st State) bool { return st.Retry != nil })
	if !st.Retry.Tick.Equal(tick) || st.Retry.Attempt != 1 || !st.Retry.At.Equal(tick.Add(time.Minute)) {
		t.Fatalf("retry = %+v", st.Retry)
	}
	advanceTo(t, clk, tick.Add(time.Minute), 1)
	_, res := nextEvent(t, events)
	if res.Outcome != bus.OutcomeDone || res.Metadata[metaRetry] != "1" || !res.ScheduledAt.Equal(tick) {
		t.Fatalf("retry run: %+v", res)
	}
	st = waitState(t, b, "hourly", func(st State) bool { return st.LastOutcome == bus.OutcomeDone && st.Retry == nil })
	if st.ConsecutiveFailures != 0 || st.Fires != 1 {
		t.Fatalf("state = %+v", st)
	}
	reqs := requests(t, b)
	if len(reqs) != 2 || reqs[1].MsgID != "hourly:2026-05-04T10:00:00Z:retry1" {
		t.Fatalf("requests = %+v", reqs)
	}
}

// Overlap through the runner: a tick that finds the previous run going
// ends with skip busy (skip), or waits and runs after it (queue); the
// state's failures are untouched either way.
func TestOverlapThroughRunner(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		overlap string
		runs    int // runs counted in the state
	}{
		{OverlapSkip, 1},
		{OverlapQueue, 2},
	} {
		t.Run(tt.overlap, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			clk := clock.NewFake(t0)
			results := make(chan TickResult, 100)
			job := Job{ID: "slow", Schedule: "*/10 * * * * *", Prompt: "p", Overlap: tt.overlap}
			s, _ := startScheduler(t, b, clk, Config{Jobs: []Job{job}}, results)
			startRunner(t, b, clk, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{Text: "done", Delay: 2 * time.Second}})
			events := cronEvents(t, b)

			first := t0.Add(10 * time.Second)
			advanceTo(t, clk, first, 1)
			nextResults(t, results, 1)
			// The first run holds the lease while the model "thinks"; wait for it.
			ctx := t.Context()
			eventually(t, func() bool {
				l, err := agentwork.Running(ctx, b, agentwork.OverlapKey(bus.SourceCron, "slow"))
				return err == nil && l != nil
			})
			advanceTo(t, clk, first.Add(10*time.Second), 1)
			_, res := nextEvent(t, events)
			if tt.overlap == OverlapSkip {
				if res.Outcome != bus.OutcomeSkip || res.Reason != agentwork.ReasonBusy {
					t.Fatalf("second tick: %+v, want skip busy", res)
				}
				_, res = nextEvent(t, events)
			}
			if res.Outcome != bus.OutcomeDone || !res.ScheduledAt.Equal(first) {
				t.Fatalf("first run: %+v, want done", res)
			}
			if tt.overlap == OverlapQueue {
				if _, res = nextEvent(t, events); res.Outcome != bus.OutcomeDone || !res.ScheduledAt.Equal(first.Add(10*time.Second)) {
					t.Fatalf("second tick: %+v, want done after the first", res)
				}
			}
			st := waitState(t, b, "slow", func(st State) bool { return st.LastOutcome == bus.OutcomeDone && st.Runs == tt.runs })
			if st.ConsecutiveFailures != 0 {
				t.Fatalf("state = %+v", st)
			}
		})
	}
}
