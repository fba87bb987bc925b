package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// emitResult publishes a run event with res as its data, as the runner does.
func emitResult(t *testing.T, b *bus.Bus, res agentwork.Result) {
	t.Helper()
	ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf(res.Source, res.Outcome), res.Name, time.Now(), res)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(t.Context(), b.Subjects.Event(res.Source, res.Outcome), ev, ""); err != nil {
		t.Fatal(err)
	}
}

// liveMetrics runs a server, so that it counts the events on its bus.
func liveMetrics(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t, func(c *api.Config, _ *api.Deps) { c.Listen = "127.0.0.1:0" })
	runServer(t, f.s)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	return &fixture{b: f.b, s: f.s, url: "http://" + f.s.Addr().String(), c: client}
}

// waitMetrics reads /metrics until it has every line of want, and returns it.
func waitMetrics(t *testing.T, f *fixture, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		body := string(f.do(t, "GET", "/metrics", "", "").body)
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				missing = w
			}
		}
		if missing == "" {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %q after %s:\n%s", missing, waitFor, body)
		}
		select { // the subscription counts asynchronously: poll
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal("test ended while waiting for /metrics")
		}
	}
}

func usage(in, out int) *model.Usage { return &model.Usage{InputTokens: in, OutputTokens: out} }

// TestModelMetrics: token usage, model runs and error classes are counted
// from the run events on the bus.
func TestModelMetrics(t *testing.T) {
	t.Parallel()
	f := liveMetrics(t)
	for _, res := range []agentwork.Result{
		{Source: "heartbeat", Name: "default", Outcome: bus.OutcomeDone, Model: "gpt-4o-mini", Usage: usage(100, 20)},
		{Source: "cron", Name: "report", Outcome: bus.OutcomeDone, Model: "gpt-4o-mini", Usage: usage(50, 6)},
		{Source: "task", Name: "t", Outcome: bus.OutcomeDone, Model: "claude-sonnet-4-5", Usage: usage(7, 3), StopReason: "max_tokens", ReplyTruncated: true, Truncated: true},
		{Source: "task", Name: "t", Outcome: bus.OutcomeDone, Model: `we"ird\model`, Usage: usage(1, 1)},
		// Errors carry a class; today the runner does not name the model.
		{Source: "heartbeat", Name: "default", Outcome: bus.OutcomeError, Class: "permanent", Error: "401 ..."},
		{Source: "cron", Name: "report", Outcome: bus.OutcomeError, Class: "transient", Error: "429 ..."},
		{Source: "cron", Name: "report", Outcome: bus.OutcomeError, Class: "transient", Error: "503 ..."},
		// An error or skip that names the model counts as a model run.
		{Source: "task", Name: "t", Outcome: bus.OutcomeError, Class: "permanent", Model: "gpt-4o-mini", Usage: usage(30, 2)},
		{Source: "heartbeat", Name: "default", Outcome: bus.OutcomeSkip, Reason: "ack", Model: "gpt-4o-mini", Usage: usage(10, 1)},
		// A skip before the model (input gate) is not a model run.
		{Source: "heartbeat", Name: "default", Outcome: bus.OutcomeSkip, Reason: "outside-active-hours"},
	} {
		emitResult(t, f.b, res)
	}
	emit(t, f.b, bus.SourceDelivery, "delivered", "telegram")

	body := waitMetrics(t, f,
		`agentwork_model_tokens_total{model="gpt-4o-mini",kind="input"} 190`,
		`agentwork_model_tokens_total{model="gpt-4o-mini",kind="output"} 29`,
		`agentwork_model_tokens_total{model="claude-sonnet-4-5",kind="input"} 7`,
		`agentwork_model_tokens_total{model="claude-sonnet-4-5",kind="output"} 3`,
		`agentwork_model_tokens_total{model="we\"ird\\model",kind="input"} 1`,
		`agentwork_model_runs_total{model="gpt-4o-mini",outcome="done"} 2`,
		`agentwork_model_runs_total{model="gpt-4o-mini",outcome="error"} 1`,
		`agentwork_model_runs_total{model="gpt-4o-mini",outcome="skip"} 1`,
		`agentwork_model_runs_total{model="claude-sonnet-4-5",outcome="done"} 1`,
		`agentwork_model_errors_total{class="permanent"} 2`,
		`agentwork_model_errors_total{class="transient"} 2`,
		`agentwork_runs_total{source="heartbeat",outcome="skip"} 2`,
		`agentwork_runs_total{source="cron",outcome="error"} 2`,
		`agentwork_deliveries_total{outcome="delivered"} 1`,
		`agentwork_model_truncated_total{source="task"} 1`,
		`agentwork_tokens_total{source="heartbeat",model="gpt-4o-mini",kind="input"} 110`,
		`agentwork_tokens_total{source="cron",model="gpt-4o-mini",kind="output"} 6`,
		`agentwork_tokens_total{source="task",model="claude-sonnet-4-5",kind="input"} 7`,
		`agentwork_job_tokens_total{source="cron",name="report",kind="input"} 50`,
		`agentwork_job_tokens_total{source="heartbeat",name="default",kind="output"} 21`,
		"# TYPE agentwork_tokens_total counter",
		"# TYPE agentwork_job_tokens_total counter",
		"# TYPE agentwork_model_tokens_total counter",
		"# TYPE agentwork_model_runs_total counter",
		"# TYPE agentwork_model_errors_total counter",
	)
	checkExposition(t, body)
	for _, unwanted := range []string{`model=""`, `outcome="skip"} 2`, `class="unknown"`} {
		if strings.Contains(modelLines(body), unwanted) {
			t.Errorf("/metrics model series contain %q:\n%s", unwanted, modelLines(body))
		}
	}
	if strings.Contains(body, `agentwork_job_tokens_total{source="task"`) {
		t.Errorf("/metrics counts tokens per task name (unbounded): want cron jobs and heartbeats only:\n%s", body)
	}
}

