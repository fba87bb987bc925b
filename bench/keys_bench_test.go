package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// BenchmarkBucketKeys measures a read of every key of a bucket of 20,000
// keys (the workflow runs' bucket, records of about 200 bytes), as the
// run list, the index of runs in flight and the counts read it: bus.Keys
// and bus.Latest (the server's index of the keys, then a watch, then a
// Get of each key the watch had not handed out) beside nats.go's
// ListKeys, the baseline that misses keys while they are written
// (bus/kvread.go), in the same run. Each op is one whole read; no key is
// written meanwhile.
//
//	go test -run '^$' -bench BucketKeys -count 3 ./bench/
func BenchmarkBucketKeys(b *testing.B) {
	const keys = 20_000
	bb := bustest.New(b)
	ctx := b.Context()
	js := bb.JetStream()
	rec := fmt.Sprintf(`{"workflow":"other","status":"done","steps":{},"cause":{"kind":"manual"},"created_at":%q}`, time.Now().UTC().Format(time.RFC3339))
	for i := range keys {
		if _, err := js.PublishAsync(fmt.Sprintf("$KV.%s.run%05d", bus.BucketWorkflowRuns, i), []byte(rec)); err != nil {
			b.Fatal(err)
		}
		bustest.Throttle(b, js)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("the keys were not stored within a minute")
	}
	kv := bb.WorkflowRuns
	count := func(b *testing.B, n int, err error) {
		if err != nil {
			b.Fatal(err)
		}
		if n != keys {
			b.Fatalf("read %d keys, want %d", n, keys)
		}
	}
	b.Run("nats.go-ListKeys", func(b *testing.B) {
		for b.Loop() {
			l, err := kv.ListKeys(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for range l.Keys() {
				n++
			}
			count(b, n, nil)
		}
	})
	b.Run("bus.Keys", func(b *testing.B) {
		for b.Loop() {
			k, err := bb.Keys(ctx, kv, ">")
			count(b, len(k), err)
		}
	})
	b.Run("nats.go-WatchAll-values", func(b *testing.B) {
		for b.Loop() {
			w, err := kv.WatchAll(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for e := range w.Updates() {
				if e == nil {
					break
				}
				n++
			}
			_ = w.Stop()
			for range w.Updates() { // drained: see bus.Latest
			}
			count(b, n, nil)
		}
	})
	b.Run("bus.Latest-values", func(b *testing.B) {
		for b.Loop() {
			m, err := bb.Latest(ctx, kv, ">", false)
			count(b, len(m), err)
		}
	})
}
