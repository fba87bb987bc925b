package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers/cron"
)

// The offered rates of TestCronDisk (d): jobs due every second, each its
// own config job. Once every timer is armed, fireWarmup's worth of
// requests at the offered rate is stored before the measure, and the
// measure lasts until fireWindow's worth more is (longer when the
// binary does not keep up; at most 3 × fireWindow).
var fireRates = []int{100, 300, 600}

const (
	fireWarmup = 5 * time.Second
	fireWindow = 20 * time.Second
)

// fireProfileEnv names a directory: TestCronDisk (d) then writes a CPU
// profile of the binary over each rate's window there (cpu-<rate>.pprof),
// taken from its AGENTWORK_PPROF listener on loopback.
const fireProfileEnv = "AGENTWORK_CRON_DISK_PROFILE"

// Knobs of (d), for finding what bounds it; unset, the binary's defaults
// and fireRates. fireRunnerEnv is runner.concurrency, fireCronEnv
// cron.concurrency, fireRatesEnv the offered rates ("600,900").
const (
	fireRunnerEnv = "AGENTWORK_CRON_DISK_RUNNER"
	fireCronEnv   = "AGENTWORK_CRON_DISK_CRON"
	fireRatesEnv  = "AGENTWORK_CRON_DISK_RATES"
)

// fireFigures is what one rate of (d) measured over fireWindow.
type fireFigures struct {
	rate                  int
	window                time.Duration  // measured over
	fired, missed         int            // cron requests stored; ticks recorded missed
	done, skipped, failed int            // the cron runs' events
	writes                map[string]int // stored writes per stream
	backlog               uint64         // requests the runner had not settled at the end
	stored, ran           []time.Duration
}

func (f fireFigures) total() int {
	n := 0
	for _, w := range f.writes {
		n += w
	}
	return n
}

// schedulerStreams are where the scheduler writes for a tick (its
// missed events aside); the rest of the writes are the runs'.
var schedulerStreams = []string{bus.StreamRequests, bus.StreamTimers, "KV_" + bus.BucketState}

// perFireRun is the stored writes a fire and its run make: the
// scheduler's writes per tick it handled (fired or recorded missed) plus
// the other writes per run done. When the runs keep up with the fires it
// is the writes per fire; when they fall behind, or ticks are missed, it
// still counts each side by what it did in the window.
func (f fireFigures) perFireRun() float64 {
	sched := f.missed // their events
	for _, s := range schedulerStreams {
		sched += f.writes[s]
	}
	return float64(sched)/float64(max(f.fired+f.missed, 1)) + float64(f.total()-sched)/float64(max(f.done, 1))
}

// fireRate runs the real binary with fsync on every write (the default)
// at each of fireRates: that many config jobs due every second, the
// script provider answering at once, deliver: none. Over fireWindow it
// counts the ticks fired (cron requests stored) and recorded missed, the
// runs done (the runs' events), and every stream's stored writes, and
// sets them beside the disk's ceiling measured in the same run.
func fireRate(t *testing.T) {
	var c ceiling
	t.Run("ceiling", func(t *testing.T) { c = rawCeiling(t) })
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	rates := fireRates
	if v := os.Getenv(fireRatesEnv); v != "" {
		rates = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want rates such as 300,600", fireRatesEnv, v)
			}
			rates = append(rates, n)
		}
	}
	var all []fireFigures
	for _, rate := range rates {
		f := fireAt(t, bin, filepath.Join(dir, fmt.Sprint(rate)), rate)
		all = append(all, f)
		logFire(t, f, c)
	}
	t.Logf("(d) summary, fsync per write; ceiling: raw JetStream %.0f (1 publisher), %.0f (64 publishers, 1 stream), %.0f (64 publishers, 4 streams) synced writes/s",
		c.one, c.oneStream, c.fourStreams)
	t.Logf("(d) | due/s | fired/s | runs done/s | missed/s | writes per fire+run | backlog | bound: 4-stream ceiling ÷ writes | fires/s ÷ bound | runs/s ÷ bound |")
	for _, f := range all {
		w := f.perFireRun()
		bound := c.fourStreams / w
		secs := f.window.Seconds()
		t.Logf("(d) | %d | %.0f | %.0f | %.1f | %.2f | %d | %.0f | %.2f | %.2f |", f.rate,
			float64(f.fired)/secs, float64(f.done)/secs, float64(f.missed)/secs, w, f.backlog,
			bound, float64(f.fired)/secs/bound, float64(f.done)/secs/bound)
	}
}

