package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	rcron "github.com/robfig/cron/v3"
	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers/cron"
)

// cronDiskEnv turns TestCronDisk on; unset, it is skipped (it runs for
// about six minutes and writes 100,000 timers with fsync on each). "c"
// runs only the binary's first start and the RSS beside robfig's; "d"
// only the binary's fires per second with its runner, beside the disk.
const cronDiskEnv = "AGENTWORK_CRON_DISK"

// robfigChildEnv makes TestRobfigRunnerChild hold the jobs (it is the
// child process TestCronDisk measures the RSS of).
const robfigChildEnv = "AGENTWORK_ROBFIG_CHILD"

// TestCronDisk measures, in one run, with fsync on every write (the
// default): (a) the disk's ceiling, a raw JetStream publish loop; (b) the
// fires per second the scheduler sustains when 500 ticks are due every
// second, and the stored writes per fire; (c) the real binary's first
// start with 100,000 config jobs (ready, every timer armed) and its RSS
// after 6 s of firing, beside robfig/cron's runner holding the same jobs
// in a process of its own; (d) the real binary's fires and runs per
// second at a few offered rates, beside (a) measured again in the same
// run (cron_firerate_test.go).
//
//	AGENTWORK_CRON_DISK=1 go test -run '^TestCronDisk$' -v -timeout 20m ./bench/
//	AGENTWORK_CRON_DISK=d go test -run '^TestCronDisk$' -v -timeout 20m ./bench/  # (d) alone
func TestCronDisk(t *testing.T) {
	switch os.Getenv(cronDiskEnv) {
	case "":
		t.Skipf("set %s=1 to run it (c or d: that part alone)", cronDiskEnv)
	case "c": // the first start and RSS only
		c := rawCeiling(t)
		firstStartRSS(t, c, false)
		firstStartRSS(t, c, true)
		robfigRSS(t)
	case "d": // the fires per second with the runner only
		fireRate(t)
	default:
		c := rawCeiling(t)
		schedulerAt500(t)
		firstStartRSS(t, c, false)
		firstStartRSS(t, c, true)
		robfigRSS(t)
		fireRate(t)
	}
}

// ceiling is what rawCeiling measured: synced writes per second.
type ceiling struct {
	one, oneStream, fourStreams float64 // 1 publisher; 64 on 1 stream; 64 over 4 streams
}

