package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
)

// pipelineWorkers is the concurrency on both sides of the pipeline: the
// runner's (its default) and the benchmark connector's, and the worker
// count of the baselines' consumers.
const pipelineWorkers = 4

// pipelineDeadline bounds one measurement; a stuck pipeline fails the
// benchmark rather than hanging it.
const pipelineDeadline = 3 * time.Minute

// BenchmarkPipeline measures the whole agentwork pipeline on an embedded
// server with fsync on every write (the production setting): publish a
// task request → runner (claim, script model at zero latency, reply gate,
// queue the notification, done event, settle the claim, ack) → dispatcher
// → the connector's Send. Each op is one request; latency is from the start
// of Publish to the Send call.
//
// Beside it, in the same run and on the same kind of server, two raw
// JetStream baselines:
//   - jetstream-same-writes: the same hops and the same count of persisted
//     writes, KV reads and acks per request, with no agentwork code: a
//     publish; a consumer that reads and creates a KV key, publishes two
//     messages, updates the key and double-acks; a second consumer that
//     "sends", double-acks, puts a KV key and publishes one message.
//   - jetstream-1pub-1ack: one publish and one consumed, double-acked message.
//
// Modes: "load" has 4 publishers keep 64 requests in flight (throughput at
// saturation; latency then includes waiting behind the other 63); "serial"
// has one request in flight at a time (the latency of the path itself);
// "load-fsync-batched" is "load" with fsync every minute instead of on every
// write, to show what the disk costs.
//
//	go test -run '^$' -bench Pipeline -benchtime 2000x -count 5 ./bench/
func BenchmarkPipeline(b *testing.B) {
	systems := []struct {
		name  string
		start func(b *testing.B, bb *bus.Bus, mark func(i int)) (publish func(ctx context.Context, i int) error)
	}{
		{"agentwork", startAgentwork},
		{"jetstream-same-writes", startSameWrites},
		{"jetstream-1pub-1ack", startPlain},
	}
	modes := []struct {
		name       string
		publishers int
		window     int           // requests in flight at most
		sync       time.Duration // bus.Config.SyncInterval; 0 = fsync every write
		systems    int           // how many of systems to run
	}{
		{"load", 4, 64, 0, 3},
		{"serial", 1, 1, 0, 3},
		// The same load with fsync batched every minute instead of on every
		// write: how much of the cost is the disk.
		{"load-fsync-batched", 4, 64, time.Minute, 2},
	}
	for _, mode := range modes {
		for _, sys := range systems[:mode.systems] {
			b.Run(mode.name+"/"+sys.name, func(b *testing.B) {
				bb := bustest.New(b, func(c *bus.Config) { c.SyncInterval = mode.sync })
				if mode.sync == 0 && bb.Config().SyncInterval != 0 {
					b.Fatal("the benchmark must run with fsync on every write")
				}
				tr := newTracker(b.N)
				publish := sys.start(b, bb, tr.mark)
				before := writes(b, bb)
				b.ResetTimer()
				elapsed := tr.drive(b, publish, mode.publishers, mode.window)
				b.StopTimer()
				after := settledWrites(b, bb)
				lat := tr.latencies()
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
				b.ReportMetric(pipelineMS(pipelineQuantile(lat, 0.50)), "p50-ms")
				b.ReportMetric(pipelineMS(pipelineQuantile(lat, 0.99)), "p99-ms")
				b.ReportMetric(float64(after-before)/float64(b.N), "writes/req")
				b.ReportMetric(float64(redeliveries(b, bb)), "redeliveries")
			})
		}
	}
}

// startAgentwork runs a runner and a dispatcher on bb.
func startAgentwork(b *testing.B, bb *bus.Bus, mark func(int)) func(context.Context, int) error {
	p, err := script.New(script.Config{Default: &script.Reply{Text: "done: {{prompt}}"}})
	if err != nil {
		b.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.Notify())
	if err != nil {
		b.Fatal(err)
	}
	r := agentwork.NewRunner(bb, p, reg, agentwork.Config{Concurrency: pipelineWorkers}, agentwork.WithConnectors("bench"))
	r.Handle(bus.SourceTask, agentwork.Policy{})
	d := connectors.NewDispatcher(bb, connectors.Registry{"bench": benchConnector{mark}}, connectors.DispatcherConfig{}, nil)
	background(b, r.Run)
	background(b, d.Run)
	return func(ctx context.Context, i int) error {
		_, err := agentwork.Publish(ctx, bb, agentwork.Request{
			Source: bus.SourceTask, Name: "bench", Prompt: "request " + strconv.Itoa(i),
			Metadata: map[string]string{"i": strconv.Itoa(i)},
		}, agentwork.PublishOptions{})
		return err
	}
}

// benchConnector marks the request a notification belongs to as sent.
type benchConnector struct{ mark func(int) }

