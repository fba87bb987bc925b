package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers/cron"
)

// crashSeedEnv sets the seed of TestCronKilledAtRandomInstants's kill
// instants, to replay a run (its log gives the seed).
const crashSeedEnv = "AGENTWORK_CRASH_SEED"

// TestCronKilledAtRandomInstants kills the server with SIGKILL again and
// again at a random instant: up to 1.5 s after its bus is up (in the
// start's reconcile of 3,000 jobs, in its arming pass), or up to 1.5 s
// after its first run has ended (among fires and runs). Then it lets the
// last start run. Every tick of the
// per-second jobs from their definition on ends exactly once in history
// (a run, or a missed tick of a downtime), none twice and none lost, and
// every daily job due within the hour has its timer armed for its next
// tick.
func TestCronKilledAtRandomInstants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(crashSeedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s: %v", crashSeedEnv, err)
		}
	}
	t.Logf("kill instants from seed %d (%s=%d replays them)", seed, crashSeedEnv, seed)
	rnd := rand.New(rand.NewPCG(seed, seed))

	const perSecond, daily = 20, 3000
	var cfg strings.Builder
	cfg.WriteString("bus:\n  listen: 127.0.0.1:0\nhttp:\n  listen: \"off\"\ncron:\n  jobs:\n")
	for i := range perSecond {
		fmt.Fprintf(&cfg, "    - {id: sec-%02d, schedule: \"* * * * * *\", prompt: ping}\n", i)
	}
	// Daily, 20 to 50 minutes from now: armed by each start's pass, not
	// fired during the test.
	base := time.Now().UTC().Add(20 * time.Minute)
	for i := range daily {
		at := base.Add(time.Duration(i%30) * time.Minute)
		fmt.Fprintf(&cfg, "    - {id: day-%04d, schedule: \"%d %d * * *\", timezone: UTC, prompt: report}\n", i, at.Minute(), at.Hour())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	srv := startCrashServer(t, cfg.String())
	// firing waits until a run of a tick since up has ended: the jobs
	// fire, and a kill lands among fires and runs. Within 15 s: the fires
	// the killed process had in hand come again at once, not after their
	// ack wait (30 s).
	firing := func(up time.Time) {
		b := srv.dial(ctx)
		defer b.Close()
		waitFor(t, 15*time.Second, "a cron run within 15 s of the start", func() bool {
			recs, err := agentwork.History(ctx, b, agentwork.HistoryQuery{Sources: []string{bus.SourceCron}, Limit: 1})
			return err == nil && len(recs) == 1 && recs[0].Time.After(up)
		}, srv.child)
	}
	const kills = 10
	for k := range kills {
		up := time.Now()
		if k%2 == 1 {
			firing(up)
		}
		// The instant under test: in the start (reconcile, arming pass)
		// or among the fires.
		time.Sleep(time.Duration(rnd.Int64N(int64(1500 * time.Millisecond))))
		srv.kill9()
		t.Logf("kill %d: %s after up", k+1, time.Since(up).Round(time.Millisecond))
		srv.restart()
	}
	last := srv.child
	restarted := time.Now()
	b := srv.dial(ctx)
	defer b.Close()

	// The jobs as the last start has them (their definitions' times).
	c := cron.NewClient(b)
	var jobs []cron.Status
	waitFor(t, 30*time.Second, "the job list", func() bool {
		var err error
		jobs, err = c.List(ctx)
		return err == nil && len(jobs) == perSecond+daily
	}, last)
	// Every tick of the per-second jobs up to cutoff must end in history.
	cutoff := restarted.Add(3 * time.Second).Truncate(time.Second)
	history := func(id string) []agentwork.Record {
		recs, err := agentwork.History(ctx, b, agentwork.HistoryQuery{Sources: []string{bus.SourceCron}, Names: []string{id}, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	ticks, ended := 0, map[string]int{}
	for _, st := range jobs {
		id := st.Job.ID
		if !strings.HasPrefix(id, "sec-") {
			continue
		}
		var recs []agentwork.Record
		waitFor(t, 30*time.Second, id+"'s ticks past "+cutoff.Format(time.TimeOnly), func() bool {
			recs = history(id)
			return len(recs) > 0 && recs[0].Result.ScheduledAt != nil && recs[0].Result.ScheduledAt.After(cutoff)
		}, last)
		seen := map[time.Time][]string{}
		for _, r := range recs {
			if at := r.Result.ScheduledAt; at != nil {
				seen[at.UTC()] = append(seen[at.UTC()], r.Outcome+"/"+r.Result.Reason)
			}
		}
		first := st.Job.UpdatedAt.Truncate(time.Second).Add(time.Second) // the first tick after the definition
		for at := first; !at.After(cutoff); at = at.Add(time.Second) {
			ticks++
			for _, o := range seen[at] {
				ended[o]++
			}
			if len(seen[at]) != 1 {
				t.Errorf("%s: tick %s ended %d times %v, want once", id, at.Format(time.TimeOnly), len(seen[at]), seen[at])
			}
		}
		for at := range seen {
			if at.Before(first) {
				t.Errorf("%s: tick %s is before the job's definition (%s) and ended %v", id, at.Format(time.TimeOnly), st.Job.UpdatedAt.Format(time.TimeOnly), seen[at])
			}
		}
	}
	// Every daily job has its timer, for its next tick.
	timers := bus.NewTimers(b)
	unarmed := 0
	for _, st := range jobs {
		if !strings.HasPrefix(st.Job.ID, "day-") {
			continue
		}
		p, err := timers.Pending(ctx, "cron."+st.Job.ID)
		if err != nil || st.Next == nil || !p.Due.Add(time.Second).Equal(*st.Next) {
			unarmed++
			if unarmed <= 5 {
				t.Errorf("%s: next tick %v, timer %+v (%v); want its timer armed a second before its next tick", st.Job.ID, st.Next, p.Due, err)
			}
		}
	}
	if unarmed > 0 {
		t.Errorf("%d of %d daily jobs without their timer", unarmed, daily)
	}
	t.Logf("%d kills; %d ticks of %d per-second jobs checked up to %s, ended %v; %d daily jobs armed", kills, ticks, perSecond, cutoff.Format(time.TimeOnly), ended, daily-unarmed)
}