// modelLines are the agentwork_model_* samples of an exposition.
func modelLines(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "agentwork_model_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestModelMetricsBoundedLabels: a server that names a new model in every
// reply cannot grow /metrics without end; names past 100 count as "other".
func TestModelMetricsBoundedLabels(t *testing.T) {
	t.Parallel()
	f := liveMetrics(t)
	const n = 103
	for i := range n {
		emitResult(t, f.b, agentwork.Result{Source: "task", Name: "t", Outcome: bus.OutcomeDone, Model: fmt.Sprintf("m%03d", i), Usage: usage(1, 1)})
	}
	body := waitMetrics(t, f,
		`agentwork_runs_total{source="task",outcome="done"} 103`,
		`agentwork_model_runs_total{model="m099",outcome="done"} 1`,
		`agentwork_model_runs_total{model="other",outcome="done"} 3`,
		`agentwork_model_tokens_total{model="other",kind="input"} 3`,
	)
	if strings.Contains(body, `model="m100"`) {
		t.Errorf("/metrics has a series for the 101st model name, want it counted as other")
	}
	checkExposition(t, body)
}

// TestModelMetricsUnreadableEvent: an event whose data is not a run result
// still counts as a run outcome and breaks nothing.
func TestModelMetricsUnreadableEvent(t *testing.T) {
	t.Parallel()
	f := liveMetrics(t)
	if err := f.b.Conn().Publish(f.b.Subjects.Event("task", bus.OutcomeError), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	emitResult(t, f.b, agentwork.Result{Source: "task", Name: "t", Outcome: bus.OutcomeError, Class: "timeout"})
	body := waitMetrics(t, f,
		`agentwork_runs_total{source="task",outcome="error"} 2`,
		`agentwork_model_errors_total{class="timeout"} 1`,
		`agentwork_model_errors_total{class="unknown"} 1`,
	)
	checkExposition(t, body)
}

// TestToolMetrics: every tool call a run event lists counts by tool and
// outcome; those that ran add their duration to the histogram.
func TestToolMetrics(t *testing.T) {
	t.Parallel()
	f := liveMetrics(t)
	call := func(name, outcome string, ms float64) tools.Call {
		return tools.Call{Name: name, Outcome: outcome, DurationMS: ms}
	}
	for _, res := range []agentwork.Result{
		{Source: "heartbeat", Name: "default", Outcome: bus.OutcomeDone, ToolCalls: []tools.Call{
			call("fs__read_text_file", tools.OutcomeOK, 3), call("fs__read_text_file", tools.OutcomeOK, 40), call("notify_user", tools.OutcomeOK, 0.02),
		}},
		// A skip after the model and an error carry their calls too.
		{Source: "heartbeat", Name: "default", Outcome: bus.OutcomeSkip, Reason: "ack", ToolCalls: []tools.Call{call("fs__read_text_file", tools.OutcomeTimeout, 30000)}},
		{Source: "task", Name: "t", Outcome: bus.OutcomeError, Class: "permanent", ToolCalls: []tools.Call{
			call("rm_rf", tools.OutcomeRefused, 0), call("fs__read_text_file", tools.OutcomeError, 1),
		}},
		// A call cut short by a crash, not made again when the run went on.
		{Source: "task", Name: "t", Outcome: bus.OutcomeDone, ToolCalls: []tools.Call{call("fs__write_file", tools.OutcomeInterrupted, 0)}},
	} {
		emitResult(t, f.b, res)
	}
	body := waitMetrics(t, f,
		`agentwork_tool_calls_total{tool="fs__read_text_file",outcome="ok"} 2`,
		`agentwork_tool_calls_total{tool="fs__read_text_file",outcome="timeout"} 1`,
		`agentwork_tool_calls_total{tool="fs__read_text_file",outcome="error"} 1`,
		`agentwork_tool_calls_total{tool="notify_user",outcome="ok"} 1`,
		`agentwork_tool_calls_total{tool="rm_rf",outcome="refused"} 1`,
		`agentwork_tool_calls_total{tool="fs__write_file",outcome="interrupted"} 1`,
		"# TYPE agentwork_tool_call_duration_seconds histogram",
		`agentwork_tool_call_duration_seconds_bucket{tool="fs__read_text_file",le="0.005"} 2`,
		`agentwork_tool_call_duration_seconds_bucket{tool="fs__read_text_file",le="0.05"} 3`,
		`agentwork_tool_call_duration_seconds_bucket{tool="fs__read_text_file",le="30"} 4`,
		`agentwork_tool_call_duration_seconds_bucket{tool="fs__read_text_file",le="+Inf"} 4`,
		`agentwork_tool_call_duration_seconds_sum{tool="fs__read_text_file"} 30.044`,
		`agentwork_tool_call_duration_seconds_count{tool="fs__read_text_file"} 4`,
		`agentwork_tool_call_duration_seconds_count{tool="notify_user"} 1`,
	)
	checkExposition(t, body)
	if strings.Contains(body, `agentwork_tool_call_duration_seconds_count{tool="rm_rf"}`) {
		t.Error("a refused call, which ran nothing, is in the duration histogram")
	}
	if strings.Contains(body, `agentwork_tool_call_duration_seconds_count{tool="fs__write_file"}`) {
		t.Error("an interrupted call, whose duration is unknown, is in the duration histogram")
	}
}
