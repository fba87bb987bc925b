package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// maxModels bounds the model label: names past this many distinct ones are
// counted as "other", so a server that reports a new name per reply cannot
// grow /metrics without end.
const maxModels = 100

// maxTools bounds the tool label the same way: a model may call names it
// invents (refused, but counted).
const maxTools = 200

// maxJobs bounds the name label of the per-job token counter (cron jobs,
// which the API and the agent may add, and heartbeats) the same way.
const maxJobs = 200

// toolBuckets are the upper bounds, in seconds, of the tool call duration
// histogram: from an in-process tool to an MCP server's 60s timeout.
var toolBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// metrics holds the counters of /metrics, written in the Prometheus text
// exposition format (version 0.0.4) by hand: a handful of counters do not
// need the client library.
type metrics struct {
	version string

	mu          sync.Mutex
	requests    map[[2]string]uint64 // route, code
	runs        map[[2]string]uint64 // source, outcome
	deliveries  map[string]uint64    // outcome
	tokens      map[[2]string]uint64 // model, kind (input|output)
	modelRuns   map[[2]string]uint64 // model, outcome
	modelErrors map[string]uint64    // class
	truncated   map[string]uint64    // source
	models      map[string]bool      // model labels in use
	toolCalls   map[[2]string]uint64 // tool, outcome
	toolTimes   map[string]*histogram
	tools       map[string]bool      // tool labels in use
	srcTokens   map[[3]string]uint64 // source, model, kind
	jobTokens   map[[3]string]uint64 // source (cron|heartbeat), name, kind
	jobs        map[string]bool      // source/name labels in use

	streams atomic.Int64 // open event streams
}

func newMetrics(version string) *metrics {
	return &metrics{
		version: version, requests: map[[2]string]uint64{}, runs: map[[2]string]uint64{}, deliveries: map[string]uint64{},
		tokens: map[[2]string]uint64{}, modelRuns: map[[2]string]uint64{}, modelErrors: map[string]uint64{}, models: map[string]bool{}, truncated: map[string]uint64{},
		toolCalls: map[[2]string]uint64{}, toolTimes: map[string]*histogram{}, tools: map[string]bool{},
		srcTokens: map[[3]string]uint64{}, jobTokens: map[[3]string]uint64{}, jobs: map[string]bool{},
	}
}

func (m *metrics) request(route string, code int) {
	m.mu.Lock()
	m.requests[[2]string{route, fmt.Sprint(code)}]++
	m.mu.Unlock()
}

