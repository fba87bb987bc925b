package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/console"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// scaleRuns is how many run events TestConsoleScale fills the events
// stream with; scalePending approvals wait, scaleDecided were decided.
const (
	scaleRuns    = 100_000
	scalePending = 500
	scaleDecided = 100
)

// TestConsoleScale measures each console page's server time with
// 100,000 runs in the events stream (docs/BENCHMARKS.md, "Console with
// 100,000 runs"). It fills an embedded bus as the runner and the
// dispatcher would (cron, heartbeat and task runs of a few shapes, a
// delivery for each run that notified) and asks 600 approvals (500 wait),
// checks that the overview counts them all exactly and that the oldest
// run's page has its delivery, then times each page's GET through the
// console's handler in process, and logs p50 and max. It asserts no
// timing. It runs only when AGENTWORK_CONSOLE_100K=1:
//
//	AGENTWORK_CONSOLE_100K=1 go test -count=1 -run TestConsoleScale -v ./console/
func TestConsoleScale(t *testing.T) {
	if os.Getenv("AGENTWORK_CONSOLE_100K") != "1" {
		t.Skip("a measurement: set AGENTWORK_CONSOLE_100K=1 to fill 100,000 runs and time every page")
	}
	b := bustest.New(t, func(c *bus.Config) { c.SyncInterval = time.Minute }) // batched fsync for the fill
	start := time.Now()
	old := fillRuns(t, b, scaleRuns-100)
	t.Logf("filled %d runs in %s", scaleRuns-100, time.Since(start).Round(time.Millisecond))
	// The fill packs what the runner writes in weeks into seconds. A
	// run's page reads the events from 30 s before the run (the window
	// GET /v1/runs/{id} allows for clocks), at most 20,000: a run ended
	// in the same seconds as 100,000 others would not be found. The last
	// 100 runs come a little later, as the newest runs of a real history
	// do: the wait is for the stream's clock, not for an event.
	time.Sleep(31 * time.Second)
	newRun := fillRuns(t, b, 100)[99]

	f := &fixture{b: b, routes: &routes{}, now: &clock{t: time.Now()}, approvals: approval.New(b, approval.Config{})}
	s := api.New(api.Config{AdminToken: adminToken, KeepAlive: time.Hour},
		api.Deps{Bus: b, Routes: []api.Router{f.routes}, Callers: callers, Approvals: f.approvals, Console: console.New(console.WithClock(f.now.Now))})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	f.url = srv.URL
	// Approvals: scalePending wait, scaleDecided were decided.
	for i := range scalePending + scaleDecided {
		id := f.ask(t, fmt.Sprintf("run-%d", i), "Run exec?", `{"argv":["make","deploy"]}`)
		if i >= scalePending {
			if _, err := f.approvals.Decide(t.Context(), id, approval.Approve, approval.ByAdmin, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	br := f.browser(t).login(adminToken)

	// What the pages say is right: the overview's counts are exact (all
	// 100,000 runs ended within 24 hours), the oldest run's page has its
	// delivery.
	over := br.do("GET", "/", nil)
	for _, want := range []string{
		fmt.Sprintf(`<span class="num done">%d</span> done`, scaleRuns/2),
		fmt.Sprintf(`<span class="num skip">%d</span> skip`, scaleRuns/4),
		fmt.Sprintf(`<span class="num error">%d</span> error`, scaleRuns/4),
		fmt.Sprintf(`<span class="num skip">%d</span> waiting for a decision`, scalePending),
	} {
		if !strings.Contains(over.body, want) {
			t.Errorf("the overview lacks %s:\n%s", want, over.body)
		}
	}
	if p := br.do("GET", "/runs/"+old[0], nil); !strings.Contains(p.body, `id="deliveries"`) || !strings.Contains(p.body, "1700000000.000100") {
		t.Errorf("the oldest run's page lacks its delivery:\n%s", p.body)
	}

	// The second page of the runs list: the "Older" link of the first.
	first := br.do("GET", "/runs", nil)
	older := olderLink(first.body)
	if older == "" {
		t.Fatal("the runs list has no link to older runs")
	}
	// The oldest runs: one that notified, one skipped, one failed.
	paths := []string{"/", "/runs", older, "/runs/" + old[0], "/runs/" + old[1], "/runs/" + old[3], "/runs/" + newRun,
		"/jobs", "/heartbeat", "/deliveries", "/approvals", "/approvals?decided=1", "/workflows", "/usage"}
	const rounds = 7
	for _, p := range paths {
		var took []time.Duration
		for range rounds {
			t0 := time.Now()
			got := br.do("GET", p, nil)
			took = append(took, time.Since(t0))
			if got.status != http.StatusOK {
				t.Fatalf("GET %s = %d: %s", p, got.status, got.body)
			}
		}
		slices.Sort(took)
		t.Logf("%-60s p50 %7.1f ms  max %7.1f ms", p, ms(took[len(took)/2]), ms(took[len(took)-1]))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func olderLink(body string) string {
	i := strings.Index(body, `href="/runs?before=`)
	if i < 0 {
		i = strings.Index(body, `href="/runs?`)
		if i < 0 {
			return ""
		}
	}
	rest := body[i+len(`href="`):]
	return strings.ReplaceAll(rest[:strings.IndexByte(rest, '"')], "&amp;", "&")
}

// fillRuns publishes n run events on b's events stream as the runner
// does, and a delivery event for each run that notified, as the
// dispatcher does; it returns the ids of the runs' events, in order.
func fillRuns(t *testing.T, b *bus.Bus, n int) []string {
	t.Helper()
	js := b.JetStream()
	wait := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(5 * time.Minute):
			t.Fatal("publishing runs: no acks within 5 minutes")
		}
	}
	pub := func(source, outcome, subject string, runID string, data any) string {
		ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf(source, outcome), subject, time.Now(), data)
		if err != nil {
			t.Fatal(err)
		}
		ev.RunID = runID
		raw, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		bustest.Throttle(t, js)
		if _, err := js.PublishAsync(b.Subjects.Event(source, outcome), raw); err != nil {
			t.Fatal(err)
		}
		return ev.ID
	}
	usage := &model.Usage{InputTokens: 4200, OutputTokens: 310, CachedInputTokens: 3000}
	result := strings.Repeat("a line of what the tool found, ", 12)
	ids := make([]string, 0, n)
	for i := range n {
		if i%1000 == 0 {
			wait()
		}
		runID := fmt.Sprintf("run-%d", i)
		var id string
		switch i % 4 {
		case 0: // a cron job that notified, after two tool calls
			job := fmt.Sprintf("job-%d", i%7)
			id = pub(bus.SourceCron, bus.OutcomeDone, job, runID, agentwork.Result{
				Source: bus.SourceCron, Name: job, Outcome: bus.OutcomeDone, Model: "claude-sonnet", Usage: usage,
				Text: "The digest: three things happened today. " + result, Targets: []string{"slack"},
				NotificationIDs: []string{"n-" + runID}, DurationMS: 8200,
				ToolCalls: []tools.Call{
					{ID: "c1", Name: "web_fetch", Arguments: `{"url":"https://example.com/news"}`, Result: result, Outcome: "ok", DurationMS: 420},
					{ID: "c2", Name: "memory_read", Arguments: `{"doc":"long"}`, Result: result, Outcome: "ok", DurationMS: 3},
				}})
			pub(bus.SourceDelivery, connectors.OutcomeDelivered, "slack", runID, map[string]any{
				"connector": "slack", "attempts": 1, "notification": map[string]any{"id": "n-" + runID, "text": "The digest"},
				"receipt": map[string]any{"message_ids": []string{"1700000000.000100"}, "parts": 1}})
		case 1: // the heartbeat, skipped by its gate
			id = pub(bus.SourceHeartbeat, bus.OutcomeSkip, "default", runID, agentwork.Result{
				Source: bus.SourceHeartbeat, Name: "default", Outcome: bus.OutcomeSkip, Reason: "empty_checklist", DurationMS: 2})
		case 2: // the heartbeat, nothing to say
			id = pub(bus.SourceHeartbeat, bus.OutcomeDone, "default", runID, agentwork.Result{
				Source: bus.SourceHeartbeat, Name: "default", Outcome: bus.OutcomeDone, Model: "claude-haiku", Usage: usage,
				Reply: "HEARTBEAT_OK", DurationMS: 1900})
		case 3: // a task that failed
			name := fmt.Sprintf("task-%d", i%50)
			id = pub(bus.SourceTask, bus.OutcomeError, name, runID, agentwork.Result{
				Source: bus.SourceTask, Name: name, Outcome: bus.OutcomeError, Class: "model", Error: "model: 529 overloaded",
				Model: "claude-sonnet", DurationMS: 30100})
		}
		ids = append(ids, id)
	}
	wait()
	return ids
}