// logFire logs one rate's figures: rates, the writes by stream, lateness.
func logFire(t *testing.T, f fireFigures, c ceiling) {
	t.Helper()
	secs := f.window.Seconds()
	names := make([]string, 0, len(f.writes))
	for n := range f.writes {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return f.writes[b] - f.writes[a] })
	var split []string
	for _, n := range names {
		if f.writes[n] > 0 {
			split = append(split, fmt.Sprintf("%s %.2f", n, float64(f.writes[n])/float64(max(f.fired, 1))))
		}
	}
	w := f.perFireRun()
	t.Logf("(d) %d due/s, %s: fired %.0f/s, missed %.1f/s, runs done %.0f/s (skip %d, error %d), backlog at the end %d; stored writes %.0f/s, %.2f per fire+run (per fire: %s)",
		f.rate, f.window.Round(100*time.Millisecond), float64(f.fired)/secs, float64(f.missed)/secs, float64(f.done)/secs, f.skipped, f.failed, f.backlog,
		float64(f.total())/secs, w, strings.Join(split, ", "))
	t.Logf("(d) %d due/s: request stored after its tick p50 %s, p99 %s; run done after its tick p50 %s, p99 %s; ceiling ÷ writes: %.0f (1 stream) to %.0f (4 streams) fires/s",
		f.rate, percentile(f.stored, 0.5).Round(time.Millisecond), percentile(f.stored, 0.99).Round(time.Millisecond),
		percentile(f.ran, 0.5).Round(time.Millisecond), percentile(f.ran, 0.99).Round(time.Millisecond), c.oneStream/w, c.fourStreams/w)
}

