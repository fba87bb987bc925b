package heartbeat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/triggers/activehours"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

func TestPlan(t *testing.T) {
	t.Parallel()
	berlin := activehours.Window{Start: "09:00", End: "22:00", Timezone: "Europe/Berlin"} // 08:00-21:00 UTC in March
	utc := func(d, h, m int) time.Time { return time.Date(2026, 3, d, h, m, 0, 0, time.UTC) }
	cases := []struct {
		name      string
		cfg       heartbeat.Config
		last, now time.Time
		want      time.Time
	}{
		{"first start: next multiple of every", heartbeat.Config{Every: 30 * time.Minute}, time.Time{}, utc(9, 10, 7), utc(9, 10, 30)},
		{"first start on a boundary fires now", heartbeat.Config{Every: time.Hour}, time.Time{}, utc(9, 10, 0), utc(9, 10, 0)},
		{"rhythm continues from the last fire", heartbeat.Config{Every: 30 * time.Minute}, utc(9, 10, 7), utc(9, 10, 20), utc(9, 10, 37)},
		{"after downtime the last missed tick fires at once", heartbeat.Config{Every: 30 * time.Minute}, utc(9, 10, 7), utc(9, 13, 0), utc(9, 12, 37)},
		{"a due tick fires now", heartbeat.Config{Every: 30 * time.Minute}, utc(9, 10, 7), utc(9, 10, 37), utc(9, 10, 37)},
		{"first tick after the window closed is kept", heartbeat.Config{Every: 30 * time.Minute, ActiveHours: berlin}, utc(9, 20, 45), utc(9, 20, 50), utc(9, 21, 15)},
		{"later ticks wait for the opening", heartbeat.Config{Every: 30 * time.Minute, ActiveHours: berlin}, utc(9, 21, 15), utc(9, 21, 16), utc(10, 8, 0)},
		{"restart at night: wait for the opening", heartbeat.Config{Every: 30 * time.Minute, ActiveHours: berlin}, utc(9, 21, 15), utc(10, 3, 0), utc(10, 8, 0)},
		{"downtime over a whole window: record one closing", heartbeat.Config{Every: 30 * time.Minute, ActiveHours: berlin}, utc(9, 21, 15), utc(11, 3, 0), utc(11, 2, 45)},
		{"first start at night records the pause once", heartbeat.Config{Every: time.Hour, ActiveHours: berlin}, time.Time{}, utc(9, 23, 10), utc(10, 0, 0)},
		{"weekend skipped", heartbeat.Config{Every: time.Hour, ActiveHours: activehours.Window{Start: "09:00", End: "17:00", Days: []string{"mon-fri"}}}, utc(13, 17, 0), utc(13, 17, 1), utc(16, 9, 0)},
	}
	b := bustest.New(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h, err := heartbeat.New(b, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := h.Plan(c.last, c.now); !got.Equal(c.want) {
				t.Errorf("Plan(last %s, now %s) = %s, want %s", c.last.Format(time.RFC3339), c.now.Format(time.RFC3339), got.Format(time.RFC3339), c.want.Format(time.RFC3339))
			}
		})
	}
}