// countEvents subscribes to every event subject and counts run outcomes
// and delivery results by subject, and the model's side of runs from the
// run events' data.
func (m *metrics) countEvents(b *bus.Bus) (unsubscribe func(), err error) {
	prefix := strings.TrimSuffix(b.Subjects.Events(), ">") // "agentwork.event."
	sub, err := b.Conn().Subscribe(b.Subjects.Events(), func(msg *nats.Msg) {
		m.count(strings.TrimPrefix(msg.Subject, prefix), msg.Data)
	})
	if err != nil {
		return nil, fmt.Errorf("api: subscribe to events for metrics: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// modelFacts are the fields of a run event's data (agentwork.Result) that
// the model metrics read.
type modelFacts struct {
	Name  string       `json:"name"`
	Model string       `json:"model"`
	Usage *model.Usage `json:"usage"`
	Class string       `json:"class"`
	// ReplyTruncated: the token limit cut the model's last reply short.
	ReplyTruncated bool `json:"reply_truncated"`
	// ToolCalls are the run's tool calls (agentwork.Result.ToolCalls).
	ToolCalls []struct {
		Name       string  `json:"name"`
		Outcome    string  `json:"outcome"`
		DurationMS float64 `json:"duration_ms"`
	} `json:"tool_calls"`
}

// count counts one event on <prefix>.event.<rest>, data being its envelope.
//
// Run outcomes are counted by subject alone. The model metrics come from
// the event's data (agentwork.Result): a done event counts as a model run
// and adds its token usage; a skip or error event counts as a model run only
// when it names the model (a skip after the model answered), and adds its
// usage when it carries one; every error event counts its class. Every
// tool call a run event lists counts by tool and outcome, and the calls
// that ran (all but the refused) add their duration to the histogram. An
// event whose data cannot be read still counts as a run outcome.
func (m *metrics) count(rest string, data []byte) {
	source, outcome, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(outcome, ".") {
		return
	}
	if source == bus.SourceDelivery {
		m.mu.Lock()
		m.deliveries[outcome]++
		m.mu.Unlock()
		return
	}
	if outcome != bus.OutcomeDone && outcome != bus.OutcomeSkip && outcome != bus.OutcomeError {
		return
	}
	var facts modelFacts
	if ev, err := bus.DecodeEvent(data); err == nil {
		_ = json.Unmarshal(ev.Data, &facts)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs[[2]string{source, outcome}]++
	for _, c := range facts.ToolCalls {
		tool := m.toolLabel(c.Name)
		m.toolCalls[[2]string{tool, c.Outcome}]++
		if c.Outcome == tools.OutcomeRefused || c.Outcome == tools.OutcomeInterrupted {
			continue // nothing ran, or how long it ran is not known
		}
		h := m.toolTimes[tool]
		if h == nil {
			h = &histogram{counts: make([]uint64, len(toolBuckets))}
			m.toolTimes[tool] = h
		}
		h.observe(max(c.DurationMS, 0) / 1000)
	}
	if facts.ReplyTruncated {
		m.truncated[source]++
	}
	if outcome == bus.OutcomeError {
		class := facts.Class
		if class == "" {
			class = "unknown"
		}
		m.modelErrors[class]++
	}
	named := outcome == bus.OutcomeDone || facts.Model != ""
	if !named && facts.Usage == nil {
		return
	}
	name := m.modelLabel(facts.Model)
	if named {
		m.modelRuns[[2]string{name, outcome}]++
	}
	if u := facts.Usage; u != nil {
		in, out, cached := uint64(max(u.InputTokens, 0)), uint64(max(u.OutputTokens, 0)), uint64(max(u.CachedInputTokens, 0))
		m.tokens[[2]string{name, "input"}] += in
		m.tokens[[2]string{name, "output"}] += out
		m.srcTokens[[3]string{source, name, "input"}] += in
		m.srcTokens[[3]string{source, name, "output"}] += out
		if cached > 0 {
			m.srcTokens[[3]string{source, name, "cached_input"}] += cached
		}
		if source == bus.SourceCron || source == bus.SourceHeartbeat {
			job := m.jobLabel(source, facts.Name)
			m.jobTokens[[3]string{source, job, "input"}] += in
			m.jobTokens[[3]string{source, job, "output"}] += out
		}
	}
}

// jobLabel is modelLabel for the names of cron jobs and heartbeats. Call
// with m.mu held.
func (m *metrics) jobLabel(source, name string) string {
	if m.jobs[source+"/"+name] {
		return name
	}
	if len(m.jobs) >= maxJobs {
		return "other"
	}
	m.jobs[source+"/"+name] = true
	return name
}

// modelLabel returns the label of a model name: the name, or "other" once
// maxModels names are in use. Call with m.mu held.
func (m *metrics) modelLabel(name string) string {
	if m.models[name] {
		return name
	}
	if len(m.models) >= maxModels {
		return "other"
	}
	m.models[name] = true
	return name
}

// toolLabel is modelLabel for tool names. Call with m.mu held.
func (m *metrics) toolLabel(name string) string {
	if m.tools[name] {
		return name
	}
	if len(m.tools) >= maxTools {
		return "other"
	}
	m.tools[name] = true
	return name
}

// histogram is a Prometheus histogram over toolBuckets.
type histogram struct {
	counts []uint64 // per bucket, not cumulative
	count  uint64
	sum    float64
}

func (h *histogram) observe(v float64) {
	for i, le := range toolBuckets {
		if v <= le {
			h.counts[i]++
			break
		}
	}
	h.count++
	h.sum += v
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) {
	if !fromLoopback(r) && !s.isAdmin(r) {
		problem.Unauthorized(w, adminRealm, "/metrics from another machine needs Authorization: Bearer <admin token>")
		return
	}
	ready := 0.0
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	if s.ready(ctx) == nil {
		ready = 1
	}
	cancel()
	full := 0.0
	if s.deps.Bus.StoreFull() {
		full = 1
	}
	dead := -1 // unknown: the bus does not answer
	ctx, cancel = context.WithTimeout(r.Context(), 2*time.Second)
	if n, err := s.deadLetters().Count(ctx); err == nil {
		dead = n
	}
	cancel()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(s.metrics.expose(ready, full, dead))
}

// expose renders every metric; series are sorted so the output is stable.
func (m *metrics) expose(busReady, storeFull float64, deadLetters int) []byte {
	var b bytes.Buffer
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("agentwork_build_info", "gauge", "Build information of this process; the value is always 1.")
	fmt.Fprintf(&b, "agentwork_build_info{version=\"%s\",goversion=\"%s\"} 1\n", escape(m.version), escape(runtime.Version()))
	family("agentwork_bus_ready", "gauge", "1 when the NATS connection and JetStream are ready, else 0.")
	fmt.Fprintf(&b, "agentwork_bus_ready %g\n", busReady)
	family("agentwork_bus_store_full", "gauge", "1 while the JetStream store has no space for new work (bus.max_store or the disk), else 0.")
	fmt.Fprintf(&b, "agentwork_bus_store_full %g\n", storeFull)
	if deadLetters >= 0 {
		family("agentwork_deliveries_failed_waiting", "gauge", "Notifications that failed delivery for good and wait for a retry (agentwork deliveries list).")
		fmt.Fprintf(&b, "agentwork_deliveries_failed_waiting %d\n", deadLetters)
	}
	family("agentwork_event_streams", "gauge", "Open GET /v1/events streams.")
	fmt.Fprintf(&b, "agentwork_event_streams %d\n", m.streams.Load())

	m.mu.Lock()
	defer m.mu.Unlock()
	family("agentwork_http_requests_total", "counter", "HTTP requests served, by route pattern and status code.")
	for _, k := range sortedPairs(m.requests) {
		fmt.Fprintf(&b, "agentwork_http_requests_total{route=\"%s\",code=\"%s\"} %d\n", escape(k[0]), escape(k[1]), m.requests[k])
	}
	family("agentwork_runs_total", "counter", "Run outcomes (done, skip, error) seen on the bus since this process started, from every instance: do not sum across instances.")
	for _, k := range sortedPairs(m.runs) {
		fmt.Fprintf(&b, "agentwork_runs_total{source=\"%s\",outcome=\"%s\"} %d\n", escape(k[0]), escape(k[1]), m.runs[k])
	}
	family("agentwork_deliveries_total", "counter", "Delivery results (delivered, failed) seen on the bus since this process started, from every instance.")
	series(&b, "agentwork_deliveries_total", "outcome", m.deliveries)
	family("agentwork_model_tokens_total", "counter", "Model tokens used by runs, by model and kind (input, output), from the usage in the run events seen on the bus, from every instance.")
	for _, k := range sortedPairs(m.tokens) {
		fmt.Fprintf(&b, "agentwork_model_tokens_total{model=\"%s\",kind=\"%s\"} %d\n", escape(k[0]), escape(k[1]), m.tokens[k])
	}
	family("agentwork_tokens_total", "counter", "Model tokens used by runs, by source, model and kind (input, output, cached_input: the part of input read from the provider's prompt cache), from the run events seen on the bus, from every instance: do not sum across instances.")
	triples(&b, "agentwork_tokens_total", [3]string{"source", "model", "kind"}, m.srcTokens)
	family("agentwork_job_tokens_total", "counter", "Model tokens used by the runs of each cron job and heartbeat (source cron or heartbeat, name the job id or heartbeat name, kind input or output), from the run events seen on the bus, from every instance; past 200 names, further ones count as \"other\".")
	triples(&b, "agentwork_job_tokens_total", [3]string{"source", "name", "kind"}, m.jobTokens)
	family("agentwork_model_runs_total", "counter", "Runs that reached the model, by model and outcome, from the run events seen on the bus: every done, and skip or error when the event names the model.")
	for _, k := range sortedPairs(m.modelRuns) {
		fmt.Fprintf(&b, "agentwork_model_runs_total{model=\"%s\",outcome=\"%s\"} %d\n", escape(k[0]), escape(k[1]), m.modelRuns[k])
	}
	family("agentwork_model_truncated_total", "counter", "Runs whose last model reply the token limit cut short (model.max_tokens), by source, from the run events seen on the bus, from every instance.")
	series(&b, "agentwork_model_truncated_total", "source", m.truncated)
	family("agentwork_model_errors_total", "counter", "Failed runs by error class (transient, timeout, permanent), from the error events seen on the bus, from every instance.")
	series(&b, "agentwork_model_errors_total", "class", m.modelErrors)
	family("agentwork_tool_calls_total", "counter", "Tool calls of runs by tool and outcome (ok, error, timeout, refused), from the run events seen on the bus, from every instance.")
	for _, k := range sortedPairs(m.toolCalls) {
		fmt.Fprintf(&b, "agentwork_tool_calls_total{tool=\"%s\",outcome=\"%s\"} %d\n", escape(k[0]), escape(k[1]), m.toolCalls[k])
	}
	family("agentwork_tool_call_duration_seconds", "histogram", "How long the tool calls of runs took, by tool (refused calls, which run nothing, left out), from the run events seen on the bus, from every instance.")
	for _, tool := range slices.Sorted(maps.Keys(m.toolTimes)) {
		h, t := m.toolTimes[tool], escape(tool)
		var cum uint64
		for i, le := range toolBuckets {
			cum += h.counts[i]
			fmt.Fprintf(&b, "agentwork_tool_call_duration_seconds_bucket{tool=\"%s\",le=\"%s\"} %d\n", t, num(le), cum)
		}
		fmt.Fprintf(&b, "agentwork_tool_call_duration_seconds_bucket{tool=\"%s\",le=\"+Inf\"} %d\n", t, h.count)
		fmt.Fprintf(&b, "agentwork_tool_call_duration_seconds_sum{tool=\"%s\"} %s\n", t, num(h.sum))
		fmt.Fprintf(&b, "agentwork_tool_call_duration_seconds_count{tool=\"%s\"} %d\n", t, h.count)
	}
	return b.Bytes()
}

// num writes a float without an exponent.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// series writes the samples of a counter with one label, sorted by value.
func series(b *bytes.Buffer, name, label string, m map[string]uint64) {
	for _, v := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(b, "%s{%s=\"%s\"} %d\n", name, label, escape(v), m[v])
	}
}

// triples writes the samples of a counter with three labels, sorted.
func triples(b *bytes.Buffer, name string, labels [3]string, m map[[3]string]uint64) {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b [3]string) int {
		return strings.Compare(a[0]+"\x00"+a[1]+"\x00"+a[2], b[0]+"\x00"+b[1]+"\x00"+b[2])
	})
	for _, k := range keys {
		fmt.Fprintf(b, "%s{%s=\"%s\",%s=\"%s\",%s=\"%s\"} %d\n", name, labels[0], escape(k[0]), labels[1], escape(k[1]), labels[2], escape(k[2]), m[k])
	}
}

func sortedPairs(m map[[2]string]uint64) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	return keys
}

// escape escapes a label value: backslash, double quote and line feed.
var escaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escape(s string) string { return escaper.Replace(s) }
