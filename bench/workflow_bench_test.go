package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/workflow"
)

// workflowSteps is the number of no-op tool steps of the benchmark's
// workflow.
const workflowSteps = 5

// BenchmarkWorkflow measures the workflow engine on an embedded server
// with fsync on every write: each op is one run of a workflow of 5 no-op
// tool steps, started with Engine.Start (4 starters), carried out by the
// engine (4 handlers at once); the op ends with the run's done event.
// It reports step transitions per second and bus writes per step (every
// stream's and bucket's sequences before and after: the run's KV writes,
// its start command and its events).
//
// Beside it, in the same run and on the same kind of server,
// jetstream-same-writes does what the engine writes with no engine code:
// per run a KV create and a command publish; a consumer (4 at once) that
// reads the key, and for the run's start, each step and the cleanup
// updates the key at its revision and publishes the events (started,
// step_started and step_finished per step, done), then acks.
//
//	go test -run '^$' -bench Workflow -benchtime 1000x -count 1 ./bench/
func BenchmarkWorkflow(b *testing.B) {
	systems := []struct {
		name  string
		start func(b *testing.B, bb *bus.Bus, done func()) (start func(ctx context.Context, i int) error)
	}{
		{"engine", startEngine},
		{"jetstream-same-writes", startSameRunWrites},
	}
	for _, sys := range systems {
		b.Run(sys.name, func(b *testing.B) {
			bb := bustest.New(b)
			if bb.Config().SyncInterval != 0 {
				b.Fatal("the benchmark must run with fsync on every write")
			}
			var ended atomic.Int64
			all := make(chan struct{})
			start := sys.start(b, bb, func() {
				if ended.Add(1) == int64(b.N) {
					close(all)
				}
			})
			before := writes(b, bb)
			b.ResetTimer()
			began := time.Now()
			next := atomic.Int64{}
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), pipelineDeadline)
			defer cancel()
			for range pipelineWorkers {
				wg.Go(func() {
					for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
						if err := start(ctx, i); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			select {
			case <-all:
			case <-ctx.Done():
				b.Fatalf("%d of %d runs ended within %s", ended.Load(), b.N, pipelineDeadline)
			}
			elapsed := time.Since(began)
			b.StopTimer()
			after := settledWrites(b, bb)
			steps := float64(b.N * workflowSteps)
			b.ReportMetric(steps/elapsed.Seconds(), "steps/s")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "runs/s")
			b.ReportMetric(float64(after-before)/steps, "writes/step")
		})
	}
}

type noopArgs struct {
	N int `json:"n"`
}

// startEngine runs an engine on bb with a workflow of no-op tool steps.
func startEngine(b *testing.B, bb *bus.Bus, done func()) func(context.Context, int) error {
	var src strings.Builder
	src.WriteString("noop:\n  inputs: {n: {type: integer, required: true}}\n  steps:\n")
	for s := 1; s <= workflowSteps; s++ {
		fmt.Fprintf(&src, "    - {id: s%d, tool: noop, args: {n: \"${{ inputs.n }}\"}}\n", s)
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src.String()), &n); err != nil {
		b.Fatal(err)
	}
	set, err := workflow.Decode(&n, "workflows")
	if err != nil {
		b.Fatal(err)
	}
	if err := set.Validate(workflow.Options{}); err != nil {
		b.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.Func("noop", "does nothing", func(context.Context, noopArgs) (string, error) { return "ok", nil }))
	if err != nil {
		b.Fatal(err)
	}
	sub, err := bb.Conn().Subscribe(bb.Subjects.Event(bus.SourceWorkflow, "done"), func(*nats.Msg) { done() })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	e := workflow.NewEngine(bb, workflow.Config{Definitions: set, Tools: []tools.Source{reg}, Concurrency: pipelineWorkers})
	background(b, e.Run)
	return func(ctx context.Context, i int) error {
		_, _, err := e.Start(ctx, "noop", map[string]any{"n": i}, workflow.StartOptions{})
		return err
	}
}

// runRecord is about the size of a stored run of the engine's workflow
// (its definition snapshot, inputs, steps' states and outbox).
var runRecord = make([]byte, 2500)

// startSameRunWrites is the engine's writes on raw JetStream (see
// BenchmarkWorkflow).
func startSameRunWrites(b *testing.B, bb *bus.Bus, done func()) func(context.Context, int) error {
	kv := baselineStreams(b, bb)
	js := bb.JetStream()
	pub := func(ctx context.Context, subject, id string) error {
		m := &nats.Msg{Subject: subject, Data: payload, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, id)
		_, err := js.PublishMsg(ctx, m)
		return err
	}
	consume(b, bb, baseRequests, "workflow", func(ctx context.Context, m jetstream.Msg) error {
		key := "run." + m.Headers().Get("Bench-I")
		ent, err := kv.Get(ctx, key)
		if err != nil {
			return err
		}
		rev := ent.Revision()
		update := func() error {
			rev, err = kv.Update(ctx, key, runRecord, rev)
			return err
		}
		if err := update(); err != nil { // started, s1's effects in the outbox
			return err
		}
		if err := pub(ctx, "bench.event.workflow.started", key+".started"); err != nil {
			return err
		}
		for s := 1; s <= workflowSteps; s++ {
			id := key + ".s" + strconv.Itoa(s)
			if err := pub(ctx, "bench.event.workflow.step_started", id+".started"); err != nil {
				return err
			}
			if err := update(); err != nil { // the step's result, the next step's effects
				return err
			}
			if err := pub(ctx, "bench.event.workflow.step_finished", id+".finished"); err != nil {
				return err
			}
		}
		if err := pub(ctx, "bench.event.workflow.done", key+".done"); err != nil {
			return err
		}
		if err := update(); err != nil { // the cleanup
			return err
		}
		if err := m.DoubleAck(ctx); err != nil {
			return err
		}
		done()
		return nil
	})
	return func(ctx context.Context, i int) error {
		key := "run." + strconv.Itoa(i)
		if _, err := kv.Create(ctx, key, runRecord); err != nil {
			return err
		}
		m := &nats.Msg{Subject: "bench.request.workflow.start", Data: payload[:300], Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, key+".start")
		m.Header.Set("Bench-I", strconv.Itoa(i))
		_, err := js.PublishMsg(ctx, m)
		return err
	}
}
