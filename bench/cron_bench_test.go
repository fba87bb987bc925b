// Package bench measures agentwork beside baselines measured in the same
// run. The figures and the commands that produced them are in docs/.
package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rcron "github.com/robfig/cron/v3"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers/cron"
)

const (
	cronJobs    = 100_000 // jobs loaded
	cronFiring  = 1_000   // of which fire every 2s during the measurement
	cronMeasure = 6 * time.Second
	cronStop    = 4 * time.Second // how long the scheduler is stopped before the restart
)

// cronSpecs returns the schedules: cronFiring jobs fire every two seconds;
// the others are daily at hours that do not come up during the run.
func cronSpecs(now time.Time) []string {
	specs := make([]string, cronJobs)
	for i := range specs {
		if i < cronFiring {
			specs[i] = "*/2 * * * * *"
			continue
		}
		h := (now.UTC().Hour() + 2 + i%20) % 24
		specs[i] = fmt.Sprintf("%d %d %d * * *", i%60, (i/60)%60, h)
	}
	return specs
}

// heapOf returns the live heap that code whose function names start with
// prefix allocated (anywhere in the allocation's stack), from the heap
// profile after a collection, each sample scaled as pprof scales it.
// BenchmarkCron100k samples every 64 KiB on average (the default 512 KiB
// leaves a few dozen samples for 20 MB).
func heapOf(prefix string) uint64 {
	runtime.GC()
	runtime.GC() // the profile is as of the last completed collection
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	var total float64
	for _, r := range recs {
		objs, bytes := r.InUseObjects(), r.InUseBytes()
		if objs <= 0 || !stackHas(r.Stack(), prefix) {
			continue
		}
		avg := float64(bytes) / float64(objs)
		total += float64(bytes) / (1 - math.Exp(-avg/rate))
	}
	return uint64(total)
}

// stackHas reports whether a function of stack starts with prefix.
func stackHas(stack []uintptr, prefix string) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, prefix) {
			return true
		}
		if !more {
			return false
		}
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkCron100k loads 100,000 cron jobs into agentwork's scheduler
// (on an embedded bus) and into robfig/cron's own runner, and reports for
// each: start-up time, heap held per job, and the lateness of 1,000 jobs
// firing together every two seconds. Run it once: -benchtime=1x.
func BenchmarkCron100k(b *testing.B) {
	runtime.MemProfileRate = 64 << 10 // for heapOf
	for range b.N {
		now := time.Now()
		specs := cronSpecs(now)
		aw := benchAgentwork(b, specs)
		rb := benchRobfig(b, specs)
		b.ReportMetric(ms(aw.cold), "aw-cold-start-ms")
		b.ReportMetric(ms(aw.coldArmed), "aw-cold-armed-ms")
		b.ReportMetric(float64(aw.coldWrites)/cronJobs, "aw-cold-writes/job")
		b.ReportMetric(float64(len(aw.passLate)), "aw-pass-fires")
		b.ReportMetric(ms(percentile(aw.passLate, 0.50)), "aw-pass-late-p50-ms")
		b.ReportMetric(ms(percentile(aw.passLate, 0.99)), "aw-pass-late-p99-ms")
		b.ReportMetric(ms(aw.start), "aw-restart-ms")
		b.ReportMetric(ms(aw.startArmed), "aw-restart-armed-ms")
		b.ReportMetric(float64(aw.heap)/cronJobs, "aw-heap-B/job")
		b.ReportMetric(ms(percentile(aw.late, 0.50)), "aw-late-p50-ms")
		b.ReportMetric(ms(percentile(aw.late, 0.99)), "aw-late-p99-ms")
		b.ReportMetric(ms(percentile(aw.lateFirst, 0.99)), "aw-late-first-round-p99-ms")
		b.ReportMetric(ms(percentile(aw.lateAfter, 0.50)), "aw-late-after-p50-ms")
		b.ReportMetric(ms(percentile(aw.lateAfter, 0.99)), "aw-late-after-p99-ms")
		b.ReportMetric(float64(len(aw.late)), "aw-fires")
		b.ReportMetric(float64(aw.twice), "aw-fired-twice")
		b.ReportMetric(float64(aw.caughtUp), "aw-caught-up")
		b.ReportMetric(float64(aw.missed), "aw-missed")
		b.ReportMetric(ms(percentile(aw.stopHandled, 0)), "aw-stop-handled-first-ms")
		b.ReportMetric(ms(percentile(aw.stopHandled, 0.50)), "aw-stop-handled-p50-ms")
		b.ReportMetric(ms(aw.nextTick), "aw-next-tick-ms")
		b.ReportMetric(ms(rb.start), "robfig-start-ms")
		b.ReportMetric(float64(rb.heap)/cronJobs, "robfig-heap-B/job")
		b.ReportMetric(ms(percentile(rb.late, 0.50)), "robfig-late-p50-ms")
		b.ReportMetric(ms(percentile(rb.late, 0.99)), "robfig-late-p99-ms")
		b.ReportMetric(float64(len(rb.late)), "robfig-fires")
	}
}

