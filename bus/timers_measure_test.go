package bus_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// The measurements behind docs/BENCHMARKS.md ("Timers"). They take minutes
// and want a quiet machine, so they run only when asked:
//
//	AGENTWORK_TIMERS_MEASURE=1 go test -run '^TestTimersMeasure' -v -timeout 30m ./bus/
//
// Each logs its figures; it fails only when a timer is lost or fires twice.
func measuring(t *testing.T) {
	t.Helper()
	if os.Getenv("AGENTWORK_TIMERS_MEASURE") == "" {
		t.Skip("set AGENTWORK_TIMERS_MEASURE=1 to run the timer measurements")
	}
}

const measureTimers = 100_000

// rss returns the process's resident and peak resident memory in MiB
// (server and client share the process), or zeros where /proc is missing.
func rss() (now, peak float64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb float64
		if _, err := fmt.Sscanf(sc.Text(), "VmRSS: %f kB", &kb); err == nil {
			now = kb / 1024
		}
		if _, err := fmt.Sscanf(sc.Text(), "VmHWM: %f kB", &kb); err == nil {
			peak = kb / 1024
		}
	}
	return now, peak
}

// quantiles formats p50, p99 and max of ds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		return s[min(len(s)-1, int(p*float64(len(s))))].Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("p50 %v, p99 %v, max %v (n=%d)", q(0.50), q(0.99), s[len(s)-1].Round(100*time.Microsecond), len(s))
}