// TestDue: what a fire of the timer publishes. Before the first fire it
// is the tick the timer was armed for; after it, the tick plan gives after
// the last fire; late fires collapse the missed ticks into the latest.
func TestDue(t *testing.T) {
	t.Parallel()
	utc := func(h, m int) time.Time { return time.Date(2026, 3, 9, h, m, 0, 0, time.UTC) }
	h, err := heartbeat.New(bustest.New(t), heartbeat.Config{Every: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name             string
		last, armed, now time.Time
		want             time.Time // zero: nothing due
	}{
		{"first fire: the armed tick", time.Time{}, utc(10, 30), utc(10, 30), utc(10, 30)},
		{"first fire late: the latest tick of its rhythm", time.Time{}, utc(10, 30), utc(12, 10), utc(12, 0)},
		{"first fire early (clocks apart): nothing yet", time.Time{}, utc(10, 30), utc(10, 29), time.Time{}},
		{"a tick after the last fire", utc(10, 7), utc(10, 37), utc(10, 37), utc(10, 37)},
		{"after downtime: the latest missed tick", utc(10, 7), utc(10, 37), utc(13, 0), utc(12, 37)},
		{"a spare fire after the tick was published: nothing", utc(10, 37), utc(10, 37), utc(10, 38), time.Time{}},
	}
	for _, c := range cases {
		got, ok := h.Due(c.last, c.armed, c.now)
		if ok != !c.want.IsZero() || !got.Equal(c.want) {
			t.Errorf("%s: Due(last %s, armed %s, now %s) = %s, %v; want %s", c.name, c.last.Format("15:04"), c.armed.Format("15:04"), c.now.Format("15:04"), got.Format("15:04"), ok, c.want.Format("15:04"))
		}
	}
}

// pending returns the due time of the heartbeat's pending timer (zero:
// none).
func pending(t *testing.T, b *bus.Bus, name string) time.Time {
	t.Helper()
	p, err := bus.NewTimers(b).Pending(t.Context(), "heartbeat."+name)
	if errors.Is(err, bus.ErrNoTimer) {
		return time.Time{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return p.Due
}

// storedTicks returns the scheduled times of the stored requests of the
// heartbeat, with their message ids.
func storedTicks(t *testing.T, b *bus.Bus, name string) (ticks []time.Time, ids []string) {
	t.Helper()
	cons, err := b.JetStream().OrderedConsumer(t.Context(), bus.StreamRequests, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subjects.Request(bus.SourceHeartbeat, name)},
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		ev, err := bus.DecodeEvent(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		var req struct {
			ScheduledAt *time.Time `json:"scheduled_at"`
		}
		if err := json.Unmarshal(ev.Data, &req); err != nil || req.ScheduledAt == nil {
			t.Fatalf("stored request %s: %v (scheduled_at %v)", ev.ID, err, req.ScheduledAt)
		}
		ticks = append(ticks, req.ScheduledAt.UTC())
		ids = append(ids, m.Headers().Get(jetstream.MsgIDHeader))
	}
	return ticks, ids
}

// TestScheduleFiresAndKeepsItsRhythm: ticks fire every `every` on the real
// clock with the tick's message id; a restarted heartbeat continues the
// rhythm of its last fire instead of starting afresh.
func TestScheduleFiresAndKeepsItsRhythm(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	const every = 2 * time.Second
	cfg := heartbeat.Config{Enabled: true, Every: time.Minute}
	var n atomic.Int64
	m := newModel(func(_ context.Context, req model.Request) (model.Reply, error) {
		if req.Messages[len(req.Messages)-1].Role == model.RoleTool {
			return model.Reply{Text: "done"}, nil
		}
		return notifyReply(fmt.Sprintf("check %d", n.Add(1))), nil
	})
	// The last fire of an earlier run, off the 2s grid: the rhythm goes on
	// from it.
	last := time.Now().UTC().Truncate(time.Second).Add(-1500 * time.Millisecond)
	data, _ := json.Marshal(heartbeat.State{LastFire: last})
	if _, err := b.State.Put(t.Context(), "heartbeat.default", data); err != nil {
		t.Fatal(err)
	}
	h := newHeartbeat(t, b, cfg, clock.Real{}, dir)
	h.SetEvery(every)
	startRunner(t, b, m, h, clock.Real{})
	s := watch(t, b)
	stop := runInBackground(t, "Heartbeat", h.Run)
	s.wait(2)
	stop()
	onRhythm := func(at time.Time) bool { return at.After(last) && at.Sub(last)%every == 0 }
	for i, o := range s.settle() {
		if at := o.Result.ScheduledAt; at == nil || !onRhythm(*at) || o.Result.Outcome != bus.OutcomeDone {
			t.Errorf("run %d = %v, want done at a tick of the rhythm of %s", i+1, o, last.Format("15:04:05.000"))
		}
	}
	ticks, ids := storedTicks(t, b, "default")
	if len(ticks) < 2 || !ticks[0].Equal(last.Add(every)) {
		t.Fatalf("stored ticks %v, want at least 2, the first %s", ticks, last.Add(every))
	}
	for i, tick := range ticks {
		if !onRhythm(tick) || (i > 0 && !tick.After(ticks[i-1])) || ids[i] != heartbeat.MsgID("default", tick) {
			t.Errorf("stored request %d: tick %s, Nats-Msg-Id %q; want the next tick of the rhythm, %q", i, tick.Format("15:04:05.000"), ids[i], heartbeat.MsgID("default", tick))
		}
	}
	lastFire := ticks[len(ticks)-1]
	st := state(t, b, "default")
	if !st.LastFire.Equal(lastFire) || !st.NextFire.Equal(lastFire.Add(every)) {
		t.Errorf("state: last fire %s, next fire %s; want %s and %s", st.LastFire, st.NextFire, lastFire, lastFire.Add(every))
	}

	// A restart continues the rhythm: the timer stays armed for the next
	// tick of the last fire.
	h2 := newHeartbeat(t, b, cfg, clock.Real{}, dir)
	h2.SetEvery(every)
	s2 := watch(t, b)
	runInBackground(t, "Heartbeat", h2.Run)
	next := s2.wait(1)[0]
	if at := next.Result.ScheduledAt; at == nil || at.Sub(last)%every != 0 || !at.After(lastFire) {
		t.Errorf("first run after the restart = %v, want a tick of the rhythm after %s", next, lastFire.Format("15:04:05.000"))
	}
	// A republished tick is stored once (Nats-Msg-Id).
	before := requestsStored(t, b, "default")
	publishTick(t, b, "default", lastFire)
	if after := requestsStored(t, b, "default"); after != before {
		t.Errorf("requests stored = %d after republishing a tick, want %d", after, before)
	}
}

// TestTwoInstances: two runtimes on one bus share the heartbeat's timer:
// each tick fires once, and two heartbeats never run at once.
func TestTwoInstances(t *testing.T) {
	t.Parallel()
	for _, overlap := range []string{heartbeat.OverlapSkip, heartbeat.OverlapQueue} {
		t.Run(overlap, func(t *testing.T) {
			t.Parallel()
			b1 := bustest.New(t)
			b2 := bustest.Client(t, b1)
			dir := t.TempDir()
			writeChecklist(t, dir, checklistText)
			const every = 2 * time.Second
			cfg := heartbeat.Config{Enabled: true, Every: time.Minute, Overlap: overlap}
			started := make(chan time.Time, 10)
			release := make(chan struct{})
			var n atomic.Int64
			m := newModel(func(ctx context.Context, req model.Request) (model.Reply, error) {
				if req.Messages[len(req.Messages)-1].Role == model.RoleTool {
					return model.Reply{Text: "done"}, nil
				}
				started <- time.Now()
				select {
				case <-release:
				case <-ctx.Done():
					return model.Reply{}, ctx.Err()
				}
				return notifyReply(fmt.Sprintf("alert %d", n.Add(1))), nil
			})
			h1 := newHeartbeat(t, b1, cfg, clock.Real{}, dir)
			h2 := newHeartbeat(t, b2, cfg, clock.Real{}, dir)
			h1.SetEvery(every)
			h2.SetEvery(every)
			startRunner(t, b1, m, h1, clock.Real{})
			startRunner(t, b2, m, h2, clock.Real{})
			s := watch(t, b1)
			stop1 := runInBackground(t, "Heartbeat 1", h1.Run)
			stop2 := runInBackground(t, "Heartbeat 2", h2.Run)

			// The first tick runs and blocks in the model.
			select {
			case <-started:
			case <-time.After(waitTimeout):
				t.Fatal("no heartbeat started")
			}
			var want []string
			if overlap == heartbeat.OverlapSkip {
				// The next tick finds it running.
				if got := s.wait(1); kind(got[0]) != "skip/busy" {
					t.Fatalf("second tick = %v, want skip/busy", got)
				}
				want = []string{"skip/busy", "done"}
			} else {
				// The next tick is published and waits for the first run.
				waitFor(t, "the second tick", func() bool { return requestsStored(t, b1, "default") >= 2 })
				want = []string{"done", "done"}
			}
			select {
			case <-started:
				t.Fatal("a second heartbeat started while the first was running")
			default:
			}
			close(release)
			s.wait(2)
			stop1()
			stop2()
			got := s.settle()
			for i := range want {
				if kind(got[i]) != want[i] {
					t.Fatalf("events = %v, want %v first", got, want)
				}
			}
			ran := map[time.Time]int{}
			for _, o := range got {
				ran[*o.Result.ScheduledAt]++
			}
			for tick, k := range ran {
				if k != 1 {
					t.Errorf("tick %s ran %d times, want once; events %v", tick.Format("15:04:05"), k, got)
				}
			}
			ticks, _ := storedTicks(t, b1, "default")
			if !slices.IsSortedFunc(ticks, time.Time.Compare) || len(slices.CompactFunc(slices.Clone(ticks), time.Time.Equal)) != len(ticks) {
				t.Errorf("stored ticks %v, want each tick once, in order", ticks)
			}
			if n := m.maxActive.Load(); n != 1 {
				t.Errorf("at most %d heartbeats ran at once, want 1", n)
			}
		})
	}
}

// TestOutsideActiveHours: a heartbeat started while its window is closed
// records the pause once (its run skips outside-active-hours) and arms its
// timer for the opening: it does not spin through the night.
func TestOutsideActiveHours(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	// A window that opens in two hours and lasts one.
	now := time.Now().UTC()
	open := now.Add(2 * time.Hour).Truncate(time.Minute)
	cfg := heartbeat.Config{Enabled: true, Every: time.Minute, ActiveHours: activehours.Window{
		Start: open.Format("15:04"), End: open.Add(time.Hour).Format("15:04"), Timezone: "UTC",
	}}
	h := newHeartbeat(t, b, cfg, clock.Real{}, dir)
	h.SetEvery(time.Second)
	m := newModel(answer(model.Reply{Text: "all quiet"}))
	startRunner(t, b, m, h, clock.Real{})
	s := watch(t, b)
	runInBackground(t, "Heartbeat", h.Run)

	got := s.wait(1)
	if kind(got[0]) != "skip/outside-active-hours" || m.calls.Load() != 0 {
		t.Fatalf("first run = %v (model calls %d), want skip outside-active-hours", got, m.calls.Load())
	}
	waitFor(t, "the timer armed for the opening", func() bool { return pending(t, b, "default").Equal(open) })
	st := state(t, b, "default")
	if !st.NextFire.Equal(open) || !st.LastFire.Equal(*got[0].Result.ScheduledAt) {
		t.Errorf("state: next fire %s, last fire %s; want the opening %s and the recorded tick %s", st.NextFire, st.LastFire, open, got[0].Result.ScheduledAt)
	}
	if n := requestsStored(t, b, "default"); n != 1 {
		t.Errorf("requests stored = %d, want 1 (the tick that records the pause)", n)
	}
}

// TestWakeKeepsTheSchedule: wake runs now and does not move the next fire.
func TestWakeKeepsTheSchedule(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	h := newHeartbeat(t, b, heartbeat.Config{Enabled: true, Every: 30 * time.Minute}, clock.Real{}, dir)
	m := newModel(answer(notifyReply("the backup failed")))
	startRunner(t, b, m, h, clock.Real{})
	s := watch(t, b)
	runInBackground(t, "Heartbeat", h.Run)
	serveAPI(t, b, h)
	waitArmed(t, b)
	next := state(t, b, "default").NextFire
	if due := pending(t, b, "default"); !due.Equal(next) || !next.After(time.Now()) || next.Sub(next.Truncate(30*time.Minute)) != 0 {
		t.Fatalf("next fire = %s, timer due %s; want both the next half hour", next, due)
	}
	pub, err := heartbeat.NewClient(bustest.Client(t, b), "").Wake(t.Context())
	if err != nil {
		t.Fatalf("Client.Wake: %v", err)
	}
	got := s.wait(1)[0]
	if got.Event.CausationID != pub.ID || !got.Result.Manual || got.Result.Outcome != bus.OutcomeDone {
		t.Fatalf("wake run = %v, want a manual done run of request %s", got, pub.ID)
	}
	waitFor(t, "the observer to record the run", func() bool {
		lr := state(t, b, "default").LastRun
		return lr != nil && lr.RequestID == pub.ID
	})
	st := state(t, b, "default")
	if !st.NextFire.Equal(next) || !st.LastFire.IsZero() || !pending(t, b, "default").Equal(next) {
		t.Errorf("after wake: next fire %s, last fire %s, timer due %s; want %s, none, %s", st.NextFire, st.LastFire, pending(t, b, "default"), next, next)
	}
	if lr := st.LastRun; lr.Outcome != bus.OutcomeDone || !lr.Manual || lr.Text != "the backup failed" {
		t.Errorf("last run = %+v", lr)
	}
}

// TestTickPublishedAfterBusRecovers: a tick whose publish fails (the
// requests stream is gone) is not lost: the fire is retried until the
// stream takes it, and the tick runs once.
func TestTickPublishedAfterBusRecovers(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	h := newHeartbeat(t, b, heartbeat.Config{Enabled: true, Every: time.Minute}, clock.Real{}, dir)
	h.SetEvery(time.Second)
	restore := dropStream(t, b, bus.StreamRequests)
	stop := runInBackground(t, "Heartbeat", h.Run)
	// The timer fires; the fire cannot publish, so nothing re-arms it.
	var armed time.Time
	waitFor(t, "the timer to fire", func() bool {
		armed = state(t, b, "default").NextFire
		return !armed.IsZero() && time.Now().After(armed) && pending(t, b, "default").IsZero()
	})
	restore()
	waitFor(t, "the tick published", func() bool { return requestsStored(t, b, "default") > 0 })
	stop()
	ticks, _ := storedTicks(t, b, "default")
	if ticks[0].Before(armed) || len(slices.CompactFunc(slices.Clone(ticks), time.Time.Equal)) != len(ticks) {
		t.Errorf("stored ticks %v, want each once, from the tick armed (%s) on", ticks, armed)
	}
	m := newModel(answer(notifyReply("the backup failed")))
	startRunner(t, b, m, h, clock.Real{})
	s := watch(t, b)
	runs := s.wait(len(ticks))
	for _, o := range runs {
		if o.Result.Outcome != bus.OutcomeDone && kind(o) != "skip/busy" {
			t.Errorf("run %v, want done (or busy behind another)", o)
		}
	}
}

// dropStream deletes a stream, so every publish to it fails, until the
// returned func creates it again, empty, as the bus provisions it.
func dropStream(t *testing.T, b *bus.Bus, name string) (restore func()) {
	t.Helper()
	i := slices.IndexFunc(b.StreamConfigs(), func(c jetstream.StreamConfig) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("no stream %s", name)
	}
	cfg := b.StreamConfigs()[i]
	if err := b.JetStream().DeleteStream(t.Context(), name); err != nil {
		t.Fatalf("delete stream %s: %v", name, err)
	}
	return func() {
		t.Helper()
		if _, err := b.JetStream().CreateStream(t.Context(), cfg); err != nil {
			t.Fatalf("create stream %s: %v", name, err)
		}
	}
}