var (
	_ connectors.Connector  = benchConnector{}
	_ connectors.Concurrent = benchConnector{}
)

func (c benchConnector) Send(_ context.Context, n connectors.Notification) (connectors.Receipt, error) {
	i, err := strconv.Atoi(n.Metadata["i"])
	if err != nil {
		return connectors.Receipt{}, connectors.Permanent(err)
	}
	c.mark(i)
	return connectors.Receipt{Parts: 1}, nil
}

func (benchConnector) Concurrency() int { return pipelineWorkers }

// Baselines: streams and a bucket of their own on the same server.
const (
	baseRequests   = "BENCH_REQUESTS"
	baseDeliveries = "BENCH_DELIVERIES"
	baseEvents     = "BENCH_EVENTS"
	baseBucket     = "bench_locks"
)

// payload is the size of a typical envelope of the pipeline (a request is
// about 400 bytes, a notification 600, a done event 900).
var payload = make([]byte, 600)

func baselineStreams(b *testing.B, bb *bus.Bus) jetstream.KeyValue {
	ctx := context.Background()
	js := bb.JetStream()
	for name, subj := range map[string]string{baseRequests: "bench.request.>", baseDeliveries: "bench.delivery.>", baseEvents: "bench.event.>"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage, Duplicates: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: baseBucket, History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	return kv
}

// startSameWrites is the raw-JetStream path with the pipeline's writes:
// per request 9 persisted writes (request, run claim create, run claim
// checkpoint, delivery, event, run claim settle, send claim create, send
// claim settle, delivered event), 1 KV read and 2 double-acks, over the same
// two consumer hops.
func startSameWrites(b *testing.B, bb *bus.Bus, mark func(int)) func(context.Context, int) error {
	kv := baselineStreams(b, bb)
	js := bb.JetStream()
	pub := func(ctx context.Context, subject, id string) error {
		m := &nats.Msg{Subject: subject, Data: payload, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, id)
		_, err := js.PublishMsg(ctx, m)
		return err
	}
	consume(b, bb, baseRequests, "runner", func(ctx context.Context, m jetstream.Msg) error {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		key := "run." + id
		if _, err := kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("claim read: %v", err)
		}
		rev, err := kv.Create(ctx, key, payload[:100])
		if err != nil {
			return err
		}
		if rev, err = kv.Update(ctx, key, payload, rev); err != nil { // the checkpoint
			return err
		}
		dm := &nats.Msg{Subject: "bench.delivery.bench", Data: payload, Header: nats.Header{}}
		dm.Header.Set(jetstream.MsgIDHeader, id+".bench")
		dm.Header.Set("Bench-I", m.Headers().Get("Bench-I"))
		if _, err := js.PublishMsg(ctx, dm); err != nil {
			return err
		}
		if err := pub(ctx, "bench.event.task.done", "run."+id); err != nil {
			return err
		}
		if _, err := kv.Update(ctx, key, payload[:100], rev); err != nil {
			return err
		}
		return m.DoubleAck(ctx)
	})
	consume(b, bb, baseDeliveries, "deliver_bench", func(ctx context.Context, m jetstream.Msg) error {
		i, err := strconv.Atoi(m.Headers().Get("Bench-I"))
		if err != nil {
			return err
		}
		id := m.Headers().Get(jetstream.MsgIDHeader)
		if _, err := kv.Create(ctx, "send."+id, payload[:100]); err != nil {
			return err
		}
		mark(i)
		if _, err := kv.Put(ctx, "send."+id, payload[:100]); err != nil {
			return err
		}
		if err := m.DoubleAck(ctx); err != nil {
			return err
		}
		return pub(ctx, "bench.event.delivery.delivered", id+".delivered")
	})
	return func(ctx context.Context, i int) error {
		m := &nats.Msg{Subject: "bench.request.task.bench", Data: payload[:400], Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, bus.NewID())
		m.Header.Set("Bench-I", strconv.Itoa(i))
		_, err := js.PublishMsg(ctx, m)
		return err
	}
}

// startPlain is one publish and one consumed, double-acked message.
func startPlain(b *testing.B, bb *bus.Bus, mark func(int)) func(context.Context, int) error {
	baselineStreams(b, bb)
	js := bb.JetStream()
	consume(b, bb, baseRequests, "plain", func(ctx context.Context, m jetstream.Msg) error {
		i, err := strconv.Atoi(m.Headers().Get("Bench-I"))
		if err != nil {
			return err
		}
		mark(i)
		return m.DoubleAck(ctx)
	})
	return func(ctx context.Context, i int) error {
		m := &nats.Msg{Subject: "bench.request.task.bench", Data: payload[:400], Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, bus.NewID())
		m.Header.Set("Bench-I", strconv.Itoa(i))
		_, err := js.PublishMsg(ctx, m)
		return err
	}
}

