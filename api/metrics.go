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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
)

// maxModels bounds the model label: names past this many distinct ones are
// counted as "other", so a server that reports a new name per reply cannot
// grow /metrics without end.
const maxModels = 100

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

	streams atomic.Int64 // open event streams
}

func newMetrics(version string) *metrics {
	return &metrics{
		version: version, requests: map[[2]string]uint64{}, runs: map[[2]string]uint64{}, deliveries: map[string]uint64{},
		tokens: map[[2]string]uint64{}, modelRuns: map[[2]string]uint64{}, modelErrors: map[string]uint64{}, models: map[string]bool{}, truncated: map[string]uint64{},
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
	Model string       `json:"model"`
	Usage *model.Usage `json:"usage"`
	Class string       `json:"class"`
	// ReplyTruncated: the token limit cut the model's last reply short.
	ReplyTruncated bool `json:"reply_truncated"`
}

// count counts one event on <prefix>.event.<rest>, data being its envelope.
//
// Run outcomes are counted by subject alone. The model metrics come from
// the event's data (agentwork.Result): a done event counts as a model run
// and adds its token usage; a skip or error event counts as a model run only
// when it names the model (a skip after the model answered), and adds its
// usage when it carries one; every error event counts its class. An event
// whose data cannot be read still counts as a run outcome.
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
		m.tokens[[2]string{name, "input"}] += uint64(max(u.InputTokens, 0))
		m.tokens[[2]string{name, "output"}] += uint64(max(u.OutputTokens, 0))
	}
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
	family("agentwork_model_runs_total", "counter", "Runs that reached the model, by model and outcome, from the run events seen on the bus: every done, and skip or error when the event names the model.")
	for _, k := range sortedPairs(m.modelRuns) {
		fmt.Fprintf(&b, "agentwork_model_runs_total{model=\"%s\",outcome=\"%s\"} %d\n", escape(k[0]), escape(k[1]), m.modelRuns[k])
	}
	family("agentwork_model_truncated_total", "counter", "Runs whose last model reply the token limit cut short (model.max_tokens), by source, from the run events seen on the bus, from every instance.")
	series(&b, "agentwork_model_truncated_total", "source", m.truncated)
	family("agentwork_model_errors_total", "counter", "Failed runs by error class (transient, timeout, permanent), from the error events seen on the bus, from every instance.")
	series(&b, "agentwork_model_errors_total", "class", m.modelErrors)
	return b.Bytes()
}

// series writes the samples of a counter with one label, sorted by value.
func series(b *bytes.Buffer, name, label string, m map[string]uint64) {
	for _, v := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(b, "%s{%s=\"%s\"} %d\n", name, label, escape(v), m[v])
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
