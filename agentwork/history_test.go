package agentwork_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// stored is one message published by publishMix, as History should see it.
type stored struct {
	id, source, outcome, name string
	raw                       []byte
	run                       bool // a run event: not a delivery, not junk
	afterCut                  bool
}

// publishMix publishes n events of mixed sources on b's events stream, in
// order: 3 old "rare-*" task errors, then per 10 events 3 tasks of unique
// names, 1 delivery result, 2 heartbeat runs (default, other), 3 cron runs
// (job-0..job-2, outcomes done, error, skip) and 1 "report-*" task; also 2
// junk messages that are no run (not a CloudEvent; data not a Result).
// cut, if positive, is the index before which it returns the time: events
// from cut on are stored after it.
func publishMix(tb testing.TB, b *bus.Bus, n, cut int) ([]stored, time.Time) {
	tb.Helper()
	js := b.JetStream()
	var out []stored
	var cutAt time.Time
	wait := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(waitTimeout):
			tb.Fatalf("publishing %d events: no acks within %s", n, waitTimeout)
		}
	}
	pub := func(s stored, data any) {
		ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf(s.source, s.outcome), s.name, time.Now(), data)
		if err != nil {
			tb.Fatal(err)
		}
		s.id = ev.ID
		if s.raw == nil {
			if s.raw, err = json.Marshal(ev); err != nil {
				tb.Fatal(err)
			}
		}
		bustest.Throttle(tb, js)
		if _, err := js.PublishAsync(b.Subjects.Event(s.source, s.outcome), s.raw); err != nil {
			tb.Fatal(err)
		}
		s.afterCut = !cutAt.IsZero()
		out = append(out, s)
	}
	run := func(source, outcome, name string) {
		pub(stored{source: source, outcome: outcome, name: name, run: true},
			agentwork.Result{Source: source, Name: name, Outcome: outcome, Reason: "test"})
	}
	for i := range n {
		if i%500 == 0 {
			wait()
		}
		if i == cut && cut > 0 {
			wait()
			cutAt = time.Now()
		}
		switch {
		case i < 3:
			run(bus.SourceTask, bus.OutcomeError, fmt.Sprintf("rare-%d", i))
		case i == 400:
			pub(stored{source: bus.SourceTask, outcome: bus.OutcomeDone, name: "junk", raw: []byte("not json")}, nil)
		case i == 401:
			pub(stored{source: bus.SourceTask, outcome: bus.OutcomeDone, name: "junk"}, "data that is no Result")
		default:
			switch i % 10 {
			case 0, 1, 2:
				run(bus.SourceTask, bus.OutcomeDone, fmt.Sprintf("t-%d", i))
			case 3:
				pub(stored{source: bus.SourceDelivery, outcome: "delivered", name: "slack"}, map[string]any{"connector": "slack"})
			case 4:
				run(bus.SourceHeartbeat, bus.OutcomeSkip, "default")
			case 5:
				run(bus.SourceHeartbeat, bus.OutcomeDone, "other")
			case 6, 7, 8:
				outcome := []string{bus.OutcomeDone, bus.OutcomeError, bus.OutcomeSkip}[i%10-6]
				run(bus.SourceCron, outcome, fmt.Sprintf("job-%d", (i/10)%3))
			case 9:
				run(bus.SourceTask, bus.OutcomeDone, fmt.Sprintf("report-%d", i%4))
			}
		}
	}
	wait()
	return out, cutAt
}

// want is what History(q) should return from evs: the ids of the matching
// runs, newest first, at most the effective limit.
func want(evs []stored, q agentwork.HistoryQuery, since bool) []string {
	limit := q.Limit
	if limit <= 0 {
		limit = agentwork.DefaultHistoryLimit
	}
	limit = min(limit, agentwork.MaxHistoryLimit)
	in := func(list []string, v string, glob bool) bool {
		if len(list) == 0 {
			return true
		}
		for _, p := range list {
			if ok, _ := path.Match(p, v); ok || (!glob && p == v) {
				return true
			}
		}
		return false
	}
	var ids []string
	for i := len(evs) - 1; i >= 0 && len(ids) < limit; i-- {
		e := evs[i]
		if !e.run || (since && !e.afterCut) || !in(q.Sources, e.source, false) || !in(q.Outcomes, e.outcome, false) || !in(q.Names, e.name, true) {
			continue
		}
		ids = append(ids, e.id)
	}
	return ids
}

