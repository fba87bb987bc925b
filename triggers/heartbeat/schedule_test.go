package heartbeat_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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
		name       string
		cfg        heartbeat.Config
		last, now  time.Time
		want       time.Time
		wantReason string
	}{
		{"first start: next multiple of every", heartbeat.Config{Every: 30 * time.Minute}, time.Time{}, utc(9, 10, 7), utc(9, 10, 30), ""},
		{"first start on a boundary fires now", heartbeat.Config{Every: time.Hour}, time.Time{}, utc(9, 10, 0), utc(9, 10, 0), ""},
		{"rhythm continues from the last fire", heartbeat.Config{Every: 30 * time.Minute}, utc(9, 10, 7), utc(9, 10, 20), utc(9, 10, 37), ""},
		{"after downtime the last missed tick fires at once", heartbeat.Config{Every: 30 * time.Minute}, utc(9, 10, 7), utc(9, 13, 0), utc(9, 12, 37), ""},
		{"a due tick fires now", heartbeat.Config{Every: 30 * time.Minute}, utc(9, 10, 7), utc(9, 10, 37), utc(9, 10, 37), ""},
		{"first tick after the window closed is kept", heartbeat.Config{Every: 30 * time.Minute, ActiveHours: berlin}, utc(9, 20, 45), utc(9, 20, 50), utc(9, 21, 15), ""},
		{"later ticks wait for the opening", heartbeat.Config{Every: 30 * time.Minute, ActiveHours: berlin}, utc(9, 21, 15), utc(9, 21, 16), utc(10, 8, 0), ""},
		{"restart at night: wait for the opening", heartbeat.Config{Every: 30 * time.Minute, ActiveHours: berlin}, utc(9, 21, 15), utc(10, 3, 0), utc(10, 8, 0), ""},
		{"downtime over a whole window: record one closing", heartbeat.Config{Every: 30 * time.Minute, ActiveHours: berlin}, utc(9, 21, 15), utc(11, 3, 0), utc(11, 2, 45), ""},
		{"first start at night records the pause once", heartbeat.Config{Every: time.Hour, ActiveHours: berlin}, time.Time{}, utc(9, 23, 10), utc(10, 0, 0), ""},
		{"weekend skipped", heartbeat.Config{Every: time.Hour, ActiveHours: activehours.Window{Start: "09:00", End: "17:00", Days: []string{"mon-fri"}}}, utc(13, 17, 0), utc(13, 17, 1), utc(16, 9, 0), ""},
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

// TestScheduleFiresAndSurvivesRestart: ticks fire every `every` with the
// tick's message id; a restarted heartbeat keeps the rhythm.
func TestScheduleFiresAndSurvivesRestart(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(monday) // 10:00:30
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	cfg := heartbeat.Config{Enabled: true, Every: time.Minute}
	h := newHeartbeat(t, b, cfg, clk, dir)
	var n atomic.Int64
	m := newModel(func(_ context.Context, req model.Request) (model.Reply, error) {
		if req.Messages[len(req.Messages)-1].Role == model.RoleTool {
			return model.Reply{Text: "done"}, nil
		}
		return notifyReply(fmt.Sprintf("check %d", n.Add(1))), nil
	})
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	stop := runInBackground(t, "Heartbeat", h.Run)

	blockUntil(t, clk, 1)
	if st := state(t, b, "default"); !st.NextFire.Equal(monday.Add(30 * time.Second)) {
		t.Fatalf("next fire = %s, want %s (the next whole minute)", st.NextFire, monday.Add(30*time.Second))
	}
	for i := 1; i <= 2; i++ {
		clk.Advance(time.Minute)
		blockUntil(t, clk, 1)
		s.wait(i)
		waitIdle(t, b)
	}
	stop()
	got := s.settle()
	if len(got) != 2 {
		t.Fatalf("events = %v, want 2 runs", got)
	}
	for i, o := range got {
		want := time.Date(2026, 3, 9, 10, 1+i, 0, 0, time.UTC)
		if o.Result.ScheduledAt == nil || !o.Result.ScheduledAt.Equal(want) || o.Result.Outcome != bus.OutcomeDone {
			t.Errorf("run %d = %v, want done scheduled at %s", i+1, o, want.Format("15:04:05"))
		}
	}
	st := state(t, b, "default")
	if want := time.Date(2026, 3, 9, 10, 2, 0, 0, time.UTC); !st.LastFire.Equal(want) {
		t.Errorf("last fire = %s, want %s", st.LastFire, want)
	}

	// Restart 20s later: the next fire is still 10:03.
	clk.Advance(20 * time.Second) // 10:02:50
	h2 := newHeartbeat(t, b, cfg, clk, dir)
	runInBackground(t, "Heartbeat", h2.Run)
	blockUntil(t, clk, 1)
	if want := time.Date(2026, 3, 9, 10, 3, 0, 0, time.UTC); !state(t, b, "default").NextFire.Equal(want) {
		t.Errorf("after restart next fire = %s, want %s", state(t, b, "default").NextFire, want)
	}
	// A republished tick is stored once (Nats-Msg-Id).
	before := requestsStored(t, b, "default")
	publishTick(t, b, "default", time.Date(2026, 3, 9, 10, 2, 0, 0, time.UTC))
	if after := requestsStored(t, b, "default"); after != before {
		t.Errorf("requests stored = %d after republishing a tick, want %d", after, before)
	}
}

// TestTwoInstances: two runtimes on one bus fire each tick once and never
// run two heartbeats at once.
func TestTwoInstances(t *testing.T) {
	t.Parallel()
	for _, overlap := range []string{heartbeat.OverlapSkip, heartbeat.OverlapQueue} {
		t.Run(overlap, func(t *testing.T) {
			t.Parallel()
			b1 := bustest.New(t)
			b2 := bustest.Client(t, b1)
			clk := clock.NewFake(monday)
			dir := t.TempDir()
			writeChecklist(t, dir, checklistText)
			cfg := heartbeat.Config{Enabled: true, Every: time.Minute, Overlap: overlap}
			started := make(chan string, 10)
			release := make(chan struct{})
			var n atomic.Int64
			m := newModel(func(ctx context.Context, req model.Request) (model.Reply, error) {
				if req.Messages[len(req.Messages)-1].Role == model.RoleTool {
					return model.Reply{Text: "done"}, nil
				}
				started <- req.Messages[0].Content
				select {
				case <-release:
				case <-ctx.Done():
					return model.Reply{}, ctx.Err()
				}
				return notifyReply(fmt.Sprintf("alert %d", n.Add(1))), nil
			})
			h1 := newHeartbeat(t, b1, cfg, clk, dir)
			h2 := newHeartbeat(t, b2, cfg, clk, dir)
			startRunner(t, b1, m, h1, clk)
			startRunner(t, b2, m, h2, clk)
			s := watch(t, b1)
			runInBackground(t, "Heartbeat 1", h1.Run)
			runInBackground(t, "Heartbeat 2", h2.Run)

			// Tick 10:01: one run starts and blocks in the model.
			blockUntil(t, clk, 2)
			clk.Advance(30 * time.Second)
			<-started
			// Tick 10:02 while it runs.
			blockUntil(t, clk, 2)
			clk.Advance(time.Minute)
			blockUntil(t, clk, 2)
			var want []string
			if overlap == heartbeat.OverlapSkip {
				if got := s.wait(1); kind(got[0]) != "skip/busy" {
					t.Fatalf("second tick = %v, want skip/busy", got)
				}
				close(release)
				want = []string{"skip/busy", "done"}
			} else {
				// The 10:02 tick waits; release the first run, then the second runs.
				select {
				case <-started:
					t.Fatal("a second heartbeat started while the first was running")
				default:
				}
				close(release)
				want = []string{"done", "done"}
			}
			s.wait(2)
			waitIdle(t, b1)
			// Tick 10:03 runs as usual.
			clk.Advance(time.Minute)
			s.wait(3)
			want = append(want, "done")
			waitIdle(t, b1)
			got := s.settle()
			if len(got) != 3 {
				t.Fatalf("events = %v, want one per tick: %v", got, want)
			}
			ticks := map[time.Time]int{}
			for _, o := range got {
				ticks[*o.Result.ScheduledAt]++
			}
			for i := 1; i <= 3; i++ {
				tick := time.Date(2026, 3, 9, 10, i, 0, 0, time.UTC)
				if ticks[tick] != 1 {
					t.Errorf("tick %s ran %d times, want once; events %v", tick.Format("15:04"), ticks[tick], got)
				}
			}
			for i := range want {
				if kind(got[i]) != want[i] {
					t.Errorf("events = %v, want %v", got, want)
					break
				}
			}
			if n := m.maxActive.Load(); n != 1 {
				t.Errorf("at most %d heartbeats ran at once, want 1", n)
			}
			if n := requestsStored(t, b1, "default"); n != 3 {
				t.Errorf("requests stored = %d, want 3 (one per tick)", n)
			}
		})
	}
}

// TestOutsideActiveHours: across a night, one skip records the pause and
// the next fire is the opening.
func TestOutsideActiveHours(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	start := time.Date(2026, 3, 9, 16, 30, 30, 0, time.UTC) // 17:30:30 in Berlin
	clk := clock.NewFake(start)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	cfg := heartbeat.Config{Enabled: true, Every: 30 * time.Minute, ActiveHours: activehours.Window{Start: "09:10", End: "18:00", Timezone: "Europe/Berlin"}}
	h := newHeartbeat(t, b, cfg, clk, dir)
	m := newModel(answer(model.Reply{Text: "all quiet"}))
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	stop := runInBackground(t, "Heartbeat", h.Run)

	blockUntil(t, clk, 1)
	clk.Advance(30 * time.Minute) // 18:00:30 Berlin: the 18:00 tick is outside
	s.wait(1)
	blockUntil(t, clk, 1)
	opening := time.Date(2026, 3, 10, 8, 10, 0, 0, time.UTC) // 09:10 Berlin
	if st := state(t, b, "default"); !st.NextFire.Equal(opening) {
		t.Fatalf("next fire = %s, want the opening %s", st.NextFire, opening)
	}
	// The whole night passes without another event.
	clk.Set(opening.Add(-time.Second))
	blockUntil(t, clk, 1)
	if got := s.settle(); len(got) != 1 || kind(got[0]) != "skip/outside-active-hours" || m.calls.Load() != 0 {
		t.Fatalf("events over the night = %v (model calls %d), want one skip outside-active-hours", got, m.calls.Load())
	}
	clk.Advance(time.Second)
	got := s.wait(2)
	if kind(got[1]) != "skip/ack" || !got[1].Result.ScheduledAt.Equal(opening) {
		t.Errorf("first run of the day = %v, want a run at the opening %s", got[1], opening)
	}

	// A restart keeps the rhythm of the last fire (09:10, 09:40, ... Berlin),
	// not the half-hour grid a first start would use.
	blockUntil(t, clk, 1)
	stop()
	clk.Advance(5 * time.Minute)
	h2 := newHeartbeat(t, b, cfg, clk, dir)
	runInBackground(t, "Heartbeat", h2.Run)
	blockUntil(t, clk, 1)
	if st, want := state(t, b, "default"), opening.Add(30*time.Minute); !st.NextFire.Equal(want) || !st.LastFire.Equal(opening) {
		t.Errorf("after restart: next fire %s, last fire %s; want %s and %s", st.NextFire, st.LastFire, want, opening)
	}
}

// TestWakeKeepsTheSchedule: wake runs now and does not move the next fire.
func TestWakeKeepsTheSchedule(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(monday)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	h := newHeartbeat(t, b, heartbeat.Config{Enabled: true, Every: 30 * time.Minute}, clk, dir)
	m := newModel(answer(notifyReply("the backup failed")))
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	runInBackground(t, "Heartbeat", h.Run)
	serveAPI(t, b, h)
	blockUntil(t, clk, 1)
	next := time.Date(2026, 3, 9, 10, 30, 0, 0, time.UTC)
	if st := state(t, b, "default"); !st.NextFire.Equal(next) {
		t.Fatalf("next fire = %s, want %s", st.NextFire, next)
	}
	clk.Advance(10 * time.Minute)
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
	if !st.NextFire.Equal(next) || !st.LastFire.IsZero() {
		t.Errorf("after wake: next fire %s, last fire %s; want %s and none", st.NextFire, st.LastFire, next)
	}
	if lr := st.LastRun; lr.Outcome != bus.OutcomeDone || !lr.Manual || lr.Text != "the backup failed" {
		t.Errorf("last run = %+v", lr)
	}
	// The schedule fires at 10:30 as planned.
	clk.Set(next)
	if got := s.wait(2)[1]; got.Result.Manual || !got.Result.ScheduledAt.Equal(next) {
		t.Errorf("scheduled run = %v, want the 10:30 tick", got)
	}
}

// TestTickClaimTakeover: a tick claimed by an instance that died before
// publishing it is published by another one once the claim expires, or at
// once when that instance was an earlier process on this data dir; a tick
// another instance published is not published again.
func TestTickClaimTakeover(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(monday) // 10:00:30
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	tick1 := time.Date(2026, 3, 9, 10, 1, 0, 0, time.UTC)
	tick2 := tick1.Add(time.Minute)
	put := func(tick time.Time, v string) {
		t.Helper()
		if _, err := b.Locks.Put(t.Context(), fmt.Sprintf("heartbeat.default.tick.%d", tick.Unix()), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	put(tick1, `{"owner":"dead-host","state":"claimed","expires":"2026-03-09T10:01:10Z"}`)
	put(tick2, `{"owner":"live-host","state":"published"}`)
	tick4 := tick2.Add(2 * time.Minute)
	put(tick4, `{"owner":"killed-host","boot":"deadbeef","state":"claimed","expires":"2026-03-09T11:00:00Z"}`)
	h := newHeartbeat(t, b, heartbeat.Config{Enabled: true, Every: time.Minute}, clk, dir)
	m := newModel(answer(notifyReply("the backup failed")))
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	runInBackground(t, "Heartbeat", h.Run)

	blockUntil(t, clk, 1)
	clk.Advance(30 * time.Second) // 10:01: the claim is still live; wait for it
	blockUntil(t, clk, 1)
	if got := s.settle(); len(got) != 0 {
		t.Fatalf("events before the claim expired = %v, want none", got)
	}
	clk.Advance(10 * time.Second) // 10:01:10: expired, taken over
	if got := s.wait(1)[0]; !got.Result.ScheduledAt.Equal(tick1) {
		t.Fatalf("run = %v, want the 10:01 tick", got)
	}
	waitIdle(t, b)
	blockUntil(t, clk, 1)
	clk.Advance(50 * time.Second) // 10:02: published elsewhere
	blockUntil(t, clk, 1)
	clk.Advance(time.Minute) // 10:03
	got := s.wait(2)
	if len(got) != 2 || !got[1].Result.ScheduledAt.Equal(tick2.Add(time.Minute)) {
		t.Fatalf("events = %v, want the 10:01 and 10:03 ticks (10:02 was published by another instance)", got)
	}
	waitIdle(t, b)
	blockUntil(t, clk, 1)
	clk.Advance(time.Minute) // 10:04: claimed by a process that is gone
	if got := s.wait(3); !got[2].Result.ScheduledAt.Equal(tick4) {
		t.Fatalf("events = %v, want the 10:04 tick published at once", got)
	}
	if n := requestsStored(t, b, "default"); n != 3 {
		t.Errorf("requests stored = %d, want 3", n)
	}
}
