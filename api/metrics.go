package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/bus"
)

// metrics holds the counters of /metrics, written in the Prometheus text
// exposition format (version 0.0.4) by hand: a handful of counters do not
// need the client library.
type metrics struct {
	version string

	mu         sync.Mutex
	requests   map[[2]string]uint64 // route, code
	runs       map[[2]string]uint64 // source, outcome
	deliveries map[string]uint64    // outcome

	streams atomic.Int64 // open event streams
}

func newMetrics(version string) *metrics {
	return &metrics{version: version, requests: map[[2]string]uint64{}, runs: map[[2]string]uint64{}, deliveries: map[string]uint64{}}
}

func (m *metrics) request(route string, code int) {
	m.mu.Lock()
	m.requests[[2]string{route, fmt.Sprint(code)}]++
	m.mu.Unlock()
}

// countEvents subscribes to every event subject and counts run outcomes
// and delivery results by subject, without decoding the events.
func (m *metrics) countEvents(b *bus.Bus) (unsubscribe func(), err error) {
	prefix := strings.TrimSuffix(b.Subjects.Events(), ">") // "agentwork.event."
	sub, err := b.Conn().Subscribe(b.Subjects.Events(), func(msg *nats.Msg) {
		source, outcome, ok := strings.Cut(strings.TrimPrefix(msg.Subject, prefix), ".")
		if !ok || strings.Contains(outcome, ".") {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		switch {
		case source == bus.SourceDelivery:
			m.deliveries[outcome]++
		case outcome == bus.OutcomeDone || outcome == bus.OutcomeSkip || outcome == bus.OutcomeError:
			m.runs[[2]string{source, outcome}]++
		}
	})
	if err != nil {
		return nil, fmt.Errorf("api: subscribe to events for metrics: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) {
	if !fromLoopback(r) && !s.isAdmin(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentwork admin"`)
		problemUnauthorized(w, "/metrics from another machine needs Authorization: Bearer <admin token>")
		return
	}
	ready := 0.0
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	if s.deps.Ready(ctx) == nil {
		ready = 1
	}
	cancel()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(s.metrics.expose(ready))
}

// expose renders every metric; series are sorted so the output is stable.
func (m *metrics) expose(busReady float64) []byte {
	var b bytes.Buffer
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("agentwork_build_info", "gauge", "Build information of this process; the value is always 1.")
	fmt.Fprintf(&b, "agentwork_build_info{version=\"%s\",goversion=\"%s\"} 1\n", escape(m.version), escape(runtime.Version()))
	family("agentwork_bus_ready", "gauge", "1 when the NATS connection and JetStream are ready, else 0.")
	fmt.Fprintf(&b, "agentwork_bus_ready %g\n", busReady)
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
	outs := make([]string, 0, len(m.deliveries))
	for o := range m.deliveries {
		outs = append(outs, o)
	}
	sort.Strings(outs)
	for _, o := range outs {
		fmt.Fprintf(&b, "agentwork_deliveries_total{outcome=\"%s\"} %d\n", escape(o), m.deliveries[o])
	}
	return b.Bytes()
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