func TestHistory(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	if got, err := agentwork.History(t.Context(), b, agentwork.HistoryQuery{}); err != nil || len(got) != 0 {
		t.Fatalf("History on an empty stream = %d records, %v; want none, nil", len(got), err)
	}
	// 1,200 events: more than one read window for all but the newest runs,
	// more than MaxHistoryLimit runs.
	evs, cut := publishMix(t, b, 1200, 600)
	byID := map[string]stored{}
	for _, e := range evs {
		byID[e.id] = e
	}
	tests := []struct {
		name  string
		q     agentwork.HistoryQuery
		since bool // q.Since = the cut time
		count int  // len(want), to keep the oracle honest
	}{
		{"zero query: latest 20 runs of every source", agentwork.HistoryQuery{}, false, 20},
		{"one heartbeat", agentwork.HistoryQuery{Sources: []string{bus.SourceHeartbeat}, Names: []string{"default"}, Limit: 5}, false, 5},
		{"one cron job, all of it", agentwork.HistoryQuery{Sources: []string{bus.SourceCron}, Names: []string{"job-1"}, Limit: 1000}, false, 120},
		{"a glob and an outcome", agentwork.HistoryQuery{Names: []string{"report-*"}, Outcomes: []string{bus.OutcomeDone}, Limit: 50}, false, 50},
		{"rare and old: the whole stream", agentwork.HistoryQuery{Names: []string{"rare-*"}}, false, 3},
		{"errors only", agentwork.HistoryQuery{Outcomes: []string{bus.OutcomeError}, Limit: 1000}, false, 123},
		{"several sources, repeated", agentwork.HistoryQuery{Sources: []string{bus.SourceCron, bus.SourceHeartbeat, bus.SourceCron}, Limit: 300}, false, 300},
		{"a list of names", agentwork.HistoryQuery{Names: []string{"rare-0", "other"}, Limit: 1000}, false, 121},
		{"deliveries are no runs", agentwork.HistoryQuery{Sources: []string{bus.SourceDelivery}}, false, 0},
		{"no such name", agentwork.HistoryQuery{Sources: []string{bus.SourceCron}, Names: []string{"job-9"}}, false, 0},
		{"since", agentwork.HistoryQuery{Limit: 1000}, true, 540},
		{"since, one job", agentwork.HistoryQuery{Names: []string{"job-0"}, Limit: 100}, true, 60},
		{"limit is capped", agentwork.HistoryQuery{Limit: 5000}, false, agentwork.MaxHistoryLimit},
	}
	// Every limit from 1 to all of them puts the window boundaries
	// elsewhere: none may lose or repeat a run.
	for limit := 1; limit <= 245; limit += 2 {
		tests = append(tests, struct {
			name  string
			q     agentwork.HistoryQuery
			since bool
			count int
		}{fmt.Sprintf("heartbeats, limit %d", limit), agentwork.HistoryQuery{Sources: []string{bus.SourceHeartbeat}, Limit: limit}, false, min(limit, 240)})
	}
	t.Run("queries", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				q := tt.q
				if tt.since {
					q.Since = cut
				}
				wantIDs := want(evs, q, tt.since)
				if len(wantIDs) != tt.count {
					t.Fatalf("the oracle expects %d records, the table %d: fix the test", len(wantIDs), tt.count)
				}
				got, err := agentwork.History(t.Context(), b, q)
				if err != nil {
					t.Fatalf("History(%+v): %v", q, err)
				}
				gotIDs := make([]string, len(got))
				for i, r := range got {
					gotIDs[i] = r.Event.ID
					e := byID[r.Event.ID]
					if string(r.JSON) != string(e.raw) {
						t.Errorf("record %d JSON = %s, want the stored %s", i, r.JSON, e.raw)
					}
					if r.Result.Name != e.name || r.Result.Outcome != e.outcome || r.Event.Subject != e.name {
						t.Errorf("record %d = %s/%s (subject %s), want %s/%s", i, r.Result.Name, r.Result.Outcome, r.Event.Subject, e.name, e.outcome)
					}
					if r.ID != r.Event.ID || r.Outcome != e.outcome || !r.Time.Equal(r.Event.Time) {
						t.Errorf("record %d = id %s, outcome %s, time %v; want the event's %s, %s, %v", i, r.ID, r.Outcome, r.Time, r.Event.ID, e.outcome, r.Event.Time)
					}
				}
				if !slices.Equal(gotIDs, wantIDs) {
					t.Errorf("History(%+v) = %d records %v,\nwant %d newest first %v", q, len(gotIDs), gotIDs, len(wantIDs), wantIDs)
				}
			})
		}
	})
	// Every read consumer is deleted once History returns.
	st, err := b.JetStream().Stream(t.Context(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Errorf("%d consumers left on %s after History, want 0", info.State.Consumers, bus.StreamEvents)
	}
}