// fireAt runs the binary in dir with rate jobs due every second and
// measures it over fireWindow after every timer is armed and fireWarmup.
func fireAt(t *testing.T, bin, dir string, rate int) fireFigures {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "bus:\n  listen: 127.0.0.1:0\nhttp:\n  listen: %s\nlog:\n  level: info\n  format: json\n", httpAddr)
	if n := os.Getenv(fireRunnerEnv); n != "" {
		fmt.Fprintf(&cfg, "runner:\n  concurrency: %s\n", n)
	}
	cfg.WriteString("cron:\n")
	if n := os.Getenv(fireCronEnv); n != "" {
		fmt.Fprintf(&cfg, "  concurrency: %s\n", n)
	}
	cfg.WriteString("  jobs:\n")
	for i := range rate {
		fmt.Fprintf(&cfg, "    - {id: job-%04d, schedule: \"* * * * * *\", prompt: p, deliver: none}\n", i)
	}
	cfgPath, logPath, logs := serverFiles(t, dir, cfg.String())
	var env []string
	profDir := os.Getenv(fireProfileEnv)
	pprofAddr := ""
	if profDir != "" {
		pprofAddr = freeAddr(t)
		env = append(env, "AGENTWORK_PPROF="+pprofAddr)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	dataDir := filepath.Join(dir, "data")
	s := startServer(t, bin, cfgPath, dataDir, env, logs, logs)
	defer s.stop()
	waitReady(ctx, t, &http.Client{Timeout: 10 * time.Second}, "http://"+httpAddr+"/readyz", s.exited)
	waitLog(ctx, t, logPath, "cron timers armed")
	b, err := bus.Dial(ctx, bus.Config{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Into the rhythm: the measure is of a steady state.
	reqs := countRequests(t, b)
	perSec := int64(rate)
	reqs.wait(ctx, t, perSec*int64(fireWarmup/time.Second), "cron requests of the warm-up")

	seq0 := streamLastSeqs(ctx, t, b)
	from, n0 := time.Now(), reqs.count()
	wctx, wcancel := context.WithTimeout(ctx, 3*fireWindow)
	defer wcancel()
	window := func(part int64) { reqs.waitUntil(wctx, n0+perSec*int64(fireWindow/time.Second)*part/2) }
	prof := make(chan error, 1)
	if profDir != "" {
		go func() {
			prof <- fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, int(fireWindow.Seconds())),
				filepath.Join(profDir, fmt.Sprintf("cpu-%d.pprof", rate)))
		}()
		window(1) // halfway
		if err := fetchTo(ctx, "http://"+pprofAddr+"/debug/pprof/goroutine?debug=1", filepath.Join(profDir, fmt.Sprintf("goroutines-%d.txt", rate))); err != nil {
			t.Errorf("goroutines: %v", err)
		}
	}
	window(2)
	seq1 := streamLastSeqs(ctx, t, b)
	f := fireFigures{rate: rate, window: time.Since(from), writes: map[string]int{}}
	if ci, err := b.JetStream().Consumer(ctx, bus.StreamRequests, agentwork.ConsumerName); err != nil {
		t.Fatal(err)
	} else if info, err := ci.Info(ctx); err != nil {
		t.Fatal(err)
	} else {
		f.backlog = info.NumPending + uint64(info.NumAckPending)
	}
	if profDir != "" {
		if err := <-prof; err != nil {
			t.Errorf("cpu profile: %v", err)
		}
	}
	for name, end := range seq1 {
		f.writes[name] = int(end - seq0[name])
	}
	readRange(ctx, t, b, bus.StreamRequests, seq0[bus.StreamRequests], seq1[bus.StreamRequests], func(subject string, stored time.Time, data []byte) {
		if src, _, err := b.Subjects.ParseRequest(subject); err != nil || src != bus.SourceCron {
			return
		}
		var ev struct {
			Data struct {
				ScheduledAt time.Time `json:"scheduled_at"`
			} `json:"data"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		f.fired++
		f.stored = append(f.stored, stored.Sub(ev.Data.ScheduledAt))
	})
	readRange(ctx, t, b, bus.StreamEvents, seq0[bus.StreamEvents], seq1[bus.StreamEvents], func(subject string, stored time.Time, data []byte) {
		var ev struct {
			Data agentwork.Result `json:"data"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Data.Source != bus.SourceCron {
			return
		}
		switch {
		case ev.Data.Outcome == bus.OutcomeDone:
			f.done++
			if ev.Data.ScheduledAt != nil {
				f.ran = append(f.ran, stored.Sub(*ev.Data.ScheduledAt))
			}
		case ev.Data.Outcome == bus.OutcomeSkip && ev.Data.Reason == cron.ReasonMissed:
			f.missed++
		case ev.Data.Outcome == bus.OutcomeSkip:
			f.skipped++
		default:
			f.failed++
		}
	})
	return f
}

// streamLastSeqs reads every stream's last sequence: its stored writes so far.
func streamLastSeqs(ctx context.Context, t *testing.T, b *bus.Bus) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for name := range b.JetStream().StreamNames(ctx).Name() {
		st, err := b.JetStream().Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = info.State.LastSeq
	}
	return out
}

// readRange calls fn with every message of stream after sequence from up
// to and including to.
func readRange(ctx context.Context, t *testing.T, b *bus.Bus, stream string, from, to uint64, fn func(subject string, stored time.Time, data []byte)) {
	t.Helper()
	if to <= from {
		return
	}
	c, err := b.JetStream().OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from + 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	for {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			if md.Sequence.Stream > to {
				return
			}
			fn(m.Subject(), md.Timestamp, m.Data())
			if md.Sequence.Stream == to {
				return
			}
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("%s: no message after sequence %d (want up to %d)", stream, from, to)
		}
	}
}

// fetchTo writes what a GET of url answers into path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
