package api_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

func TestEventsStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	old := emit(t, f.b, "task", bus.OutcomeDone, "before-connect")
	s := f.openSSE(t, "?source=task,cron&name=report-*")
	emit(t, f.b, "heartbeat", bus.OutcomeSkip, "report-x") // other source
	emit(t, f.b, "task", bus.OutcomeDone, "other")         // other name
	want := emit(t, f.b, "task", bus.OutcomeError, "report-daily")
	want2 := emit(t, f.b, "cron", bus.OutcomeDone, "report-weekly")

	for _, w := range []bus.Event{want, want2} {
		got := s.next(t)
		if got.id != w.ID || got.event != w.Type {
			t.Fatalf("SSE event id/event = %s/%s, want %s/%s (and not %s, published before connecting)", got.id, got.event, w.ID, w.Type, old.ID)
		}
		ev, err := bus.DecodeEvent([]byte(got.data))
		if err != nil {
			t.Fatalf("data is not a CloudEvent: %v: %s", err, got.data)
		}
		if ev.ID != w.ID || ev.Subject != w.Subject || ev.SpecVersion != "1.0" {
			t.Errorf("data = %+v, want the published event %+v", ev, w)
		}
	}
}

func TestEventsSinceAndOutcome(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	skip := emit(t, f.b, "heartbeat", bus.OutcomeSkip, "default")
	emit(t, f.b, "heartbeat", bus.OutcomeDone, "default")
	s := f.openSSE(t, "?since=1h&outcome=skip,skip") // a value twice is one filter
	if got := s.next(t); got.id != skip.ID {
		t.Fatalf("since=1h: first event %s, want the earlier skip %s", got.id, skip.ID)
	}
	later := emit(t, f.b, "cron", bus.OutcomeSkip, "j")
	if got := s.next(t); got.id != later.ID {
		t.Fatalf("next event %s, want the live skip %s", got.id, later.ID)
	}
}

func TestEventsLastEventID(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	e1 := emit(t, f.b, "task", bus.OutcomeDone, "a")
	e2 := emit(t, f.b, "task", bus.OutcomeDone, "b")
	e3 := emit(t, f.b, "task", bus.OutcomeSkip, "c")
	s := f.openSSE(t, "", "Last-Event-ID", e1.ID)
	for _, w := range []bus.Event{e2, e3} {
		if got := s.next(t); got.id != w.ID {
			t.Fatalf("resumed after %s: got %s, want %s", e1.ID, got.id, w.ID)
		}
	}
	e4 := emit(t, f.b, "task", bus.OutcomeDone, "d")
	if got := s.next(t); got.id != e4.ID {
		t.Fatalf("after resuming: got %s, want the live %s", got.id, e4.ID)
	}
}

func TestEventsBadFilter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, q := range []string{"?since=yesterday", "?source=A*", "?name=[", "?limit=5", "?foo=1", "?outcome=bogus", "?outcome=done,bogus"} {
		r := f.do(t, "GET", "/v1/events"+q, adminToken, "")
		if r.status != 400 {
			t.Errorf("GET /v1/events%s = %d, want 400", q, r.status)
			continue
		}
		if d := r.problem(t); len(d.Errors) == 0 {
			t.Errorf("GET /v1/events%s: problem without field errors", q)
		}
	}
}

type runsReply struct {
	Runs []bus.Event `json:"runs"`
}

func (f *fixture) runs(t *testing.T, query url.Values) []bus.Event {
	t.Helper()
	r := f.do(t, "GET", "/v1/runs?"+query.Encode(), adminToken, "")
	if r.status != 200 {
		t.Fatalf("GET /v1/runs?%s = %d; %s", query.Encode(), r.status, r.body)
	}
	var rr runsReply
	if err := json.Unmarshal(r.body, &rr); err != nil || rr.Runs == nil {
		t.Fatalf("body %s: want {\"runs\": [...]}: %v", r.body, err)
	}
	return rr.Runs
}

func TestRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	if got := f.runs(t, nil); len(got) != 0 {
		t.Fatalf("empty stream: %d runs, want 0", len(got))
	}
	// 5 old "rare-*" runs, then 600 others and delivery events, so finding
	// the rare ones needs the backwards scan to widen its window.
	var rare []bus.Event
	for i := range 5 {
		rare = append(rare, emit(t, f.b, "cron", bus.OutcomeError, fmt.Sprintf("rare-%d", i)))
	}
	var all []bus.Event
	for i := range 600 {
		src, out := "task", bus.OutcomeDone
		switch i % 3 {
		case 1:
			src, out = "heartbeat", bus.OutcomeSkip
		case 2:
			emit(t, f.b, bus.SourceDelivery, "delivered", "slack") // never a run
		}
		all = append(all, emit(t, f.b, src, out, fmt.Sprintf("n-%d", i)))
	}

	got := f.runs(t, nil)
	if len(got) != api.DefaultRunsLimit {
		t.Fatalf("default limit: %d runs, want %d", len(got), api.DefaultRunsLimit)
	}
	for i, ev := range got {
		if want := all[len(all)-1-i]; ev.ID != want.ID {
			t.Fatalf("runs[%d] = %s (%s), want %s (%s): newest first", i, ev.Subject, ev.ID, want.Subject, want.ID)
		}
	}
	checks := []struct {
		name  string
		q     url.Values
		count int
		first string // subject of the first (newest) run
	}{
		{"limit", url.Values{"limit": {"3"}}, 3, "n-599"},
		{"source", url.Values{"source": {"heartbeat"}, "limit": {"1000"}}, 200, "n-598"},
		{"outcome", url.Values{"outcome": {"error"}}, 5, "rare-4"},
		{"name glob, old", url.Values{"name": {"rare-*"}, "limit": {"2"}}, 2, "rare-4"},
		{"name list", url.Values{"name": {"rare-0,n-1"}}, 2, "n-1"},
		{"delivery is no run", url.Values{"source": {"delivery"}}, 0, ""},
		{"since 1h", url.Values{"since": {"1h"}, "limit": {"1000"}}, 605, "n-599"},
		{"since future", url.Values{"since": {time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}}, 0, ""},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := f.runs(t, c.q)
			if len(got) != c.count {
				t.Fatalf("%d runs, want %d", len(got), c.count)
			}
			if c.count > 0 && got[0].Subject != c.first {
				t.Errorf("first run %s, want %s", got[0].Subject, c.first)
			}
		})
	}
	if got := f.runs(t, url.Values{"name": {"rare-*"}}); len(got) != 5 || got[4].ID != rare[0].ID {
		t.Errorf("rare runs = %d (last %v), want all 5, oldest last", len(got), got)
	}
	bad := f.do(t, "GET", "/v1/runs?outcome=delivered", adminToken, "")
	if bad.status != 400 {
		t.Errorf("outcome=delivered = %d, want 400 (runs are done, skip or error)", bad.status)
	}
}

// An event stream outlives the server's read and write timeouts.
func TestEventsOutliveTimeouts(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := api.New(api.Config{AdminToken: adminToken, KeepAlive: 50 * time.Millisecond, WriteTimeout: 5 * time.Second}, api.Deps{Bus: b})
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.Config.ReadTimeout = 100 * time.Millisecond
	srv.Config.WriteTimeout = 100 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	f := &fixture{b: b, s: s, url: srv.URL, c: srv.Client()}
	st := f.openSSE(t, "")
	start := time.Now()
	for time.Since(start) < 400*time.Millisecond { // keepalives mark the time passing
		if got := st.next(t); got.comment != "keepalive" {
			t.Fatalf("idle stream sent %+v, want keepalive comments", got)
		}
	}
	ev := emit(t, b, "task", bus.OutcomeDone, "late")
	for {
		got := st.next(t)
		if got.comment == "keepalive" {
			continue
		}
		if got.id != ev.ID {
			t.Fatalf("after the timeouts passed: got %+v, want event %s", got, ev.ID)
		}
		break
	}
}