// durable creates a durable consumer of every fired timer, as the
// runtime's worker will.
func durable(t *testing.T, b *bus.Bus, name string) jetstream.Consumer {
	t.Helper()
	cons, err := b.JetStream().CreateOrUpdateConsumer(t.Context(), bus.StreamTimers, jetstream.ConsumerConfig{
		Durable: name, FilterSubject: b.Subjects.TimersFired(), AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxAckPending: 20_000,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// (d) 100,000 timers: arm them (Set, 64 concurrent callers), hold them
// pending, fire them spread over 60 whole seconds (~1,700 a second), each
// exactly once; with fsync on every write (the default) and batched
// (sync_interval 1m). Baseline: the same schedules published with raw
// JetStream async publishes (nats.go WithScheduleAt, 4,000 in flight) on a
// fresh server.
func TestTimersMeasure100k(t *testing.T) {
	measuring(t)
	for _, v := range []struct {
		name string
		sync time.Duration
	}{{"fsync always", 0}, {"fsync batched", time.Minute}} {
		t.Run(v.name, func(t *testing.T) { measure100k(t, v.sync) })
	}
}

func measure100k(t *testing.T, syncInterval time.Duration) {
	withSync := func(c *bus.Config) { c.SyncInterval = syncInterval }
	{
		b := bustest.New(t, withSync)
		js := b.JetStream()
		start := time.Now()
		for i := range measureTimers {
			if _, err := js.PublishAsync(strings.TrimSuffix(b.Subjects.TimersPending(), ">")+fmt.Sprintf("raw.%d", i), nil,
				jetstream.WithScheduleAt(time.Now().Add(24*time.Hour)), jetstream.WithScheduleTarget(b.Subjects.TimerFired(fmt.Sprintf("raw.%d", i)))); err != nil {
				t.Fatal(err)
			}
			if js.PublishAsyncPending() >= 4000 {
				<-js.PublishAsyncComplete()
			}
		}
		<-js.PublishAsyncComplete()
		t.Logf("baseline: raw JetStream async publish of %d schedules: %v", measureTimers, time.Since(start).Round(time.Millisecond))
		_ = b.Close()
	}
	runtime.GC()
	rss0, _ := rss()

	b := bustest.New(t, withSync)
	tm := bus.NewTimers(b)
	base := time.Now().Truncate(time.Second).Add(75 * time.Second)
	due := func(i int) time.Time { return base.Add(time.Duration(i%60) * time.Second) }
	armed := armAll(t, tm, measureTimers, 64, func(i int) string { return fmt.Sprintf("m.%d", i) }, due)
	if time.Now().After(base) {
		t.Fatalf("arming took %v, past the first due time", armed)
	}
	runtime.GC()
	rssArmed, _ := rss()
	t.Logf("Set of %d timers (64 callers): %v (%.0f/s); RSS %.0f MiB before, %.0f MiB with them pending",
		measureTimers, armed.Round(time.Millisecond), float64(measureTimers)/armed.Seconds(), rss0, rssArmed)

	got := consumeFired(t, b, durable(t, b, "measure"), measureTimers)
	var stored, delivered []time.Duration
	seen := make(map[string]bool, measureTimers)
	timeout := time.After(time.Until(base) + 120*time.Second)
	for len(seen) < measureTimers {
		select {
		case f := <-got:
			if seen[f.Key] {
				t.Errorf("%s fired twice", f.Key)
			}
			seen[f.Key] = true
			stored = append(stored, f.stored.Sub(f.Due))
			delivered = append(delivered, f.got.Sub(f.Due))
		case <-timeout:
			t.Fatalf("%d of %d fired", len(seen), measureTimers)
		}
	}
	now, peak := rss()
	t.Logf("fired %d over 60s: stored after due %s", measureTimers, quantiles(stored))
	t.Logf("fired %d over 60s: consumed after due %s", measureTimers, quantiles(delivered))
	t.Logf("RSS after firing %.0f MiB, peak %.0f MiB", now, peak)
	if last, msgs := lastSeq(t, b); last != 2*measureTimers {
		t.Errorf("stream last sequence %d (%d messages), want %d", last, msgs, 2*measureTimers)
	}
	_ = b.Close()
}

// A burst: 100 and 1,000 timers due at the same instant, with fsync on
// every write and batched. Baseline: as many raw JetStream async publishes
// at once to the requests stream of the same server (what storing that
// many ticks costs when a client publishes them).
func TestTimersMeasureBurst(t *testing.T) {
	measuring(t)
	for _, n := range []int{100, 1000} {
		for _, syncInterval := range []time.Duration{0, time.Minute} {
			measureBurst(t, n, syncInterval)
		}
	}
}

func measureBurst(t *testing.T, n int, syncInterval time.Duration) {
	{
		b := bustest.New(t, func(c *bus.Config) { c.SyncInterval = syncInterval })
		tm := bus.NewTimers(b)
		at := time.Now().Truncate(time.Second).Add(2 * time.Second)
		for i := range n {
			if err := tm.Set(t.Context(), fmt.Sprintf("b.%d", i), at, nil); err != nil {
				t.Fatal(err)
			}
		}
		got := waitFires(t, watchFired(t, b, n), n, time.Minute)
		var stored, consumed []time.Duration
		for _, f := range got {
			stored = append(stored, f.stored.Sub(at))
			consumed = append(consumed, f.got.Sub(at))
		}
		js := b.JetStream()
		start := time.Now()
		var acks []time.Duration
		var futs []jetstream.PubAckFuture
		for i := range n {
			f, err := js.PublishAsync(b.Subjects.Request("task", fmt.Sprint(i)), []byte("{}"))
			if err != nil {
				t.Fatal(err)
			}
			futs = append(futs, f)
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
				acks = append(acks, time.Since(start))
			case err := <-f.Err():
				t.Fatal(err)
			}
		}
		mode := "fsync always"
		if syncInterval > 0 {
			mode = "fsync batched"
		}
		t.Logf("%s: %d timers due together: stored after due %s; consumed %s", mode, n, quantiles(stored), quantiles(consumed))
		t.Logf("%s: baseline: %d raw async publishes at once: acked %s", mode, n, quantiles(acks))
		_ = b.Close()
	}
}

// (d) Restart with 100,000 timers past due: the server stops before they
// are due and starts after; each fires exactly once on recovery. With fsync
// on every write and batched. Open waits for the streams to be provisioned,
// which waits for the backlog (see docs/BENCHMARKS.md), so it gets minutes.
func TestTimersMeasure100kPastDueRestart(t *testing.T) {
	measuring(t)
	for _, v := range []struct {
		name string
		sync time.Duration
	}{{"fsync always", 0}, {"fsync batched", time.Minute}} {
		t.Run(v.name, func(t *testing.T) { measurePastDue(t, v.sync) })
	}
}

func measurePastDue(t *testing.T, syncInterval time.Duration) {
	cfg := bus.Config{DataDir: t.TempDir(), Listen: "off", SyncInterval: syncInterval, ReadyTimeout: 10 * time.Minute}
	open := func() *bus.Bus {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		b, err := bus.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b := open()
	tm := bus.NewTimers(b)
	base := time.Now().Truncate(time.Second).Add(60 * time.Second)
	armed := armAll(t, tm, measureTimers, 64, func(i int) string { return fmt.Sprintf("p.%d", i) },
		func(i int) time.Time { return base.Add(time.Duration(i%10) * time.Second) })
	if last, _ := lastSeq(t, b); last != measureTimers {
		t.Fatalf("%d fires before the stop: arming (%v) ran past the due times", last-measureTimers, armed)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	<-time.After(time.Until(base.Add(10 * time.Second))) // all due while down
	start := time.Now()
	b = open()
	opened := time.Since(start)
	got := consumeFired(t, b, durable(t, b, "measure"), measureTimers)
	seen := make(map[string]bool, measureTimers)
	var first, last time.Time
	timeout := time.After(10 * time.Minute)
	for len(seen) < measureTimers {
		select {
		case f := <-got:
			if seen[f.Key] {
				t.Errorf("%s fired twice", f.Key)
			}
			seen[f.Key] = true
			if first.IsZero() || f.stored.Before(first) {
				first = f.stored
			}
			if f.got.After(last) {
				last = f.got
			}
		case <-timeout:
			t.Fatalf("%d of %d fired", len(seen), measureTimers)
		}
	}
	_, peak := rss()
	t.Logf("%d timers past due at restart: Open took %v; first fire stored %v after Open began, all consumed %v after; RSS peak %.0f MiB",
		measureTimers, opened.Round(time.Millisecond), first.Sub(start).Round(time.Millisecond), last.Sub(start).Round(time.Millisecond), peak)
	if lastSeq, _ := lastSeq(t, b); lastSeq != 2*measureTimers {
		t.Errorf("stream last sequence %d, want %d", lastSeq, 2*measureTimers)
	}
}

// The acceptance case: 100,000 jobs, 1,000 of them every 2 s, re-armed by
// the consumer on each fire with 32 workers (as cron will), the other
// 99,000 pending for next month. Five rounds, a restart of the server, then
// five more. Ticks due before the server is back fire on recovery
// (catch-up); the ticks after are the on-time ticks of the acceptance
// (p99 <= 50 ms). Variants: the 1,000 due on the same even second (as
// `*/2 * * * * *` would be), the same with fsync batched (sync_interval
// 1m), and spread evenly over the 2 s. Baseline: 1,000 Go timers due
// together every 2 s in the process (no NATS).
func TestTimersMeasureAcceptance(t *testing.T) {
	measuring(t)
	const (
		jobs   = 1000
		period = 2 * time.Second
		rounds = 5
	)
	{
		var mu sync.Mutex
		var late []time.Duration
		var wg sync.WaitGroup
		base := time.Now().Truncate(time.Second).Add(2 * time.Second)
		for r := range rounds {
			at := base.Add(time.Duration(r) * period)
			for range jobs {
				wg.Add(1)
				time.AfterFunc(time.Until(at), func() {
					defer wg.Done()
					l := time.Since(at)
					mu.Lock()
					late = append(late, l)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		t.Logf("baseline: Go timers, %d due together every %v: late %s", jobs, period, quantiles(late))
	}
	for _, v := range []struct {
		name   string
		sync   time.Duration
		spread bool
	}{
		{"aligned", 0, false},
		{"aligned, fsync batched", time.Minute, false},
		{"spread", 0, true},
	} {
		t.Run(v.name, func(t *testing.T) {
			measureAcceptance(t, jobs, period, rounds, v.sync, v.spread)
		})
	}
}

type tick struct {
	key              string
	due, stored, got time.Time
}

func measureAcceptance(t *testing.T, jobs int, period time.Duration, rounds int, syncInterval time.Duration, spread bool) {
	dir := t.TempDir()
	open := func() *bus.Bus {
		return bustest.New(t, func(c *bus.Config) { c.DataDir, c.SyncInterval = dir, syncInterval })
	}
	b := open()
	tm := bus.NewTimers(b)
	month := time.Now().Add(30 * 24 * time.Hour)
	armed := armAll(t, tm, measureTimers-jobs, 64, func(i int) string { return fmt.Sprintf("idle.%d", i) }, func(int) time.Time { return month })
	offset := func(j int) time.Duration {
		if !spread {
			return 0
		}
		return time.Duration(j) * period / time.Duration(jobs)
	}
	key := func(j int) string { return fmt.Sprintf("cron.j%d", j) }
	first := time.Now().Truncate(period).Add(2 * period)
	armed += armAll(t, tm, jobs, 64, key, func(j int) time.Time { return first.Add(offset(j)) })
	t.Logf("armed %d timers in %v", measureTimers, armed.Round(time.Millisecond))

	// run consumes ticks on b until every job's next due time is at or
	// after until, re-arming each job one period on.
	run := func(b *bus.Bus, until time.Time) []tick {
		tm := bus.NewTimers(b)
		cons := durable(t, b, "cron")
		var mu sync.Mutex
		var ticks []tick
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		work := make(chan jetstream.Msg, jobs)
		var wg sync.WaitGroup
		var remaining atomic.Int64
		remaining.Store(int64(jobs))
		done := make(chan struct{})
		for range 32 {
			wg.Go(func() {
				for {
					var m jetstream.Msg
					select {
					case m = <-work:
					case <-ctx.Done():
						return
					}
					got := time.Now()
					f, err := tm.DecodeTimer(m.Subject(), m.Data())
					if err != nil {
						t.Error(err)
						continue
					}
					md, _ := m.Metadata()
					mu.Lock()
					ticks = append(ticks, tick{f.Key, f.Due, md.Timestamp, got})
					mu.Unlock()
					if next := f.Due.Add(period); next.Before(until) {
						if err := tm.Set(ctx, f.Key, next, nil); err != nil && ctx.Err() == nil {
							t.Error(err)
						}
					} else if remaining.Add(-1) == 0 {
						close(done)
					}
					_ = m.Ack()
				}
			})
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { work <- m })
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(time.Until(until) + 30*time.Second):
			t.Errorf("the last round did not complete: %d jobs left", remaining.Load())
		}
		cc.Stop()
		cancel()
		wg.Wait()
		return ticks
	}
	report := func(phase string, ticks []tick) {
		var stored, got []time.Duration
		for _, tk := range ticks {
			stored = append(stored, tk.stored.Sub(tk.due))
			got = append(got, tk.got.Sub(tk.due))
		}
		t.Logf("%s: fire stored after due %s", phase, quantiles(stored))
		t.Logf("%s: tick consumed after due %s", phase, quantiles(got))
	}

	all := run(b, first.Add(time.Duration(rounds)*period))
	report("before the restart", all)
	// The last round re-armed nothing: arm the next, two periods out, and
	// stop the server; it falls due while the server is down.
	next := first.Add(time.Duration(rounds+1) * period)
	armAll(t, tm, jobs, 64, key, func(j int) time.Time { return next.Add(offset(j)) })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	<-time.After(time.Until(next) + 500*time.Millisecond)
	restart := time.Now()
	b = open()
	back := time.Now()
	t.Logf("restart: down %v, Open took %v", restart.Sub(next.Add(-500*time.Millisecond)).Round(time.Millisecond), back.Sub(restart).Round(time.Millisecond))
	after := run(b, next.Add(time.Duration(rounds+1)*period))
	var catchUp, onTime []tick
	for _, tk := range after {
		if tk.due.Before(back) {
			catchUp = append(catchUp, tk)
		} else {
			onTime = append(onTime, tk)
		}
	}
	report(fmt.Sprintf("after the restart, %d ticks due before the server was back (catch-up)", len(catchUp)), catchUp)
	report("after the restart, on-time ticks", onTime)
	all = append(all, after...)
	now, peak := rss()
	t.Logf("RSS %.0f MiB, peak %.0f MiB", now, peak)
	seen := map[string]int{}
	for _, tk := range all {
		seen[tk.key+"@"+tk.due.Format(time.RFC3339Nano)]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("%s consumed %d times", id, n)
		}
	}
	if want := jobs * (2*rounds + 1); len(seen) != want {
		t.Errorf("%d ticks consumed, want %d", len(seen), want)
	}
}