// consume runs handle on pipelineWorkers goroutines for a durable pull
// consumer, as the runner and dispatcher do, until the benchmark ends.
func consume(b *testing.B, bb *bus.Bus, stream, durable string, handle func(context.Context, jetstream.Msg) error) {
	ctx := context.Background()
	cons, err := bb.JetStream().CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 10000,
	})
	if err != nil {
		b.Fatal(err)
	}
	sem := make(chan struct{}, pipelineWorkers)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	cc, err := cons.Consume(func(m jetstream.Msg) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := handle(ctx, m); err != nil {
				failed.CompareAndSwap(nil, &err)
				_ = m.Nak()
			}
		})
	}, jetstream.PullMaxMessages(pipelineWorkers), jetstream.PullHeartbeat(time.Second)) // as the runner
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cc.Drain()
		<-cc.Closed()
		wg.Wait()
		if err := failed.Load(); err != nil {
			b.Errorf("baseline consumer %s: %v", durable, *err)
		}
	})
}

func background(b *testing.B, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
}

// writes is the number of messages ever stored on the server: every
// stream's last sequence (KV buckets are streams too).
func writes(b *testing.B, bb *bus.Bus) uint64 {
	var n uint64
	names := bb.JetStream().StreamNames(context.Background())
	for name := range names.Name() {
		s, err := bb.JetStream().Stream(context.Background(), name)
		if err != nil {
			b.Fatal(err)
		}
		n += s.CachedInfo().State.LastSeq
	}
	if err := names.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}

// settledWrites waits for the writes that follow the connector call (the
// done event, the claim update, the delivered marker and event) to land,
// and returns the count. There is no signal for "nothing more will be
// written", so it polls until the count holds still for 200ms.
func settledWrites(b *testing.B, bb *bus.Bus) uint64 {
	last, stable := writes(b, bb), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if n := writes(b, bb); n != last {
			last, stable = n, time.Now()
		} else if time.Since(stable) >= 200*time.Millisecond {
			break
		}
	}
	return last
}

// redeliveries counts messages the consumers got more than once: deliveries
// beyond the stream sequences they covered.
func redeliveries(b *testing.B, bb *bus.Bus) uint64 {
	var n uint64
	for _, stream := range []string{bus.StreamRequests, bus.StreamDeliveries, baseRequests, baseDeliveries} {
		s, err := bb.JetStream().Stream(context.Background(), stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		for ci := range s.ListConsumers(context.Background()).Info() {
			n += ci.Delivered.Consumer - ci.Delivered.Stream
		}
	}
	return n
}

// tracker holds publish times and latencies of N requests.
type tracker struct {
	start   []atomic.Int64 // unix ns of the start of Publish
	lat     []atomic.Int64 // ns from publish to Send; 0 = not sent yet
	left    atomic.Int64
	done    chan struct{}
	credits chan struct{} // requests in flight, when windowed
}

func newTracker(n int) *tracker {
	t := &tracker{start: make([]atomic.Int64, n), lat: make([]atomic.Int64, n), done: make(chan struct{})}
	t.left.Store(int64(n))
	return t
}

// mark records that request i reached the connector. A second delivery of
// the same request is not counted again.
func (t *tracker) mark(i int) {
	if i < 0 || i >= len(t.lat) {
		return
	}
	d := time.Now().UnixNano() - t.start[i].Load()
	if !t.lat[i].CompareAndSwap(0, max(d, 1)) {
		return
	}
	if t.credits != nil {
		<-t.credits
	}
	if t.left.Add(-1) == 0 {
		close(t.done)
	}
}

// drive publishes every request from publishers goroutines, with at most
// window in flight (0: no limit), and returns when all reached the
// connector.
func (t *tracker) drive(b *testing.B, publish func(context.Context, int) error, publishers, window int) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), pipelineDeadline)
	defer cancel()
	if window > 0 {
		t.credits = make(chan struct{}, window)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	begin := time.Now()
	for range publishers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(t.start) {
					return
				}
				if t.credits != nil {
					select {
					case t.credits <- struct{}{}:
					case <-ctx.Done():
						return
					}
				}
				t.start[i].Store(time.Now().UnixNano())
				if err := publish(ctx, i); err != nil {
					errs <- fmt.Errorf("publish %d: %w", i, err)
					return
				}
			}
		})
	}
	select {
	case <-t.done:
	case err := <-errs:
		b.Fatal(err)
	case <-ctx.Done():
		b.Fatalf("only %d of %d requests reached the connector within %s", len(t.start)-int(t.left.Load()), len(t.start), pipelineDeadline)
	}
	elapsed := time.Since(begin)
	wg.Wait()
	return elapsed
}

func (t *tracker) latencies() []time.Duration {
	out := make([]time.Duration, len(t.lat))
	for i := range t.lat {
		out[i] = time.Duration(t.lat[i].Load())
	}
	return out
}

func pipelineQuantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q))]
}

func pipelineMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
