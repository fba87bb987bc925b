package cron

import (
	"context"
	"slices"
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
	"github.com/agentwork/agentwork/model"
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
	startRunnerWith(t, b, clk, s, p)
}

// startRunnerWith is startRunner with another model provider.
func startRunnerWith(t *testing.T, b *bus.Bus, clk clock.Clock, s *Scheduler, p model.Provider) {
	t.Helper()
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
	tick := time.Now().UTC().Add(time.Second).Truncate(time.Second)
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, Config{Jobs: []Job{{ID: "report", Name: "Sales report", At: &tick, Prompt: "say hi", Targets: []string{"ops"}}}}, results)
	events := cronEvents(t, b)
	startRunner(t, b, clock.Real{}, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{Text: "sales are up 5%"}})

	ev, res := nextEvent(t, events)
	if ev.Type != "agentwork.cron.done" || ev.Subject != "report" || res.Text != "sales are up 5%" ||
		res.ScheduledAt == nil || !res.ScheduledAt.Equal(tick) || len(res.Targets) != 1 || res.Targets[0] != "ops" ||
		res.Metadata[MetaName] != "Sales report" {
		t.Fatalf("event %s %s: %+v", ev.Type, ev.Subject, res)
	}
	st := waitState(t, b, "report", func(st State) bool { return st.LastOutcome != "" })
	if st.LastOutcome != bus.OutcomeDone || st.Runs != 1 || st.ConsecutiveFailures != 0 || st.LastRunID != ev.RunID || st.Fires != 1 {
		t.Fatalf("state = %+v", st)
	}
	if ds := deliveries(t, b, "ops"); len(ds) != 1 || ds[0].Text != "sales are up 5%" {
		t.Fatalf("deliveries = %+v", ds)
	}
	hist, err := s.History(t.Context(), "report", 5)
	if err != nil || len(hist) != 1 || hist[0].Outcome != bus.OutcomeDone || hist[0].RunID != ev.RunID {
		t.Fatalf("History = %+v, %v", hist, err)
	}
}

// Consecutive failures: an alert after alert_after, a pause (with its
// reason and an alert) after pause_after; a paused job stops firing.
func TestFailuresAlertThenPause(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	results := make(chan TickResult, 100)
	flaky := secondJob("flaky")
	flaky.Name = "Nightly import"
	s, _ := startScheduler(t, b, Config{Jobs: []Job{flaky}, AlertAfter: 2, PauseAfter: 3}, results)
	events := cronEvents(t, b)
	startRunner(t, b, clock.Real{}, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{
		Error: &script.Fault{Class: "permanent", Message: "model refuses"},
	}})

	st := waitState(t, b, "flaky", func(st State) bool { return st.Paused })
	if !strings.Contains(st.PausedReason, "3 consecutive failed runs") || !strings.Contains(st.PausedReason, "model refuses") ||
		st.LastOutcome != bus.OutcomeError || st.LastReason != "permanent" || st.ConsecutiveFailures != 3 {
		t.Fatalf("state = %+v", st)
	}
	for i := 1; i <= 3; i++ {
		if _, res := nextEvent(t, events); res.Outcome != bus.OutcomeError || res.Class != "permanent" {
			t.Fatalf("run %d: %+v", i, res)
		}
	}
	ds := deliveries(t, b, "ops")
	if len(ds) != 2 || !strings.Contains(ds[0].Text, `cron job "Nightly import" (flaky) failed 2 time(s) in a row`) ||
		!strings.Contains(ds[1].Text, `cron job "Nightly import" (flaky) is paused after 3 failed runs`) ||
		ds[0].Urgency != tools.UrgencyImportant {
		t.Fatalf("deliveries = %+v, want the alert after 2 failures and the pause notice", ds)
	}
	eventually(t, func() bool { return pendingDue(t, b, timerKey("flaky")).IsZero() })
	got, err := s.Get(t.Context(), "flaky")
	if err != nil || got.Status != StatusPaused || got.Next != nil {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

// retry re-runs a failed tick after its backoff, once.
func TestRetryAfterFailure(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tick := time.Now().UTC().Add(time.Second).Truncate(time.Second)
	results := make(chan TickResult, 100)
	job := Job{ID: "hourly", At: &tick, Prompt: "p", Retry: Retry{Attempts: 1, Backoff: Duration(time.Second)}}
	s, _ := startScheduler(t, b, Config{Jobs: []Job{job}}, results)
	events := cronEvents(t, b)
	startRunner(t, b, clock.Real{}, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{
		Text: "fine now", Error: &script.Fault{Class: "permanent", Message: "first call fails", Times: 1},
	}})

	_, res := nextEvent(t, events)
	if res.Outcome != bus.OutcomeError {
		t.Fatalf("first run: %+v", res)
	}
	st := waitState(t, b, "hourly", func(st State) bool { return st.Retry != nil })
	if !st.Retry.Tick.Equal(tick) || st.Retry.Attempt != 1 || st.Retry.At.Sub(*st.LastRunAt) != time.Second {
		t.Fatalf("retry = %+v (last run at %v), want attempt 1 a second after the failed run", st.Retry, st.LastRunAt)
	}
	eventually(t, func() bool { return pendingDue(t, b, retryKey("hourly")).Equal(st.Retry.At) })
	_, res = nextEvent(t, events)
	if res.Outcome != bus.OutcomeDone || res.Metadata[metaRetry] != "1" || !res.ScheduledAt.Equal(tick) {
		t.Fatalf("retry run: %+v", res)
	}
	st = waitState(t, b, "hourly", func(st State) bool { return st.LastOutcome == bus.OutcomeDone && st.Retry == nil })
	if st.ConsecutiveFailures != 0 || st.Fires != 1 {
		t.Fatalf("state = %+v", st)
	}
	reqs := requests(t, b)
	if len(reqs) != 2 || reqs[1].MsgID != MsgID("hourly", tick, 1) {
		t.Fatalf("requests = %+v", reqs)
	}
}