type cronResult struct {
	cold, start time.Duration
	// Until every timer was armed (Scheduler.Armed).
	coldArmed, startArmed time.Duration
	// Stored writes of the cold start: the jobs and state buckets' and
	// the timers stream's sequences.
	coldWrites uint64
	heap       uint64
	late       []time.Duration
	// late of the first round of ticks after ready, and of the rounds after
	lateFirst, lateAfter []time.Duration
	twice                int // ticks reported fired more than once
	// Ticks due while the scheduler was stopped: fired (caught up) and
	// recorded missed, after the restart.
	caughtUp, missed int
	// When after the restart began the stop's ticks were handled (their
	// stored fires), and when the first tick after it was due: a job
	// whose stored fire is handled after that tick is due runs that tick
	// and records both of the stop's missed (run_once), one handled
	// before it runs the stop's latest tick.
	stopHandled []time.Duration
	nextTick    time.Duration
	// Lateness of the ticks due during the cold start's arming pass.
	passLate []time.Duration
}

func benchAgentwork(b *testing.B, specs []string) cronResult {
	b.Helper()
	// fsync batched (sync_interval) so that writing 100,000 jobs takes
	// seconds; with the default (fsync every write) writes run at ~3k/s.
	bb := bustest.New(b, func(c *bus.Config) { c.SyncInterval = time.Minute })
	cfg := cron.Config{Jobs: make([]cron.Job, len(specs))}
	for i, s := range specs {
		cfg.Jobs[i] = cron.Job{ID: fmt.Sprintf("job-%06d", i), Schedule: s, Prompt: "p"}
	}
	var res cronResult

	// Cold start: the bucket is empty, the scheduler writes every job.
	seq0 := streamSeqs(b, bb)
	var coldMu sync.Mutex
	var coldFired []cron.TickResult
	coldObserve := func(r cron.TickResult) {
		if r.What == "fired" {
			coldMu.Lock()
			coldFired = append(coldFired, r)
			coldMu.Unlock()
		}
	}
	start := time.Now()
	stop := runScheduler(b, bb, cfg, coldObserve, &res.cold, &res.coldArmed, start)
	stop()
	// The ticks due while the cold start's pass armed the timers: the
	// firing jobs' timers are armed first (soonest tick first), and they
	// fire while the pass arms the rest.
	coldMu.Lock()
	for _, r := range coldFired {
		if r.Tick.After(start.Add(res.cold)) && r.Tick.Before(start.Add(res.coldArmed)) {
			res.passLate = append(res.passLate, r.At.Sub(r.Tick))
		}
	}
	coldMu.Unlock()
	res.coldWrites = streamSeqs(b, bb) - seq0
	// A few seconds' stop: the ticks due meanwhile are caught up per the
	// jobs' policy (run_once: one run each, the rest recorded missed)
	// while the ticks due after the restart are measured.
	stopped := time.Now()
	time.Sleep(cronStop)

	// Restart: the jobs are in the bucket; load them and fire.
	var mu sync.Mutex
	var ready, restarted time.Time
	seen := map[string]bool{}
	observe := func(r cron.TickResult) {
		mu.Lock()
		from, restarted := ready, restarted
		mu.Unlock()
		// Only ticks due after start-up: the ones missed while stopped are
		// caught up late by design.
		if r.Tick.After(stopped) && r.Tick.Before(restarted) {
			mu.Lock()
			switch r.What {
			case "fired":
				res.caughtUp++
			case "missed":
				res.missed++
			}
			res.stopHandled = append(res.stopHandled, r.At.Sub(restarted))
			mu.Unlock()
		}
		if r.What == "fired" && !from.IsZero() && r.Tick.After(from) {
			mu.Lock()
			k := r.Job + "@" + r.Tick.String()
			if seen[k] {
				res.twice++
			}
			seen[k] = true
			res.late = append(res.late, r.At.Sub(r.Tick))
			// The first round after ready shares the bus with the stop's
			// catch-up; the rounds after it do not.
			if r.Tick.After(from.Truncate(2 * time.Second).Add(2 * time.Second)) {
				res.lateAfter = append(res.lateAfter, r.At.Sub(r.Tick))
			} else {
				res.lateFirst = append(res.lateFirst, r.At.Sub(r.Tick))
			}
			mu.Unlock()
		}
	}
	start = time.Now()
	mu.Lock()
	restarted = start
	res.nextTick = restarted.Truncate(2 * time.Second).Add(2 * time.Second).Sub(restarted)
	mu.Unlock()
	stop = runScheduler(b, bb, cfg, observe, &res.start, &res.startArmed, start)
	// What the scheduler holds: the live heap its own code allocated (not
	// the bus's, nor the config's jobs, which the bench built).
	res.heap = heapOf("github.com/agentwork/agentwork/triggers/cron.")
	mu.Lock()
	ready = time.Now()
	mu.Unlock()
	time.Sleep(cronMeasure) // the measurement window: let ticks happen
	stop()
	mu.Lock()
	defer mu.Unlock()
	res.late = slices.Clone(res.late)
	res.lateFirst, res.lateAfter = slices.Clone(res.lateFirst), slices.Clone(res.lateAfter)
	res.stopHandled = slices.Clone(res.stopHandled)
	return res
}

