package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
)

// soakEnv turns the soak on and says how long it posts tasks, e.g.
// AGENTWORK_SOAK=10m. Unset, TestSoak is skipped: it runs for minutes.
const soakEnv = "AGENTWORK_SOAK"

// soakOutEnv, when set, names a directory that receives the soak's RSS
// samples (rss.tsv), the server's log, heap profiles taken at the middle
// and at the end of the soak (heap-mid.pprof, heap-end.pprof) and what the
// bus holds at the end, per stream and per bucket key prefix
// (inventory.txt).
const soakOutEnv = "AGENTWORK_SOAK_OUT"

// soakMemLimitEnv, when set, is the GOMEMLIMIT of the server process (only),
// e.g. AGENTWORK_SOAK_GOMEMLIMIT=100MiB: to measure RSS under the soft
// memory limit an operator would set.
const soakMemLimitEnv = "AGENTWORK_SOAK_GOMEMLIMIT"

const (
	soakRate        = 20 // webhook tasks per second
	soakSample      = 10 * time.Second
	soakFlat        = 0.15 // RSS spread allowed over the second half
	soakToken       = "soak-token-0123456789abcdef"
	soakSettleLimit = 3 * time.Minute // to finish the backlog after posting stops
)

// TestSoak builds the agentwork binary and runs it as users do (embedded
// bus with fsync on every write, webhook tasks at 20/s, a cron job firing
// every second, two connectors: console into a file and nats), samples the
// server's RSS every 10 s, and checks that every accepted task ended done
// exactly once and was delivered once to each connector. It fails when RSS
// over the second half of the soak spreads by more than 15 % of its lowest
// sample. Loopback only; it stops by itself. Besides RSS, rss.tsv has
// the Go heap's goal (NextGC) and what the heap keeps from the OS, which
// RSS follows.
//
//	AGENTWORK_SOAK=10m go test -run '^TestSoak$' -v -timeout 30m ./bench/
func TestSoak(t *testing.T) {
	d := os.Getenv(soakEnv)
	if d == "" {
		t.Skipf("set %s=10m to run the soak", soakEnv)
	}
	duration, err := time.ParseDuration(d)
	if err != nil || duration < time.Minute {
		t.Fatalf("%s=%q: want a duration of at least 1m, e.g. 10m", soakEnv, d)
	}
	out := os.Getenv(soakOutEnv)
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	bin := buildBinary(t, dir)
	httpAddr, pprofAddr := freeAddr(t), freeAddr(t)
	cfg := filepath.Join(dir, "agentwork.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `
bus:
  listen: 127.0.0.1:0
http:
  listen: %s
webhook:
  tokens:
    - name: soak
      token: ${SOAK_TOKEN}
connectors:
  console: {type: console}
  notes: {type: nats, subject: soak.notes}
cron:
  jobs:
    - id: tick
      schedule: "* * * * * *"
      timezone: UTC
      prompt: "Say tick."
model:
  provider: script
  script:
    rules:
      - match: {source: cron}
        text: "tick"
      - match: {source: task}
        text: "done {{prompt}}"
log:
  level: warn
  format: json
`, httpAddr), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	stdout, err := os.Create(filepath.Join(out, "console.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(out, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	env := []string{"SOAK_TOKEN=" + soakToken, "AGENTWORK_PPROF=" + pprofAddr}
	if limit := os.Getenv(soakMemLimitEnv); limit != "" {
		env = append(env, "GOMEMLIMIT="+limit)
	}
	srv := startServer(t, bin, cfg, dataDir, env, stdout, stderr)
	exited, stop := srv.exited, srv.stop

	ctx, cancel := context.WithTimeout(t.Context(), duration+soakSettleLimit+2*time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 30 * time.Second}
	waitReady(ctx, t, client, "http://"+httpAddr+"/readyz", exited)

	rssFile, err := os.Create(filepath.Join(out, "rss.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer rssFile.Close()
	fmt.Fprintln(rssFile, "seconds\trss_mib\taccepted\tnext_gc_mib\theap_kept_mib")

	// Post at soakRate for duration; sample RSS meanwhile.
	var (
		mu       sync.Mutex
		accepted = map[string]bool{}
		refused  []string
		wg       sync.WaitGroup
		samples  []float64
	)
	sem := make(chan struct{}, 64)
	start := time.Now()
	post := time.NewTicker(time.Second / soakRate)
	sample := time.NewTicker(soakSample)
	record := func() {
		rss, err := vmRSS(srv.cmd.Process.Pid)
		if err != nil {
			t.Errorf("read RSS: %v", err)
			return
		}
		mu.Lock()
		n := len(accepted)
		mu.Unlock()
		samples = append(samples, rss)
		// The Go heap's goal and what it keeps from the OS (HeapSys -
		// HeapReleased): RSS follows them, not the live heap.
		ms := memStats(ctx, client, pprofAddr)
		fmt.Fprintf(rssFile, "%.0f\t%.1f\t%d\t%.1f\t%.1f\n", time.Since(start).Seconds(), rss, n,
			ms["NextGC"]/(1<<20), (ms["HeapSys"]-ms["HeapReleased"])/(1<<20))
	}
	record()
	midProfile := false
	for i := 0; time.Since(start) < duration; {
		select {
		case <-ctx.Done():
			t.Fatalf("soak cut short: %v", ctx.Err())
		case err := <-exited:
			t.Fatalf("server exited during the soak: %v (see %s)", err, stderr.Name())
		case <-sample.C:
			record()
			if !midProfile && time.Since(start) >= duration/2 {
				midProfile = true
				heapProfile(ctx, t, client, pprofAddr, filepath.Join(out, "heap-mid.pprof"))
			}
		case <-post.C:
			i++
			sem <- struct{}{}
			wg.Add(1)
			go func(i int) {
				defer func() { <-sem; wg.Done() }()
				id, err := postTask(ctx, client, "http://"+httpAddr+"/v1/tasks", i)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refused = append(refused, err.Error())
					return
				}
				accepted[id] = true
			}(i)
		}
	}
	post.Stop()
	sample.Stop()
	wg.Wait()
	record()
	heapProfile(ctx, t, client, pprofAddr, filepath.Join(out, "heap-end.pprof"))

	if len(refused) > 0 {
		t.Errorf("%d tasks refused; first: %s", len(refused), refused[0])
	}
	b, err := bus.Dial(ctx, bus.Config{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	done, delivered, cron, err := soakOutcomes(ctx, b, len(accepted), soakSettleLimit)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := soakInventory(ctx, b)
	if err != nil {
		t.Error(err)
	}
	t.Logf("what the bus holds at the end (messages and subjects per stream; keys per prefix):\n%s", inv)
	if err := os.WriteFile(filepath.Join(out, "inventory.txt"), []byte(inv), 0o644); err != nil {
		t.Error(err)
	}
	stop()

	// Every accepted task done exactly once, delivered once to each connector.
	var missing, doubled, undelivered int
	for id := range accepted {
		switch n := len(done[id]); {
		case n == 0:
			missing++
		case n > 1:
			doubled++
		default:
			if got := delivered[done[id][0]]; got["console"] != 1 || got["notes"] != 1 {
				undelivered++
			}
		}
	}
	for id := range done {
		if !accepted[id] {
			t.Errorf("done event for request %s that was never accepted", id)
		}
	}
	t.Logf("%d tasks accepted; done: %d missing, %d more than once, %d not delivered once to each connector; %d cron runs done",
		len(accepted), missing, doubled, undelivered, cron)
	if missing+doubled+undelivered > 0 {
		t.Errorf("not every task ended done exactly once and delivered once")
	}
	if cron < int(duration/time.Second)/2 {
		t.Errorf("%d cron runs done in %s; want about one a second", cron, duration)
	}

	// RSS over time, and its spread over the second half.
	var tab strings.Builder
	for i, s := range samples {
		fmt.Fprintf(&tab, "  %4.0fs %6.1f MiB\n", float64(i)*soakSample.Seconds(), s)
	}
	half := samples[len(samples)/2:]
	lo, hi := half[0], half[0]
	for _, s := range half {
		lo, hi = min(lo, s), max(hi, s)
	}
	t.Logf("RSS (VmRSS of the server process) every %s:\n%s", soakSample, tab.String())
	t.Logf("RSS first %.1f MiB, last %.1f MiB; second half %.1f-%.1f MiB (spread %.1f%% of its lowest); samples and profiles in %s",
		samples[0], samples[len(samples)-1], lo, hi, 100*(hi-lo)/lo, out)
	if (hi-lo)/lo > soakFlat {
		t.Errorf("RSS not flat over the second half: %.1f-%.1f MiB, more than %.0f%% apart", lo, hi, 100*soakFlat)
	}
}

// soakOutcomes reads the events stream until every one of the want tasks
// has a done event (or limit passes) and returns, per request id, the run
// ids of its done events; per run id, the delivered events per connector;
// and the number of cron runs done.
func soakOutcomes(ctx context.Context, b *bus.Bus, want int, limit time.Duration) (map[string][]string, map[string]map[string]int, int, error) {
	done := map[string][]string{}
	delivered := map[string]map[string]int{}
	cron := 0
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	oc, err := b.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, nil, 0, err
	}
	it, err := oc.Messages()
	if err != nil {
		return nil, nil, 0, err
	}
	defer it.Stop()
	go func() { <-ctx.Done(); it.Stop() }()
	for len(done) < want || pendingDeliveries(done, delivered) {
		m, err := it.Next()
		if err != nil {
			return nil, nil, 0, fmt.Errorf("events: %d of %d tasks done: %w", len(done), want, err)
		}
		ev, err := bus.DecodeEvent(m.Data())
		if err != nil {
			return nil, nil, 0, err
		}
		switch {
		case m.Subject() == b.Subjects.Event("task", "done"):
			done[ev.CausationID] = append(done[ev.CausationID], ev.RunID)
		case m.Subject() == b.Subjects.Event("cron", "done"):
			cron++
		case m.Subject() == b.Subjects.Event(bus.SourceDelivery, "delivered"):
			if delivered[ev.RunID] == nil {
				delivered[ev.RunID] = map[string]int{}
			}
			var r struct {
				Connector string `json:"connector"`
			}
			if err := ev.DecodeData(&r); err != nil {
				return nil, nil, 0, err
			}
			delivered[ev.RunID][r.Connector]++
		case strings.HasPrefix(m.Subject(), b.Subjects.Event("task", "")):
			return nil, nil, 0, fmt.Errorf("a task ended %s: %s", m.Subject(), m.Data())
		}
	}
	return done, delivered, cron, nil
}

// soakInventory lists what the bus holds: per stream its messages,
// subjects and bytes, and per bucket its keys by first token (run, send,
// delivered, idem...), with how many carry a per-key TTL. What grows with
// history shows here: a key per run that outlives its window.
func soakInventory(ctx context.Context, b *bus.Bus) (string, error) {
	var out strings.Builder
	js := b.JetStream()
	names := js.StreamNames(ctx)
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	if err := names.Err(); err != nil {
		return "", err
	}
	slices.Sort(all)
	for _, name := range all {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return out.String(), err
		}
		st := s.CachedInfo().State
		fmt.Fprintf(&out, "%-24s %7d msgs %7d subjects %8.1f MiB\n", name, st.Msgs, st.NumSubjects, float64(st.Bytes)/(1<<20))
		bucket, ok := strings.CutPrefix(name, "KV_")
		if !ok {
			continue
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("$KV."+bucket+".>"))
		if err != nil {
			return out.String(), err
		}
		keys, ttl := map[string]int{}, map[string]int{}
		for subj := range info.State.Subjects {
			key := strings.TrimPrefix(subj, "$KV."+bucket+".")
			prefix, _, _ := strings.Cut(key, ".")
			keys[prefix]++
			if m, err := s.GetLastMsgForSubject(ctx, subj); err == nil && m.Header.Get("Nats-TTL") != "" {
				ttl[prefix]++
			}
		}
		for _, p := range slices.Sorted(maps.Keys(keys)) {
			fmt.Fprintf(&out, "    %-20s %7d keys, %7d with a TTL\n", p, keys[p], ttl[p])
		}
	}
	return out.String(), nil
}

// pendingDeliveries reports whether a done task still lacks a delivery.
func pendingDeliveries(done map[string][]string, delivered map[string]map[string]int) bool {
	for _, runs := range done {
		for _, run := range runs {
			if len(delivered[run]) < 2 {
				return true
			}
		}
	}
	return false
}

func postTask(ctx context.Context, c *http.Client, url string, i int) (string, error) {
	body := fmt.Sprintf(`{"prompt":"soak task %d","name":"soak"}`, i)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+soakToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("task %d: %s: %s", i, resp.Status, bytes.TrimSpace(raw))
	}
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || a.ID == "" {
		return "", fmt.Errorf("task %d: answer %s: %v", i, raw, err)
	}
	return a.ID, nil
}

// vmRSS returns the resident set size of process pid in MiB.
func vmRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// memStats returns the runtime.MemStats fields the server's profiler
// prints (/debug/pprof/heap?debug=1), by name; empty when it cannot.
func memStats(ctx context.Context, c *http.Client, addr string) map[string]float64 {
	out := map[string]float64{}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?debug=1", nil)
	if err != nil {
		return out
	}
	resp, err := c.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// "# HeapSys = 44892160"
		name, val, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

func heapProfile(ctx context.Context, t *testing.T, c *http.Client, addr, path string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("heap profile: %v", err)
		return
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("heap profile: %s %v", resp.Status, err)
		return
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Error(err)
	}
}

// freeAddr returns a loopback address with a port free at the time.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady polls url until it answers 200, the server exits, or ctx ends.
func waitReady(ctx context.Context, t *testing.T, c *http.Client, url string, exited <-chan error) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("server not ready: %v", ctx.Err())
		case err := <-exited:
			t.Fatalf("server exited before it was ready: %v", err)
		case <-tick.C:
		}
	}
}
