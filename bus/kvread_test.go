package bus_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus/bustest"
)

var kept = []string{"k0", "k1", "k2", "k3", "k4"}

// churn writes the keys of kept without pause, and a key that comes and
// goes, until the test's round is over; it returns the stop.
func churn(t *testing.T, kv jetstream.KeyValue) func() {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	for _, k := range kept {
		if _, err := kv.PutString(ctx, k, "first"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.PutString(ctx, "gone", "x"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			_, _ = kv.PutString(ctx, kept[i%len(kept)], fmt.Sprint("v", i))
			_, _ = kv.PutString(ctx, "comes-and-goes", "x")
			_ = kv.Delete(ctx, "comes-and-goes")
		}
	})
	return func() { stop.Store(true); wg.Wait() }
}

// Latest and Keys return every key that holds a value while the keys are
// written without pause (where the client's ListKeys missed keys in most
// calls), and never a deleted one.
func TestLatestWhileKeysAreWritten(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx := t.Context()
	for _, kv := range []jetstream.KeyValue{b.State, b.Jobs} { // one revision kept; five
		if m, err := b.Latest(ctx, kv, ">", false); err != nil || len(m) != 0 {
			t.Fatalf("Latest(%s, empty) = %v, %v; want none", kv.Bucket(), m, err)
		}
		stop := churn(t, kv)
		for i := range 300 {
			m, err := b.Latest(ctx, kv, ">", false)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range kept {
				if e := m[k]; e == nil || e.Operation() != jetstream.KeyValuePut || len(e.Value()) == 0 {
					t.Fatalf("%s, round %d: Latest has %s = %v; want its value (%d keys)", kv.Bucket(), i, k, e, len(m))
				}
			}
			if m["gone"] != nil {
				t.Fatalf("%s: Latest has the deleted key", kv.Bucket())
			}
			keys, err := b.Keys(ctx, kv, ">")
			if err != nil {
				t.Fatal(err)
			}
			keys = slices.DeleteFunc(keys, func(k string) bool { return k == "comes-and-goes" })
			if !slices.Equal(keys, kept) {
				t.Fatalf("%s, round %d: Keys = %v; want %v", kv.Bucket(), i, keys, kept)
			}
		}
		stop()
		m, err := b.Latest(ctx, kv, "k1", false)
		if err != nil || len(m) != 1 || m["k1"] == nil {
			t.Fatalf("Latest(%s, k1) = %v, %v; want k1 alone", kv.Bucket(), m, err)
		}
	}
}

// Follow says loaded only once it has applied every key, while the keys
// are written without pause, and returns nil when its context ends. (A
// watch's own early end comes less often here than in
// TestLoadingWaitsForEveryKey, which tests Loading itself.)
func TestFollowLoadsEveryKey(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	stop := churn(t, b.State)
	defer stop()
	for i := range 100 {
		ctx, cancel := context.WithCancel(t.Context())
		var mu sync.Mutex
		applied := map[string]bool{}
		loaded := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- b.Follow(ctx, b.State, ">", loaded, func(u jetstream.KeyValueEntry) {
				mu.Lock()
				applied[u.Key()] = true
				mu.Unlock()
			})
		}()
		select {
		case <-loaded:
		case err := <-errc:
			t.Fatalf("round %d: Follow = %v before loaded", i, err)
		case <-time.After(time.Minute):
			t.Fatalf("round %d: not loaded within a minute", i)
		}
		mu.Lock()
		seen := maps.Clone(applied)
		mu.Unlock()
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("round %d: Follow after its context ended = %v, want nil", i, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("round %d: Follow did not return within a minute of its context's end", i)
		}
		for _, k := range kept {
			if !seen[k] {
				t.Fatalf("round %d: loaded without %s (saw %v)", i, k, seen)
			}
		}
	}
}

// A watch's Loading says loaded only once the watch has handed out every
// key, while the keys are written without pause.
func TestLoadingWaitsForEveryKey(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx := t.Context()
	stop := churn(t, b.State)
	defer stop()
	for i := range 300 {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		l, err := b.Loading(ctx, b.State, ">")
		if err != nil {
			t.Fatal(err)
		}
		w, err := b.State.WatchAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for loaded := false; !loaded; {
			var u jetstream.KeyValueEntry
			select {
			case u = <-w.Updates():
			case <-ctx.Done():
				t.Fatalf("round %d: not loaded within a minute (saw %v)", i, seen)
			}
			if u != nil {
				seen[u.Key()] = true
			}
			if loaded, err = l.Saw(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
		_ = w.Stop()
		for _, k := range kept {
			if !seen[k] {
				t.Fatalf("round %d: loaded without %s (saw %v)", i, k, seen)
			}
		}
	}
}