// rawCeiling publishes for a few seconds to streams on a bus with fsync
// on every write: one publisher at a time (each write waits for its
// fsync), 64 at once on one stream, and 64 at once over four streams (the
// scheduler writes to several).
func rawCeiling(t *testing.T) ceiling {
	bb := bustest.New(t)
	if bb.Config().SyncInterval != 0 {
		t.Fatal("the ceiling must be measured with fsync on every write")
	}
	ctx := t.Context()
	for i := range 4 {
		if _, err := bb.JetStream().CreateStream(ctx, jetstream.StreamConfig{
			Name: fmt.Sprintf("RAW%d", i), Subjects: []string{fmt.Sprintf("raw%d.>", i)}, Storage: jetstream.FileStorage,
		}); err != nil {
			t.Fatal(err)
		}
	}
	payload := []byte(strings.Repeat("x", 300))
	run := func(name string, publishers, streams int) float64 {
		var n atomic.Int64
		until := time.Now().Add(4 * time.Second)
		var wg sync.WaitGroup
		for p := range publishers {
			wg.Go(func() {
				subj := fmt.Sprintf("raw%d.p%d", p%streams, p)
				for time.Now().Before(until) {
					if _, err := bb.JetStream().Publish(ctx, subj, payload); err != nil {
						t.Error(err)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		rate := float64(n.Load()) / 4
		t.Logf("(a) raw JetStream, fsync per write, %s: %.0f synced writes/s", name, rate)
		return rate
	}
	return ceiling{
		one:         run("1 publisher", 1, 1),
		oneStream:   run("64 publishers, 1 stream", 64, 1),
		fourStreams: run("64 publishers, 4 streams", 64, 4),
	}
}

// streamsSeq sums the last sequence of every stream of the bus: its
// stored writes so far.
func streamsSeq(t *testing.T, bb *bus.Bus) uint64 {
	t.Helper()
	n, err := storedWrites(t.Context(), bb)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// storedWrites is streamsSeq for any goroutine.
func storedWrites(ctx context.Context, bb *bus.Bus) (uint64, error) {
	var n uint64
	for name := range bb.JetStream().StreamNames(ctx).Name() {
		st, err := bb.JetStream().Stream(ctx, name)
		if err != nil {
			return 0, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		n += info.State.LastSeq
	}
	return n, nil
}

// schedulerAt500 runs the scheduler with 500 jobs due every second on a
// bus with fsync on every write, and counts over 5,000 ticks handled
// (10 s when it keeps up) the ticks fired and recorded missed, and the
// stored writes (every stream's sequence).
// No runner takes the requests: the writes are the scheduler's.
func schedulerAt500(t *testing.T) {
	bb := bustest.New(t)
	cfg := cron.Config{}
	for i := range 500 {
		cfg.Jobs = append(cfg.Jobs, cron.Job{ID: fmt.Sprintf("job-%03d", i), Schedule: "* * * * * *", Prompt: "p"})
	}
	var fired, missed atomic.Int64
	var mu sync.Mutex
	var late []time.Duration
	measuring := atomic.Bool{}
	handled := newEvents()
	s, err := cron.New(bb, cfg, cron.WithTickObserver(func(r cron.TickResult) {
		if r.What == "fired" || r.What == "missed" {
			defer handled.add()
		}
		if !measuring.Load() {
			return
		}
		switch r.What {
		case "fired":
			fired.Add(1)
			mu.Lock()
			late = append(late, r.At.Sub(r.Tick))
			mu.Unlock()
		case "missed":
			missed.Add(1)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-s.Armed():
	case <-time.After(time.Minute):
		t.Fatal("not armed after a minute")
	}
	// Settle into the rhythm (three seconds' ticks), then measure 5,000
	// ticks handled (ten seconds' worth when the scheduler keeps up).
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	handled.wait(wctx, t, handled.count()+1500, "ticks handled")
	seq0 := streamsSeq(t, bb)
	measuring.Store(true)
	from, n0 := time.Now(), handled.count()
	handled.wait(wctx, t, n0+5000, "ticks handled")
	measuring.Store(false)
	window := time.Since(from)
	writes := streamsSeq(t, bb) - seq0
	mu.Lock()
	p50, p99 := percentile(late, 0.5), percentile(late, 0.99)
	mu.Unlock()
	f, m := fired.Load(), missed.Load()
	t.Logf("(b) scheduler, 500 due/s, fsync per write: %.0f fired/s, %.0f missed/s, %.0f stored writes/s, %.2f writes per tick handled; lateness p50 %s, p99 %s",
		float64(f)/window.Seconds(), float64(m)/window.Seconds(), float64(writes)/window.Seconds(), float64(writes)/float64(max(f+m, 1)),
		p50.Round(time.Millisecond), p99.Round(time.Millisecond))
}

// firstStartRSS starts the real binary with 100,000 config jobs (1,000
// every 2 s) on an empty data dir, fsync on every write, and reports when
// it was ready, when its scheduler started (config reconciled) and when
// every timer it arms at start was armed (its log), the stored writes it
// made until then (every stream's sequence, sampled every 100 ms from
// ready on) against the disk's time for them at the ceiling c measured
// in the same run, and its RSS after three rounds of ticks (6 s) after
// ready and after armed. spread:
// the 99,000 other jobs are daily at hours spread over the whole day (a
// 24th of them due within the arm-ahead hour), else at hours 2-21 hours
// ahead (none within it), as in the issue.
func firstStartRSS(t *testing.T, c ceiling, spread bool) {
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	httpAddr := freeAddr(t)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "bus:\n  listen: 127.0.0.1:0\nhttp:\n  listen: %s\nlog:\n  level: info\n  format: json\ncron:\n  jobs:\n", httpAddr)
	now := time.Now().UTC()
	for i := range restartJobs {
		spec := "*/2 * * * * *"
		switch {
		case i < restartFiring:
		case spread:
			spec = fmt.Sprintf("%d %d * * *", i%60, i%24)
		default:
			spec = fmt.Sprintf("%d %d * * *", i%60, (now.Hour()+2+i%20)%24)
		}
		fmt.Fprintf(&cfg, "    - {id: job-%06d, schedule: %q, prompt: p, deliver: none}\n", i, spec)
	}
	cfgPath, logPath, logs := serverFiles(t, dir, cfg.String())
	parse := yamlParse(t, cfgPath)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	dataDir := filepath.Join(dir, "data")
	s := startServer(t, bin, cfgPath, dataDir, nil, logs, logs)
	waitReady(ctx, t, &http.Client{Timeout: 10 * time.Second}, "http://"+httpAddr+"/readyz", s.exited)
	ready := time.Since(start)
	// The stored writes as time goes: the data dir was empty, so every
	// stream's last sequence is a write of this start.
	b, err := bus.Dial(ctx, bus.Config{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	type sample struct {
		at     time.Time
		writes uint64
	}
	var (
		smu     sync.Mutex
		samples []sample
	)
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			n, err := storedWrites(sampling, b)
			if err != nil {
				return // stopped, or the server went: the samples so far
			}
			smu.Lock()
			samples = append(samples, sample{time.Now(), n})
			smu.Unlock()
			select {
			case <-sampling.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	// RSS once three rounds of the firing jobs' ticks (6 s) are stored
	// after ready, and three more after armed.
	reqs := countRequests(t, b)
	reqs.wait(ctx, t, 3*restartFiring, "cron requests after ready")
	rssReady := rssMB(t, s.cmd.Process.Pid)
	loadedAt, loaded := waitLogLine(ctx, t, logPath, "config loaded")
	load, _ := loaded["took"].(float64) // seconds
	startedAt := waitLog(ctx, t, logPath, "cron scheduler started")
	armedAt := waitLog(ctx, t, logPath, "cron timers armed")
	armed := armedAt.Sub(start)
	reqs.wait(ctx, t, reqs.count()+3*restartFiring, "cron requests after armed")
	rssArmed := rssMB(t, s.cmd.Process.Pid)
	stopSampling()
	<-sampled
	s.stop()
	// The writes until armed: the first sample at or after it.
	var writes uint64
	smu.Lock()
	for _, x := range samples {
		writes = x.writes
		if !x.at.Before(armedAt) {
			break
		}
	}
	smu.Unlock()
	name := "daily jobs 2-21 h ahead"
	if spread {
		name = "daily jobs spread over the day"
	}
	t.Logf("(c) agentwork serve, first start, 100,000 config jobs (%s), fsync per write: ready %s, scheduler started %s, every timer armed %s; RSS 3 rounds (6 s) after ready %.0f MiB, after armed %.0f MiB",
		name, ready.Round(100*time.Millisecond), startedAt.Sub(start).Round(100*time.Millisecond), armed.Round(100*time.Millisecond), rssReady, rssArmed)
	if c.oneStream > 0 {
		disk1, disk4 := float64(writes)/c.oneStream, float64(writes)/c.fourStreams
		t.Logf("(c) %s: %d stored writes until armed (the fires' meanwhile included); the disk's time for them %.2f s (1 stream) to %.2f s (4 streams); the start took %.1f-%.1f× that, the scheduler's part (started to armed, %.2f s) %.1f-%.1f×",
			name, writes, disk1, disk4, armed.Seconds()/disk1, armed.Seconds()/disk4,
			armedAt.Sub(startedAt).Seconds(), armedAt.Sub(startedAt).Seconds()/disk1, armedAt.Sub(startedAt).Seconds()/disk4)
		run := armedAt.Sub(loadedAt).Seconds()
		t.Logf("(c) %s: the config's load %.2f s, %.1f× yaml.v3's parse of the file alone (%.2f s, in the test's process); from loaded to armed %.2f s, %.1f-%.1f× the disk's time; the start %.1f-%.1f× the parse and the disk's time together",
			name, load, load/parse.Seconds(), parse.Seconds(), run, run/disk1, run/disk4,
			armed.Seconds()/(parse.Seconds()+disk1), armed.Seconds()/(parse.Seconds()+disk4))
	}
}

// yamlParse is the fastest of three parses of the file at path into a
// yaml.v3 node tree: what any load of a YAML config takes at least.
func yamlParse(t *testing.T, path string) time.Duration {
	t.Helper()
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var n yaml.Node
		if err := yaml.Unmarshal(raw, &n); err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	return best
}

// waitLog polls the JSON log at path until a line's msg is msg, and
// returns its time.
func waitLog(ctx context.Context, t *testing.T, path, msg string) time.Time {
	t.Helper()
	at, _ := waitLogLine(ctx, t, path, msg)
	return at
}

// waitLogLine is waitLog, and returns the line's fields too.
func waitLogLine(ctx context.Context, t *testing.T, path, msg string) (time.Time, map[string]any) {
	t.Helper()
	for {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l map[string]any
			if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == msg {
				f.Close()
				ts, _ := l["ts"].(string)
				at, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts)
				if err != nil {
					t.Fatalf("log time %q: %v", ts, err)
				}
				return at, l
			}
		}
		f.Close()
		select {
		case <-ctx.Done():
			t.Fatalf("no %q in the log: %v", msg, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rssMB reads a process's resident set size in MiB (vmRSS).
func rssMB(t *testing.T, pid int) float64 {
	t.Helper()
	mb, err := vmRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	return mb
}

// robfigRSS runs TestRobfigRunnerChild in a process of its own and reads
// its RSS once it has run three rounds of the firing jobs (6 s).
func robfigRSS(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestRobfigRunnerChild$")
	cmd.Env = append(os.Environ(), robfigChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	started := ""
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "robfig started "); ok {
			started = v
			break
		}
	}
	if started == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("robfig child did not start")
	}
	// RSS once it has run three rounds of the firing jobs (6 s).
	watchdog := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	defer watchdog.Stop()
	fired := false
	for !fired && sc.Scan() {
		fired = strings.HasPrefix(sc.Text(), "robfig fired ")
	}
	if !fired {
		_ = cmd.Wait()
		t.Fatal("robfig child did not run three rounds in a minute")
	}
	rss := rssMB(t, cmd.Process.Pid)
	_ = stdin.Close() // the child ends
	_ = cmd.Wait()
	t.Logf("(c) robfig/cron runner, same 100,000 jobs: started %s; RSS 3 rounds (6 s) after %.0f MiB", started, rss)
}

// TestRobfigRunnerChild is TestCronDisk's baseline process: robfig/cron's
// runner with the same 100,000 schedules as the binary's config, until
// its stdin closes. Skipped unless robfigChildEnv is set.
func TestRobfigRunnerChild(t *testing.T) {
	if os.Getenv(robfigChildEnv) == "" {
		t.Skip("the child process of TestCronDisk")
	}
	now := time.Now().UTC()
	start := time.Now()
	c := rcron.New(rcron.WithSeconds())
	var n atomic.Int64
	for i := range restartJobs {
		spec := "*/2 * * * * *"
		if i >= restartFiring {
			spec = fmt.Sprintf("0 %d %d * * *", i%60, (now.Hour()+2+i%20)%24)
		}
		if _, err := c.AddFunc(spec, func() {
			if n.Add(1) == 3*restartFiring {
				fmt.Printf("robfig fired %d\n", 3*restartFiring)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	c.Start()
	fmt.Printf("robfig started %s\n", time.Since(start).Round(time.Millisecond))
	_, _ = bufio.NewReader(os.Stdin).ReadByte()
	<-c.Stop().Done()
}
