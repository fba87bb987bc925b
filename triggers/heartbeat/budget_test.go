package heartbeat_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/triggers/activehours"
	"github.com/agentwork/agentwork/triggers/budget"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// inbox records the notifications queued for a connector.
type inbox struct {
	mu sync.Mutex
	ns []connectors.Notification
}

func watchDeliveries(t *testing.T, b *bus.Bus, target string) *inbox {
	t.Helper()
	in := &inbox{}
	sub, err := b.Conn().Subscribe(b.Subjects.Delivery(target), func(m *nats.Msg) {
		var n connectors.Notification
		ev, err := bus.DecodeEvent(m.Data)
		if err == nil {
			err = ev.DecodeData(&n)
		}
		if err != nil {
			t.Errorf("delivery on %s: %v", m.Subject, err)
			return
		}
		in.mu.Lock()
		in.ns = append(in.ns, n)
		in.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return in
}

// alerts are the important notifications seen so far.
func (in *inbox) alerts() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []string
	for _, n := range in.ns {
		if n.Urgency == tools.UrgencyImportant {
			out = append(out, n.Text)
		}
	}
	return out
}

// A heartbeat every second with a budget of 1,000 tokens whose runs use
// 400 each runs twice, then pauses itself until the next midnight with
// one alert, and its ticks pass over without a model call (the fake fails
// the test on a call it has no answer for). Resume lets it spend its
// budget once more today: two runs, then paused again.
func TestBudgetPausesWithOneAlert(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	fake := openaifake.New(t)
	answer := openaifake.Response{Reply: model.Reply{Text: "all quiet", Usage: model.Usage{InputTokens: 300, OutputTokens: 100}}}
	fake.Enqueue(answer, answer)
	p, err := openai.New(fake.Config())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	cfg := heartbeat.Config{Enabled: true, Targets: []string{"console"}, Budget: budget.Budget{DailyTokens: 1000}}
	h := newHeartbeat(t, b, cfg, clock.Real{}, dir)
	h.SetEvery(time.Second)
	startRunner(t, b, p, h, clock.Real{})
	serveAPI(t, b, h)
	inbox := watchDeliveries(t, b, "console")
	runInBackground(t, "Heartbeat", h.Run)

	var st heartbeat.State
	waitFor(t, "the heartbeat paused", func() bool { st = state(t, b, "default"); return st.Paused })
	now := time.Now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	if st.Spent == nil || st.Spent.Tokens != 800 || st.Spent.LastRun != 400 || st.Spent.Runs != 2 ||
		st.PausedUntil == nil || !st.PausedUntil.Equal(midnight) || !strings.Contains(st.PausedReason, "budget of 1000") {
		t.Fatalf("state = %+v (spent %+v), want 800 tokens of 2 runs, paused until %s", st, st.Spent, midnight)
	}
	// Two more ticks pass over while paused: no request, no model call.
	pausedAt := *st.PausedAt
	waitFor(t, "two ticks passed over", func() bool {
		st = state(t, b, "default")
		return st.Passed.After(pausedAt.Add(time.Second))
	})
	if n := len(fake.Requests()); n != 2 {
		t.Fatalf("model calls = %d, want 2", n)
	}
	waitFor(t, "the budget alert", func() bool { return len(inbox.alerts()) > 0 })
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if a := inbox.alerts(); len(a) != 1 || !strings.Contains(a[0], "800 tokens today") || !strings.Contains(a[0], "agentwork heartbeat resume") {
		t.Fatalf("alerts = %q, want one saying the heartbeat paused on its budget and how to resume it", a)
	}
	c := heartbeat.NewClient(b, "")
	got, err := c.Status(t.Context())
	if err != nil || !got.Paused || got.Budget.DailyTokens != 1000 || got.BudgetZone != "UTC" || got.Spent == nil || got.Spent.Tokens != 800 {
		t.Fatalf("Status = %+v, %v; want paused, budget 1000 (UTC), 800 tokens today", got, err)
	}

	// Resume starts the day's count afresh: two runs more, then paused again.
	fake.Enqueue(answer, answer)
	got, err = c.Resume(t.Context())
	if err != nil || got.Paused || got.PausedUntil != nil || got.Spent == nil || got.Spent.Tokens != 0 {
		t.Fatalf("Resume = %+v, %v; want running, 0 tokens today", got, err)
	}
	waitFor(t, "paused again", func() bool { st = state(t, b, "default"); return st.Paused })
	if st.Spent.Tokens != 800 || st.Spent.Runs != 4 {
		t.Fatalf("spent = %+v, want 800 tokens since the resume, 4 runs today", st.Spent)
	}
	waitFor(t, "the second alert", func() bool { return len(inbox.alerts()) == 2 })
	if n := len(fake.Requests()); n != 4 {
		t.Fatalf("model calls = %d, want 4", n)
	}
}

// The budget's day is that of the active hours' zone. While paused the
// ticks pass over; the first tick from the next midnight there lifts the
// pause and is published.
func TestBudgetResumesNextDay(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone data")
	}
	b := bustest.New(t)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	cfg := heartbeat.Config{
		Enabled: true, Budget: budget.Budget{DailyTokens: 1000},
		ActiveHours: activehours.Window{Start: "00:00", End: "24:00", Timezone: "Europe/Berlin"},
	}
	last := time.Date(2027, 5, 4, 23, 0, 0, 0, berlin)
	until := time.Date(2027, 5, 5, 0, 0, 0, 0, berlin)
	pausedAt := last.Add(10 * time.Minute).UTC()
	seed, err := json.Marshal(heartbeat.State{
		LastFire: last.UTC(), Paused: true, PausedAt: &pausedAt, PausedUntil: ptr(until.UTC()), PausedReason: "budget",
		Spent: &budget.Spent{Day: "2027-05-04", Tokens: 800, LastRun: 400, Runs: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.State.Put(t.Context(), "heartbeat.default", seed); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(last.Add(30 * time.Minute)) // 23:30: a tick, but still paused
	h := newHeartbeat(t, b, cfg, clk, dir)
	if err := h.Fire(t.Context(), last.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	st := state(t, b, "default")
	if n := requestsStored(t, b, "default"); n != 0 || !st.Paused || !st.Passed.Equal(last.Add(30*time.Minute)) || !st.NextFire.Equal(until) {
		t.Fatalf("after the 23:30 tick: %d request(s), state %+v; want none, paused, the tick passed over, next fire %s", n, st, until)
	}

	clk.Set(until.Add(10 * time.Millisecond)) // the timer fires at midnight
	if err := h.Fire(t.Context(), until); err != nil {
		t.Fatal(err)
	}
	st = state(t, b, "default")
	if n := requestsStored(t, b, "default"); n != 1 || st.Paused || st.PausedUntil != nil || !st.LastFire.Equal(until) {
		t.Fatalf("after the midnight tick: %d request(s), state %+v; want the tick published and the pause lifted", n, st)
	}
	got, err := h.Status(t.Context())
	if err != nil || got.Paused || got.Spent != nil || got.BudgetZone != "Europe/Berlin" {
		t.Fatalf("Status = %+v, %v; want running, nothing spent on the new day", got, err)
	}
}

func ptr[T any](v T) *T { return &v }

// A pause by hand over HTTP: a scheduled run published before it skips
// "paused" without a model call, a wake still runs, and resume lifts it.
func TestPauseByHand(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(nextYear)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	h := newHeartbeat(t, b, heartbeat.Config{Enabled: true}, clk, dir)
	m := newModel(answer(model.Reply{Text: "HEARTBEAT_OK"}))
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	mux := http.NewServeMux()
	h.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	post := func(path, body string, status int) heartbeat.Status {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st heartbeat.Status
		if resp.StatusCode != status {
			t.Fatalf("POST %s %s = %d, want %d", path, body, resp.StatusCode, status)
		}
		if status == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	post("/v1/heartbeat/pause", `{"reson": "typo"}`, http.StatusBadRequest)
	if st := post("/v1/heartbeat/pause", `{"reason": "holiday"}`, http.StatusOK); !st.Paused || st.PausedReason != "holiday" || st.PausedUntil != nil {
		t.Fatalf("pause = %+v, want paused for a holiday, until resumed", st)
	}
	publishTick(t, b, "default", nextYear)
	if got := s.wait(1)[0]; kind(got) != "skip/paused" || got.Result.Detail != "holiday" {
		t.Fatalf("scheduled run while paused = %v, want skip paused (holiday)", got)
	}
	waitIdle(t, b)
	if _, err := h.Wake(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := s.wait(2)[1]; kind(got) != "skip/ack" || m.runs.Load() != 1 {
		t.Fatalf("wake while paused = %v after %d model call(s), want it run (ack) with one call", got, m.runs.Load())
	}
	if st := post("/v1/heartbeat/resume", "", http.StatusOK); st.Paused || st.PausedReason != "" {
		t.Fatalf("resume = %+v, want running", st)
	}
}
