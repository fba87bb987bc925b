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
// again: at each step of its start in turn (the bus up, the reconcile of
// 3,000 jobs done, the arming pass done, or at work when the first ticks
// run), and after a random number of runs (among fires and runs). After
// each kill the restart must run ticks again within 15 s. Then it lets
// the last start run. Every tick of the
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
	// ran counts, per job, the runs of ticks due since up that have ended.
	ran := func(up time.Time) map[string]int {
		b := srv.dial(ctx)
		defer b.Close()
		recs, err := agentwork.History(ctx, b, agentwork.HistoryQuery{Sources: []string{bus.SourceCron}, Outcomes: []string{bus.OutcomeDone}, Limit: 20 * perSecond})
		if err != nil {
			return nil
		}
		out := map[string]int{}
		for _, r := range recs {
			if at := r.Result.ScheduledAt; at != nil && at.After(up) {
				out[r.Result.Name]++
			}
		}
		return out
	}
	// runs waits until n runs of ticks due since up have ended (every job
	// one at least, when all): the jobs fire, and a kill lands among fires
	// and runs. Within 15 s: the fires the killed process had in hand come
	// again at once, not after their ack wait (30 s). Runs of requests the
	// killed process had stored do not count: their ticks were due before.
	runs := func(up time.Time, n int, all bool) {
		waitFor(t, 15*time.Second, fmt.Sprintf("%d runs of ticks due within 15 s of the start (every job: %v)", n, all), func() bool {
			by, total := ran(up), 0
			for _, c := range by {
				total += c
			}
			return total >= n && (!all || len(by) == perSecond)
		}, srv.child)
	}
	// logged waits until the server has logged msg: a step of its start.
	logged := func(msg string) {
		waitFor(t, 30*time.Second, "the log line "+msg, func() bool {
			return strings.Contains(srv.child.stderr.String(), `"msg":"`+msg+`"`)
		}, srv.child)
	}
	// The instants under test. Each even cycle kills at a step of the
	// start, in turn: as the bus is up, ready, the reconcile done, every
	// timer armed, or the first runs of its ticks (the arming pass of the
	// daily jobs still at work). Each odd cycle first sees every job run
	// again (within 15 s, above), and kills after a random number of runs.
	steps := []string{"", "agentwork ready", "cron scheduler started", "cron timers armed", "runs"}
	const kills = 10
	for k := range kills {
		up := time.Now()
		var at string
		switch step := steps[k/2%len(steps)]; {
		case k%2 == 1:
			n := perSecond + rnd.IntN(3*perSecond)
			runs(up, n, true)
			at = fmt.Sprintf("%d runs, each job's", n)
		case step == "runs":
			n := 1 + rnd.IntN(3)
			runs(up, n, false)
			at = fmt.Sprintf("the first %d runs", n)
		case step == "":
			at = "bus up"
		default:
			logged(step)
			at = step
		}
		srv.kill9()
		t.Logf("kill %d: after %s, %s after up", k+1, at, time.Since(up).Round(time.Millisecond))
		srv.restart()
	}
	// The last restart runs again too.
	runs(time.Now(), perSecond, true)
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