// streamSeqs sums the last sequences of the streams the scheduler writes
// at start.
func streamSeqs(b *testing.B, bb *bus.Bus) uint64 {
	b.Helper()
	var n uint64
	for _, name := range []string{"KV_" + bus.BucketJobs, "KV_" + bus.BucketState, bus.StreamTimers} {
		st, err := bb.JetStream().Stream(context.Background(), name)
		if err != nil {
			b.Fatal(err)
		}
		info, err := st.Info(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		n += info.State.LastSeq
	}
	return n
}

// runScheduler runs a scheduler until it is started (ready: *ready is
// how long since t0) and its timers are armed (*armed; the same where
// the scheduler has no Armed).
func runScheduler(b *testing.B, bb *bus.Bus, cfg cron.Config, observe func(cron.TickResult), ready, armed *time.Duration, t0 time.Time) (stop func()) {
	b.Helper()
	opts := []cron.Option{}
	if observe != nil {
		opts = append(opts, cron.WithTickObserver(observe))
	}
	s, err := cron.New(bb, cfg, opts...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Started():
	case err := <-done:
		b.Fatalf("scheduler: %v", err)
	case <-time.After(2 * time.Minute):
		b.Fatal("scheduler not ready after 2m")
	}
	*ready = time.Since(t0)
	select {
	case <-s.Armed():
	case err := <-done:
		b.Fatalf("scheduler: %v", err)
	case <-time.After(2 * time.Minute):
		b.Fatal("timers not armed after 2m")
	}
	*armed = time.Since(t0)
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

func benchRobfig(b *testing.B, specs []string) cronResult {
	b.Helper()
	var res cronResult
	var mu sync.Mutex
	start := time.Now()
	c := rcron.New(rcron.WithSeconds())
	for i, s := range specs {
		var fn func()
		if i < cronFiring {
			fn = func() {
				now := time.Now()
				tick := now.Truncate(2 * time.Second)
				mu.Lock()
				res.late = append(res.late, now.Sub(tick))
				mu.Unlock()
			}
		} else {
			fn = func() {}
		}
		if _, err := c.AddFunc(s, fn); err != nil {
			b.Fatal(err)
		}
	}
	c.Start()
	res.start = time.Since(start)
	mu.Lock()
	res.late = res.late[:0]
	mu.Unlock()
	res.heap = heapOf("github.com/robfig/cron/v3.") // as agentwork's
	time.Sleep(cronMeasure)
	<-c.Stop().Done()
	mu.Lock()
	defer mu.Unlock()
	res.late = slices.Clone(res.late)
	return res
}