func TestHistoryBadQuery(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	for _, q := range []agentwork.HistoryQuery{
		{Sources: []string{"cron.x"}},
		{Sources: []string{"*"}},
		{Outcomes: []string{">"}},
		{Outcomes: []string{""}},
	} {
		if got, err := agentwork.History(t.Context(), b, q); err == nil {
			t.Errorf("History(%+v) = %d records, nil; want an error", q, len(got))
		}
	}
}

// The record's JSON is what every history shows, whoever asks.
func TestRecordJSON(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	at := time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)
	res := agentwork.Result{Source: bus.SourceCron, Name: "report", Outcome: bus.OutcomeSkip, Reason: "missed", ScheduledAt: &at}
	ev, err := bus.NewEvent("agentwork/cron", bus.TypeOf(bus.SourceCron, bus.OutcomeSkip), "report", at.Add(time.Minute), res)
	if err != nil {
		t.Fatal(err)
	}
	ev.RunID, ev.CausationID = "run-1", "req-1"
	if _, err := b.Publish(t.Context(), b.Subjects.Event(bus.SourceCron, bus.OutcomeSkip), ev, ""); err != nil {
		t.Fatal(err)
	}
	recs, err := agentwork.History(t.Context(), b, agentwork.HistoryQuery{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("History = %v, %v; want one record", recs, err)
	}
	got, err := json.Marshal(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"id":%q,"time":"2026-05-04T09:01:00Z","outcome":"skip","run_id":"run-1","request_id":"req-1",`+
		`"result":{"source":"cron","name":"report","outcome":"skip","reason":"missed","duration_ms":0,"scheduled_at":"2026-05-04T09:00:00Z"}}`, ev.ID)
	if string(got) != want {
		t.Errorf("record JSON =\n%s\nwant\n%s", got, want)
	}
}

func TestHistoryCanceled(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	publishMix(t, b, 300, 0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := agentwork.History(ctx, b, agentwork.HistoryQuery{}); err == nil {
		t.Error("History with a canceled context = nil error, want one")
	}
}

// BenchmarkHistory reads a stream of 10,000 events of mixed sources: the
// last 20 runs of one cron job (1 event in 10), a name found only at the
// stream's start, the last 50 runs of any source.
func BenchmarkHistory(b *testing.B) {
	bb := bustest.New(b)
	publishMix(b, bb, 10_000, 0)
	for _, bc := range []struct {
		name string
		q    agentwork.HistoryQuery
		want int
	}{
		{"one job, last 20", agentwork.HistoryQuery{Sources: []string{bus.SourceCron}, Names: []string{"job-0"}, Limit: 20}, 20},
		{"a rare name, whole stream", agentwork.HistoryQuery{Names: []string{"rare-*"}}, 3},
		{"every run, last 50", agentwork.HistoryQuery{Limit: 50}, 50},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				got, err := agentwork.History(b.Context(), bb, bc.q)
				if err != nil || len(got) != bc.want {
					b.Fatalf("History = %d records, %v; want %d", len(got), err, bc.want)
				}
			}
		})
	}
}

// Paging with Before (the time of a page's last run) walks the whole
// history, page by page, losing and repeating nothing.
func TestHistoryBefore(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	evs, _ := publishMix(t, b, 300, 0)
	all := want(evs, agentwork.HistoryQuery{Sources: []string{bus.SourceHeartbeat}, Limit: 1000}, false)
	var got []string
	q := agentwork.HistoryQuery{Sources: []string{bus.SourceHeartbeat}, Limit: 7}
	for range 100 {
		page, err := agentwork.History(t.Context(), b, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			got = append(got, r.ID)
		}
		q.Before = page[len(page)-1].Time
	}
	if !slices.Equal(got, all) {
		t.Errorf("pages of 7 = %d runs %v,\nwant %d %v", len(got), got, len(all), all)
	}
}
