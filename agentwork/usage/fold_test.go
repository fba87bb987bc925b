package usage

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitTimeout = 20 * time.Second

var day = time.Date(2026, 3, 14, 23, 30, 0, 0, time.UTC)

// publishRun publishes the event of a run of source/name on mdl that used
// in/out tokens, with its own message id.
func publishRun(t *testing.T, b *bus.Bus, source, name, mdl string, in, out int, at time.Time) {
	t.Helper()
	res := agentwork.Result{Source: source, Name: name, Outcome: bus.OutcomeDone, Model: mdl, Usage: &model.Usage{InputTokens: in, OutputTokens: out}}
	ev, err := bus.NewEvent("test", bus.TypeOf(source, bus.OutcomeDone), name, at, res)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(t.Context(), b.Subjects.Event(source, bus.OutcomeDone), ev, ev.ID); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// runFolder runs f until the test ends.
func runFolder(t *testing.T, f *Folder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Folder.Run() = %v", err)
		}
	})
}

// waitSettled waits until the usage consumer has handed out and settled
// every run event: nothing pending, nothing unacked.
func waitSettled(t *testing.T, b *bus.Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	// The records change with every flush: wait on their changes, and
	// look at the consumer after each.
	w, err := b.Usage.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	tick := time.NewTicker(50 * time.Millisecond) // the last ack follows the last write
	defer tick.Stop()
	for {
		c, err := b.JetStream().Consumer(ctx, bus.StreamEvents, ConsumerName)
		if err == nil {
			info := c.CachedInfo()
			if info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 && info.Delivered.Stream > 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("usage consumer not settled: %v", ctx.Err())
		case <-w.Updates():
		case <-tick.C:
		}
	}
}

func query(t *testing.T, b *bus.Bus, f Filter) []Record {
	t.Helper()
	got, err := Query(t.Context(), b, f)
	if err != nil {
		t.Fatalf("Query(%+v) = %v", f, err)
	}
	return got
}

// TestFoldTwoInstances: two instances sharing the consumer count each run
// once, per day, source, name and model.
func TestFoldTwoInstances(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	other := bustest.Client(t, b)
	runFolder(t, NewFolder(b, FolderConfig{Concurrency: 4}))
	runFolder(t, NewFolder(other, FolderConfig{Concurrency: 4}))
	for i := range 40 {
		publishRun(t, b, bus.SourceCron, "digest", "gpt-4.1", 400, 100, day)
		if i%4 == 0 {
			publishRun(t, b, bus.SourceHeartbeat, "default", "llama3:8b", 10, 1, day.Add(time.Hour)) // the next UTC day
		}
	}
	waitSettled(t, b)
	got := query(t, b, Filter{})
	want := []Record{
		{Day: "2026-03-15", Source: "heartbeat", Name: "default", Model: "llama3:8b", Runs: 10, InputTokens: 100, OutputTokens: 10},
		{Day: "2026-03-14", Source: "cron", Name: "digest", Model: "gpt-4.1", Runs: 40, InputTokens: 16000, OutputTokens: 4000},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Query() =\n%+v\nwant\n%+v", got, want)
	}
	bySource := query(t, b, Filter{By: []string{BySource}, Source: "cron"})
	if len(bySource) != 1 || bySource[0].Total() != 20000 || bySource[0].Day != "" {
		t.Errorf("Query(by source, cron) = %+v, want one row of 20000 tokens", bySource)
	}
	since := query(t, b, Filter{Since: day.Add(2 * time.Hour)})
	if len(since) != 1 || since[0].Source != "heartbeat" {
		t.Errorf("Query(since the 15th) = %+v, want the heartbeat's row only", since)
	}
}

// TestFoldRedelivered: events folded and then handed out again (their ack
// lost) are not counted again, whichever instance gets them.
func TestFoldRedelivered(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	other := bustest.Client(t, b)
	var mu sync.Mutex
	redelivered := 0
	// The first instance folds every event and then does not ack it: as
	// if it died after the write. JetStream hands the events out again.
	first := NewFolder(b, FolderConfig{Concurrency: 2})
	first.wrap = func(h bus.Handler) bus.Handler {
		return func(ctx context.Context, m jetstream.Msg) bus.Verdict {
			v := h(ctx, m)
			if md, err := m.Metadata(); err == nil && md.NumDelivered == 1 && v.Kind() == bus.VerdictDone {
				return bus.Retry(0)
			}
			mu.Lock()
			redelivered++
			mu.Unlock()
			return v
		}
	}
	runFolder(t, first)
	runFolder(t, NewFolder(other, FolderConfig{Concurrency: 2}))
	for range 10 {
		publishRun(t, b, bus.SourceCron, "digest", "m", 400, 0, day)
	}
	waitSettled(t, b)
	got := query(t, b, Filter{})
	if len(got) != 1 || got[0].Runs != 10 || got[0].InputTokens != 4000 {
		t.Errorf("Query() = %+v, want 10 runs, 4000 input tokens", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if redelivered == 0 {
		t.Error("the first instance saw no event again: the test did not redeliver")
	}
}

// TestFoldOnce: fold itself adds an event at most once: again in the same
// record (its sequence kept), and below the record's floor.
func TestFoldOnce(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx := t.Context()
	mk := func(seq uint64) *entry {
		return &entry{rec: Record{Day: "2026-03-14", Source: "cron", Name: "j", Model: "m", Runs: 1, InputTokens: 400}, seq: seq}
	}
	key := Key("2026-03-14", "cron", "j", "m")
	steps := []struct {
		seqs  []uint64
		floor uint64
	}{
		{[]uint64{3, 5}, 0},
		{[]uint64{5, 3}, 0}, // both again
		{[]uint64{7}, 5},    // new; floor up to 5
		{[]uint64{4, 7}, 5}, // 4 is below the floor, 7 known
	}
	for _, s := range steps {
		var es []*entry
		for _, q := range s.seqs {
			es = append(es, mk(q))
		}
		if err := fold(ctx, b.Usage, key, es, s.floor); err != nil {
			t.Fatal(err)
		}
	}
	e, err := b.Usage.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := string(e.Value())
	want := `{"day":"2026-03-14","source":"cron","name":"j","model":"m","runs":3,"input_tokens":1200,"output_tokens":0,"floor":5,"seqs":[7]}`
	if got != want {
		t.Errorf("record = %s\nwant %s", got, want)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	got := Key("2026-03-14", "cron", "a.b", "llama3:8b")
	if want := "2026-03-14.cron.a=2Eb.llama3=3A8b"; got != want {
		t.Errorf("Key() = %q, want %q", got, want)
	}
}

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{"7d": "2026-03-08", "1d": "2026-03-14", "36h": "2026-03-12", "": "0001-01-01"} {
		got, err := ParseSince(in, now)
		if err != nil || got.Format(DayLayout) != want {
			t.Errorf("ParseSince(%q) = %s, %v, want %s", in, got.Format(DayLayout), err, want)
		}
	}
	for _, in := range []string{"0d", "-1d", "7x", "d"} {
		if _, err := ParseSince(in, now); err == nil {
			t.Errorf("ParseSince(%q) = nil error, want one", in)
		}
	}
}