// Overlap through the runner: a tick that finds the previous run going
// ends with skip busy (skip), or waits and runs after it (queue); the
// state's failures are untouched either way.
func TestOverlapThroughRunner(t *testing.T) {
	t.Parallel()
	for _, overlap := range []string{OverlapSkip, OverlapQueue} {
		t.Run(overlap, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			results := make(chan TickResult, 100)
			job := Job{ID: "slow", Schedule: "* * * * * *", Prompt: "p", Overlap: overlap}
			s, stop := startScheduler(t, b, Config{Jobs: []Job{job}}, results)
			events := cronEvents(t, b)
			startRunner(t, b, clock.Real{}, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{Text: "done", Delay: 1500 * time.Millisecond}})

			_, first := nextEvent(t, events)
			_, second := nextEvent(t, events)
			stop()
			if overlap == OverlapSkip {
				// The second tick finds the first running.
				if first.Outcome != bus.OutcomeSkip || first.Reason != agentwork.ReasonBusy ||
					second.Outcome != bus.OutcomeDone || !second.ScheduledAt.Before(*first.ScheduledAt) {
					t.Fatalf("events %+v, %+v; want skip busy of a tick, then done of the tick before", first, second)
				}
			} else if first.Outcome != bus.OutcomeDone || second.Outcome != bus.OutcomeDone || !second.ScheduledAt.After(*first.ScheduledAt) {
				t.Fatalf("events %+v, %+v; want done, then done of a later tick after it", first, second)
			}
			st := waitState(t, b, "slow", func(st State) bool { return st.LastOutcome == bus.OutcomeDone })
			if st.ConsecutiveFailures != 0 {
				t.Fatalf("state = %+v", st)
			}
		})
	}
}

// The ticks a run_all catch-up fires together all run, one after another,
// although the job's overlap policy is skip: none ends busy because of
// another.
func TestRunAllCatchupRunsEveryTick(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	job := Job{ID: "daily", Schedule: "0 0 * * *", Prompt: "p", Catchup: Catchup{Policy: CatchupRunAll, Max: 3}}
	last := today.AddDate(0, 0, -3)
	seedConfig(t, b, job, last.Add(-time.Hour), State{LastTick: &last, Fires: 1})
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, Config{Jobs: []Job{job}, Grace: time.Second}, results)
	events := cronEvents(t, b)
	startRunner(t, b, clock.Real{}, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{Text: "caught up", Delay: 300 * time.Millisecond}})

	var ran []time.Time
	for range 3 {
		_, res := nextEvent(t, events)
		if res.Outcome != bus.OutcomeDone || res.Metadata[metaCatchup] == "" {
			t.Fatalf("run of a caught-up tick: %+v, want done", res)
		}
		ran = append(ran, res.ScheduledAt.UTC())
	}
	slices.SortFunc(ran, time.Time.Compare)
	if want := []time.Time{today.AddDate(0, 0, -2), today.AddDate(0, 0, -1), today}; !slices.EqualFunc(ran, want, time.Time.Equal) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
	if st := waitState(t, b, "daily", func(st State) bool { return st.Runs == 3 }); st.Fires != 4 {
		t.Fatalf("state = %+v", st)
	}
}

// A job deleted after the job gate let its run in (here: by a gate after
// it) does not run with the runner's tools: its settings are an error, the
// run is tried again, and the job gate skips it as deleted.
func TestRunOfAJobDeletedAfterTheGateIsSkipped(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{}, make(chan TickResult, 100))
	ctx := t.Context()
	if _, err := s.Add(ctx, Job{ID: "adhoc", Schedule: "@daily", Prompt: "look", Targets: []string{"ops"}}); err != nil {
		t.Fatal(err)
	}
	p, err := script.New(script.Config{Rules: []script.Rule{{Match: script.Match{Source: "cron"}, Reply: script.Reply{Text: "ran"}}}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.Notify())
	if err != nil {
		t.Fatal(err)
	}
	r := agentwork.NewRunner(b, p, reg, agentwork.Config{
		AckWait: time.Second, Backoff: []time.Duration{50 * time.Millisecond}, ShutdownGrace: time.Second,
	}, agentwork.WithConnectors("ops"))
	pol := s.Policy()
	pol.Input = append(pol.Input, agentwork.InputGateFunc(func(ctx context.Context, run *agentwork.Run) error {
		if err := s.Delete(ctx, run.Request.Name); err != nil && !isErr(err, ErrNotFound) {
			return err
		}
		return nil
	}))
	r.Handle(bus.SourceCron, pol)
	events := cronEvents(t, b)
	t.Cleanup(runUntil(t, r.Run))

	if _, err := s.RunNow(ctx, "adhoc"); err != nil {
		t.Fatal(err)
	}
	if ev, res := nextEvent(t, events); ev.Type != "agentwork.cron.skip" || res.Reason != ReasonDeleted {
		t.Fatalf("event %s %+v, want skipped as deleted (not run with the runner's settings)", ev.Type, res)
	}
}
