package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
)

// cronRestartEnv turns TestCronRestart on; unset, it is skipped: it writes
// 100,000 jobs and runs for about two minutes. Its value is the bus's
// sync_interval ("always": fsync on every write, the default; or e.g. 1m).
const cronRestartEnv = "AGENTWORK_CRON_RESTART"

const (
	restartJobs   = 100_000         // config jobs
	restartFiring = 1_000           // of which fire every 2 s
	restartRounds = 3               // ticks of the firing jobs in the first run, after it is ready
	restartStop   = 4 * time.Second // the stop between the runs
	// The ticks after the restart that are measured: those due within
	// restartMeasure of it being ready, after restartMeasureRounds rounds
	// were stored.
	restartMeasureRounds = 6
	restartMeasure       = 10 * time.Second
	restartFirstRound    = 2 * time.Second // the first ticks after ready, reported apart
	restartFixedFrom     = 2 * time.Second // and the ticks from this long after the restart began
)

// TestCronRestart runs the real binary with 100,000 config jobs (1,000 of
// them every 2 s, the rest daily at hours that do not come up), stops it
// for a few seconds and starts it again, and measures from the requests
// stream what users get: how late the ticks due after the restart were
// stored (JetStream's timestamp of the request minus its scheduled_at),
// and how many of the ticks due during the stop were run per job (the
// default catch-up policy, run_once: one) and recorded missed.
//
//	AGENTWORK_CRON_RESTART=always go test -run '^TestCronRestart$' -v -timeout 20m ./bench/
func TestCronRestart(t *testing.T) {
	sync := os.Getenv(cronRestartEnv)
	if sync == "" {
		t.Skipf("set %s=always (or a sync interval such as 1m) to run it", cronRestartEnv)
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	httpAddr := freeAddr(t)
	var cfg strings.Builder
	busSync := ""
	if sync != "always" {
		busSync = "\n  sync_interval: " + sync
	}
	fmt.Fprintf(&cfg, "bus:\n  listen: 127.0.0.1:0%s\nhttp:\n  listen: %s\nlog:\n  level: warn\n  format: json\ncron:\n  jobs:\n", busSync, httpAddr)
	now := time.Now().UTC()
	for i := range restartJobs {
		spec := "*/2 * * * * *"
		if i >= restartFiring {
			// Daily, at an hour at least two hours away.
			spec = fmt.Sprintf("%d %d * * *", i%60, (now.Hour()+2+i%20)%24)
		}
		fmt.Fprintf(&cfg, "    - {id: job-%06d, schedule: %q, prompt: p, deliver: none}\n", i, spec)
	}
	cfgPath, _, logs := serverFiles(t, dir, cfg.String())
	dataDir := filepath.Join(dir, "data")
	client := &http.Client{Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()

	// run starts the server and returns, once it is ready, a bus
	// connection to it and a wait for n more cron requests.
	run := func() (s *server, b *bus.Bus, ready time.Time, wait func(n int)) {
		s = startServer(t, bin, cfgPath, dataDir, nil, logs, logs)
		waitReady(ctx, t, client, "http://"+httpAddr+"/readyz", s.exited)
		ready = time.Now()
		b, err := bus.Dial(ctx, bus.Config{DataDir: dataDir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		reqs := make(chan struct{}, 1<<16)
		if _, err := b.Conn().Subscribe(b.Subjects.Request(bus.SourceCron, "*"), func(*nats.Msg) {
			select {
			case reqs <- struct{}{}:
			default:
			}
		}); err != nil {
			t.Fatal(err)
		}
		return s, b, ready, func(n int) {
			for range n {
				select {
				case <-reqs:
				case <-ctx.Done():
					t.Fatalf("waiting for cron requests: %v", ctx.Err())
				}
			}
		}
	}
	first, _, ready, wait := run()
	t.Logf("first start: ready after it wrote the jobs, at %s", ready.Format(time.TimeOnly))
	wait(restartRounds * restartFiring)
	first.stop()
	stopped := time.Now()
	time.Sleep(restartStop) // the downtime itself: nothing marks its end
	restarted := time.Now()
	second, b, ready, wait := run()
	t.Logf("restart: ready in %s", ready.Sub(restarted).Round(time.Millisecond))
	wait(restartMeasureRounds * restartFiring)
	reqs, err := cronRequests(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	second.stop()

	var late, early, rest []time.Duration
	downtime := map[string]int{} // per job: the ticks of the stop that ran
	for _, r := range reqs {
		switch {
		case r.tick.After(stopped) && r.tick.Before(restarted):
			downtime[r.job]++
		case r.tick.After(ready) && !r.tick.After(ready.Add(restartMeasure)):
			late = append(late, r.stored.Sub(r.tick))
			// The first round after ready shares the bus with the
			// catch-up of the ticks of the stop.
			if r.tick.Before(ready.Add(restartFirstRound)) {
				early = append(early, r.stored.Sub(r.tick))
			} else {
				rest = append(rest, r.stored.Sub(r.tick))
			}
		}
	}
	// The same instants for every version: ticks due from
	// restartFixedFrom after the process started again, whenever it
	// said ready.
	var fixed []time.Duration
	for _, r := range reqs {
		if from := restarted.Add(restartFixedFrom); r.tick.After(from) && !r.tick.After(from.Add(restartMeasure)) {
			fixed = append(fixed, r.stored.Sub(r.tick))
		}
	}
	if len(fixed) > 0 {
		slices.Sort(fixed)
		t.Logf("ticks due %s-%s after the restart began: %d stored, late p50 %s, p99 %s", restartFixedFrom, restartFixedFrom+restartMeasure, len(fixed),
			fixed[len(fixed)/2].Round(time.Millisecond), fixed[len(fixed)*99/100].Round(time.Millisecond))
	}
	for _, part := range []struct {
		name string
		d    []time.Duration
	}{{"due within " + restartFirstRound.String() + " of ready", early}, {"due after", rest}} {
		if len(part.d) > 0 {
			slices.Sort(part.d)
			t.Logf("  of which %s: %d, late p50 %s, p99 %s", part.name, len(part.d),
				part.d[len(part.d)/2].Round(time.Millisecond), part.d[len(part.d)*99/100].Round(time.Millisecond))
		}
	}
	perJob := map[int]int{}
	for _, n := range downtime {
		perJob[n]++
	}
	slices.Sort(late)
	if len(late) == 0 {
		t.Fatal("no tick due after the restart was stored")
	}
	t.Logf("ticks due after the restart: %d stored, late p50 %s, p99 %s, max %s", len(late),
		late[len(late)/2].Round(time.Millisecond), late[len(late)*99/100].Round(time.Millisecond), late[len(late)-1].Round(time.Millisecond))
	t.Logf("ticks due during the %s stop run per job (jobs with that many): %v", restartStop, perJob)
	for n := range perJob {
		if n > 1 {
			t.Errorf("a job ran %d ticks of the stop; its catch-up policy (run_once) runs one", n)
		}
	}
}

// cronRequest is one cron request as stored.
type cronRequest struct {
	job          string
	tick, stored time.Time
}

// cronRequests reads every cron request of the requests stream.
func cronRequests(ctx context.Context, b *bus.Bus) ([]cronRequest, error) {
	c, err := b.JetStream().OrderedConsumer(ctx, bus.StreamRequests, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subjects.Request(bus.SourceCron, "*")},
	})
	if err != nil {
		return nil, err
	}
	var out []cronRequest
	for {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			var ev struct {
				Data struct {
					Name        string    `json:"name"`
					ScheduledAt time.Time `json:"scheduled_at"`
				} `json:"data"`
			}
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				return nil, err
			}
			out = append(out, cronRequest{job: ev.Data.Name, tick: ev.Data.ScheduledAt, stored: md.Timestamp})
			if md.NumPending == 0 {
				return out, batch.Error()
			}
		}
		if n == 0 {
			return out, batch.Error()
		}
	}
}
