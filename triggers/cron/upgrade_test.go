package cron

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers/budget"
)

// The upgrade from the version that kept config jobs in the jobs bucket.
// That version's start wrote each config job's record (its
// reconcileConfig: the config's job, origin config, normalized, created
// and updated at the start that first saw the definition); its fires and
// pauses wrote the state (cron.<id>, the same key and format now); its
// timers (cron.<id>, the same data now) were armed by the same arm. The
// helpers below write exactly that.

// oldConfigRecords writes the jobs bucket records the earlier version's
// start wrote for cfg's jobs, updated at updated, and returns them by id.
func oldConfigRecords(t *testing.T, b *bus.Bus, cfg Config, updated time.Time) map[string]Job {
	t.Helper()
	s, err := New(b, cfg) // its cfg has the defaults the earlier version's had
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Job{}
	for _, j := range s.cfg.Jobs {
		j.Origin, j.Workflow = OriginConfig, ""
		j.normalize()
		j.CreatedAt, j.UpdatedAt = updated, updated
		data, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Jobs.Put(t.Context(), j.ID, data); err != nil {
			t.Fatal(err)
		}
		out[j.ID] = j
	}
	return out
}

// oldState writes a job's state as the earlier version's fires and pauses
// left it.
func oldState(t *testing.T, b *bus.Bus, id string, st State) {
	t.Helper()
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.State.Put(t.Context(), stateKey(id), data); err != nil {
		t.Fatal(err)
	}
}

// oldTimer arms the job's timer as the earlier version did for its record
// and state (none for a job that does not fire: paused by a person).
func oldTimer(t *testing.T, b *bus.Bus, j Job, st State) {
	t.Helper()
	s, err := New(b, Config{}, WithArmAhead(0)) // it armed every tick
	if err != nil {
		t.Fatal(err)
	}
	sched, err := j.Sched()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.arm(t.Context(), j, sched, st); err != nil {
		t.Fatal(err)
	}
}

// createConsumer starts and stops a scheduler with no jobs: the durable
// consumer of the timers' fires exists, as the earlier version left it.
func createConsumer(t *testing.T, b *bus.Bus) {
	t.Helper()
	_, stop := startScheduler(t, b, Config{}, make(chan TickResult, 1))
	stop()
}

// pendingTimer returns the job's pending timer (ok false: none).
func pendingTimer(t *testing.T, b *bus.Bus, id string) (bus.Timer, bool) {
	t.Helper()
	p, err := bus.NewTimers(b).Pending(t.Context(), timerKey(id))
	if errors.Is(err, bus.ErrNoTimer) {
		return p, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return p, true
}

// revisions returns the revision of each key of kv (0: none).
func revisions(t *testing.T, kv jetstream.KeyValue, keys []string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, k := range keys {
		e, err := kv.Get(t.Context(), k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			t.Fatal(err)
		default:
			out[k] = e.Revision()
		}
	}
	return out
}

// firedTicks collects the fired results of the jobs in want until each
// has fired a tick at or after until; it fails on a result of another
// job (or any missed one).
func firedTicks(t *testing.T, results chan TickResult, want map[string]bool, until time.Time) map[string]map[time.Time]int {
	t.Helper()
	seen := map[string]map[time.Time]int{}
	done := map[string]bool{}
	deadline := time.After(2 * waitFor)
	for len(done) < len(want) {
		select {
		case <-deadline:
			t.Fatalf("%d of %d jobs fired past %s", len(done), len(want), until.Format(time.RFC3339))
		case r := <-results:
			if !want[r.Job] || r.What != "fired" {
				t.Errorf("unexpected tick result %+v", r)
				continue
			}
			if seen[r.Job] == nil {
				seen[r.Job] = map[time.Time]int{}
			}
			seen[r.Job][r.Tick]++
			if !r.Tick.Before(until) {
				done[r.Job] = true
			}
		}
	}
	return seen
}

// checkEachTickOnce checks that job's fired ticks are every tick of its
// 2s schedule from first on, each once: none lost, none twice.
func checkEachTickOnce(t *testing.T, id string, ticks map[time.Time]int, first time.Time) {
	t.Helper()
	got := slices.SortedFunc(func(yield func(time.Time) bool) {
		for k := range ticks {
			if !yield(k) {
				return
			}
		}
	}, time.Time.Compare)
	if len(got) == 0 || !got[0].Equal(first) {
		t.Errorf("%s: first tick fired %v, want %s (the first after the earlier version's last)", id, got, first.Format(time.RFC3339))
		return
	}
	for i, k := range got {
		if want := first.Add(time.Duration(i) * 2 * time.Second); !k.Equal(want) {
			t.Errorf("%s: tick %s lost (fired %v)", id, want.Format(time.RFC3339), got)
			return
		}
		if ticks[k] != 1 {
			t.Errorf("%s: tick %s fired %d times, want once", id, k.Format(time.RFC3339), ticks[k])
		}
	}
}

// Upgrade from the version that wrote config jobs to the jobs bucket, with
// 50 config jobs as it left them: some fired (every 2s, and daily), some
// never, some paused by a person, some paused by their budget with the
// day's spending, their timers pending or fired while no instance was up;
// 10 of them are not in the new config. The new version starts with the
// 40 others: each keeps its times and state (paused stays paused, the
// last tick and the budget's spending kept, the pending timers left as
// they were), every tick across the switch is fired once (none lost, none
// twice), the records it wrote for kept jobs are left in the bucket and
// ignored (each job is listed once), and the dropped jobs lose their
// record, state and timer and never fire. A second restart keeps it all.
func TestUpgradeFromConfigJobsInTheBucket(t *testing.T) {
	b := bustest.New(t)
	createConsumer(t, b)

	now := time.Now().UTC()
	last := now.Truncate(2 * time.Second).Add(-2 * time.Second) // the every-2s jobs' last tick fired
	at := now.Add(2 * time.Hour).Truncate(time.Minute)          // the daily jobs' next tick
	daily := fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour())
	every2s := Catchup{Policy: CatchupRunAll, Max: 100} // every tick fires: none may go missing

	var kept, all Config
	var fastActive, fastPaused, slowActive, slowPaused, budgetPaused, gone []string
	add := func(list *[]string, id string, j Job) {
		*list = append(*list, id)
		j.ID, j.Prompt = id, "p"
		all.Jobs = append(all.Jobs, j)
		if !strings.HasPrefix(id, "gone") {
			kept.Jobs = append(kept.Jobs, j)
		}
	}
	for i := range 16 {
		add(&fastActive, fmt.Sprintf("fast-%02d", i), Job{Schedule: "@every 2s", Catchup: every2s})
	}
	for i := range 4 {
		add(&fastPaused, fmt.Sprintf("fastpaused-%d", i), Job{Schedule: "@every 2s", Catchup: every2s})
	}
	for i := range 12 {
		add(&slowActive, fmt.Sprintf("slow-%02d", i), Job{Schedule: daily})
	}
	for i := range 5 {
		add(&slowPaused, fmt.Sprintf("slowpaused-%d", i), Job{Schedule: daily})
	}
	for i := range 3 {
		add(&budgetPaused, fmt.Sprintf("budget-%d", i), Job{Schedule: daily, Budget: budget.Budget{DailyTokens: 1000}})
	}
	for i := range 10 {
		add(&gone, fmt.Sprintf("gone-%d", i), Job{Schedule: "@every 2s", Catchup: every2s})
	}
	if len(all.Jobs) != 50 {
		t.Fatalf("%d jobs", len(all.Jobs))
	}

	// What the earlier version left: records updated 12 hours ago (the
	// never-fired every-2s jobs just before the last tick: their first
	// tick is the last one), states, timers.
	updated := now.Add(-12 * time.Hour).Truncate(time.Second)
	recs := oldConfigRecords(t, b, all, updated)
	fresh := last.Add(-time.Second)
	firstTick := map[string]time.Time{}
	yesterday := at.Add(-24 * time.Hour)
	pausedAt := now.Add(-time.Hour).Truncate(time.Second)
	states := map[string]State{}
	for i, id := range fastActive {
		if i < 10 {
			states[id] = State{LastTick: ptr(last), LastFired: ptr(last), Fires: 7, Runs: 7, LastOutcome: "done"}
			firstTick[id] = last.Add(2 * time.Second)
			continue
		}
		// Never fired, written just before the last tick.
		j := recs[id]
		j.CreatedAt, j.UpdatedAt = fresh, fresh
		recs[id] = j
		data, _ := json.Marshal(j)
		if _, err := b.Jobs.Put(t.Context(), id, data); err != nil {
			t.Fatal(err)
		}
		firstTick[id] = last
	}
	for _, id := range fastPaused {
		states[id] = State{LastTick: ptr(last), Fires: 3, Paused: true, PausedBy: PausedByOperator, PausedReason: "on hold", PausedAt: ptr(pausedAt)}
	}
	for i, id := range slowActive {
		if i < 6 {
			states[id] = State{LastTick: ptr(yesterday), LastFired: ptr(yesterday), Fires: 4, Runs: 4, LastOutcome: "done"}
		}
	}
	for _, id := range slowPaused {
		states[id] = State{LastTick: ptr(yesterday), Fires: 2, Paused: true, PausedBy: PausedByOperator, PausedReason: "holiday", PausedAt: ptr(pausedAt)}
	}
	for _, id := range budgetPaused {
		states[id] = State{LastTick: ptr(yesterday), Fires: 2, Runs: 2, Paused: true, PausedBy: PausedByBudget, PausedReason: "budget",
			PausedAt: ptr(pausedAt), PausedUntil: ptr(at.Add(time.Minute)), // lifts after the next tick: the one after is due
			Spent: &budget.Spent{Day: now.Format(time.DateOnly), Tokens: 800, LastRun: 400, Runs: 2}}
	}
	for _, id := range gone {
		states[id] = State{LastTick: ptr(last), Fires: 5}
	}
	for id, st := range states {
		oldState(t, b, id, st)
	}
	for _, j := range all.Jobs {
		oldTimer(t, b, recs[j.ID], states[j.ID])
	}
	// The timers it left: pending for the daily and budget-paused jobs,
	// none for the paused ones; those of the every-2s jobs fire (while no
	// instance is up, or just after the start).
	before := map[string]bus.Timer{}
	for _, id := range slices.Concat(slowActive, budgetPaused) {
		p, ok := pendingTimer(t, b, id)
		if !ok {
			t.Fatalf("%s: the earlier version's timer is not pending", id)
		}
		before[id] = p
	}
	var ids, stateKeys []string
	for _, j := range all.Jobs {
		ids = append(ids, j.ID)
		stateKeys = append(stateKeys, stateKey(j.ID))
	}
	recRevs := revisions(t, b.Jobs, ids)
	stateRevs := revisions(t, b.State, stateKeys)

	// The new version starts with the kept jobs.
	results := make(chan TickResult, 10000)
	s, stop := startScheduler(t, b, kept, results)
	switched := time.Now()
	waitSwept(t, s)

	check := func(s *Scheduler, when string) {
		t.Helper()
		for _, j := range kept.Jobs {
			got, err := s.Get(t.Context(), j.ID)
			if err != nil {
				t.Errorf("%s: Get %s: %v", when, j.ID, err)
				continue
			}
			old := recs[j.ID]
			if !got.Job.CreatedAt.Equal(old.CreatedAt) || !got.Job.UpdatedAt.Equal(old.UpdatedAt) {
				t.Errorf("%s: %s: created %s, updated %s; want the earlier version's %s, %s", when, j.ID,
					got.Job.CreatedAt, got.Job.UpdatedAt, old.CreatedAt, old.UpdatedAt)
			}
			paused := slices.Contains(fastPaused, j.ID) || slices.Contains(slowPaused, j.ID) || slices.Contains(budgetPaused, j.ID)
			if want := map[bool]string{true: StatusPaused, false: StatusActive}[paused]; got.Status != want {
				t.Errorf("%s: %s: status %s, want %s", when, j.ID, got.Status, want)
			}
		}
		for _, id := range slices.Concat(slowActive, budgetPaused) {
			p, ok := pendingTimer(t, b, id)
			if !ok || !p.Due.Equal(before[id].Due) || string(p.Data) != string(before[id].Data) {
				t.Errorf("%s: %s: timer %v %s %s; want the earlier version's, due %s %s", when, id, ok, p.Due, p.Data, before[id].Due, before[id].Data)
			}
		}
		for _, id := range slices.Concat(fastPaused, slowPaused) {
			if p, ok := pendingTimer(t, b, id); ok {
				t.Errorf("%s: %s, paused by a person: timer due %s, want none", when, id, p.Due)
			}
		}
		// The states of the jobs that did not fire are as they were:
		// the start wrote none of them.
		var quiet []string
		for _, id := range slices.Concat(fastPaused, slowActive, slowPaused, budgetPaused) {
			quiet = append(quiet, stateKey(id))
		}
		for k, rev := range revisions(t, b.State, quiet) {
			if rev != stateRevs[k] {
				t.Errorf("%s: state %s rewritten (revision %d, was %d)", when, k, rev, stateRevs[k])
			}
		}
		for _, id := range budgetPaused {
			st, err := readState(t.Context(), b.State, id)
			if err != nil || st.Spent == nil || st.Spent.Tokens != 800 || st.PausedBy != PausedByBudget {
				t.Errorf("%s: %s: state %+v, %v; want the budget's pause and spending kept", when, id, st, err)
			}
		}
		// The dropped jobs: no record, state or timer.
		for _, id := range gone {
			if _, err := b.Jobs.Get(t.Context(), id); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Errorf("%s: record of dropped %s: %v; want removed", when, id, err)
			}
			if _, err := b.State.Get(t.Context(), stateKey(id)); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Errorf("%s: state of dropped %s: %v; want removed", when, id, err)
			}
			if _, err := s.Get(t.Context(), id); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: Get(dropped %s) = %v; want not found", when, id, err)
			}
		}
		// Each kept job listed once.
		page, more, err := s.List(t.Context(), ListQuery{Limit: 1000})
		if err != nil || more || len(page) != len(kept.Jobs) {
			t.Errorf("%s: List: %d jobs (more %v), %v; want %d", when, len(page), more, err, len(kept.Jobs))
		}
	}

	// The every-2s jobs fire each tick once from the first after the
	// earlier version's last, through two ticks after the switch.
	want := map[string]bool{}
	for _, id := range fastActive {
		want[id] = true
	}
	fired := firedTicks(t, results, want, switched.Add(4*time.Second))
	for _, id := range gone {
		// The dropped jobs' timers are cancelled (a stored fire finds no job).
		eventually(t, func() bool { _, ok := pendingTimer(t, b, id); return !ok })
	}
	check(s, "after the upgrade")
	// The records of kept jobs: left in the bucket as they were, ignored.
	var keptIDs []string
	for _, j := range kept.Jobs {
		keptIDs = append(keptIDs, j.ID)
	}
	for id, rev := range revisions(t, b.Jobs, keptIDs) {
		if rev != recRevs[id] {
			t.Errorf("record of %s: revision %d, want %d (left as the earlier version wrote it)", id, rev, recRevs[id])
		}
	}

	// A second restart reads the index the upgrade wrote: the same.
	stop()
	drain := func(into map[string]map[time.Time]int) {
		for len(results) > 0 {
			r := <-results
			if !want[r.Job] || r.What != "fired" {
				t.Errorf("unexpected tick result %+v", r)
				continue
			}
			into[r.Job][r.Tick]++
		}
	}
	drain(fired)
	s, stop = startScheduler(t, b, kept, results)
	waitSwept(t, s)
	check(s, "after a second restart")
	more := firedTicks(t, results, want, time.Now().Add(2*time.Second))
	stop()
	drain(more)
	for id := range want {
		for k, n := range more[id] {
			fired[id][k] += n
		}
		checkEachTickOnce(t, id, fired[id], firstTick[id])
	}
	for _, r := range requests(t, b) {
		if !want[r.Req.Name] {
			t.Errorf("request of %s stored; want none (paused or dropped)", r.Req.Name)
		}
	}
}

// A timer of a config job the new config dropped may have fired while no
// instance was up: its stored fire can be handled at the start before the
// config is reconciled (the fires are handled from the first moment, the
// records removed after the watches load). The record the earlier
// version left is no job of the config: the fire finds nothing to fire.
func TestUpgradeDroppedJobsStoredFireFiresNothing(t *testing.T) {
	b := bustest.New(t)
	last := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	dropped := Config{Jobs: []Job{{ID: "gone", Schedule: "* * * * *", Prompt: "p"}}}
	recs := oldConfigRecords(t, b, dropped, last.Add(-time.Hour))
	oldState(t, b, "gone", State{LastTick: ptr(last.Add(-time.Minute)), Fires: 5})
	s, err := New(b, Config{Jobs: []Job{{ID: "kept", Schedule: "@daily", Prompt: "p"}}})
	if err != nil {
		t.Fatal(err)
	}
	// The stored fire, handled before Run has reconciled the config.
	if err := s.fireJob(t.Context(), zap.NewNop(), "gone", 1); err != nil {
		t.Fatal(err)
	}
	if reqs := requests(t, b); len(reqs) != 0 {
		t.Errorf("the dropped job %s (record %+v) fired: %+v", "gone", recs["gone"], reqs)
	}
	if _, ok := pendingTimer(t, b, "gone"); ok {
		t.Error("the dropped job's fire armed its next timer")
	}
}

// An API job beside config jobs the earlier version kept in the bucket
// (it refused to update or delete a config job through the API, so no
// config job was changed there): the upgrade leaves the API job's record
// untouched, and it fires each tick once across the switch, as does the
// config job.
func TestUpgradeKeepsAPIJobs(t *testing.T) {
	b := bustest.New(t)
	every2s := Catchup{Policy: CatchupRunAll, Max: 100}
	results := make(chan TickResult, 1000)
	// The earlier version ran with the API job (created as it created
	// them) and the config job.
	old, stop := startScheduler(t, b, Config{}, results)
	if _, err := old.Add(t.Context(), Job{ID: "api", Schedule: "@every 2s", Prompt: "p", Catchup: every2s}); err != nil {
		t.Fatal(err)
	}
	fired := firedTicks(t, results, map[string]bool{"api": true}, time.Now().Add(2*time.Second))
	stop()
	// What it left of the config job (written here, after the run of this
	// version that stands in for it and would not know the job).
	cfg := Config{Jobs: []Job{{ID: "cfg", Schedule: "@every 2s", Prompt: "p", Catchup: every2s}}}
	last := time.Now().UTC().Truncate(2 * time.Second).Add(-2 * time.Second)
	recs := oldConfigRecords(t, b, cfg, last.Add(-time.Hour))
	st := State{LastTick: ptr(last), Fires: 9}
	oldState(t, b, "cfg", st)
	oldTimer(t, b, recs["cfg"], st)
	apiRec, err := b.Jobs.Get(t.Context(), "api")
	if err != nil {
		t.Fatal(err)
	}
	// The old run's results: the API job's ticks.
	fired["cfg"] = map[time.Time]int{}
	for len(results) > 0 {
		r := <-results
		if r.What != "fired" {
			t.Fatalf("result %+v", r)
		}
		fired[r.Job][r.Tick]++
	}
	stateRev := func() uint64 { return revisions(t, b.State, []string{stateKey("api")})[stateKey("api")] }
	before := stateRev()
	var firstAPI time.Time
	for k := range fired["api"] {
		if firstAPI.IsZero() || k.Before(firstAPI) {
			firstAPI = k
		}
	}

	s, stop := startScheduler(t, b, cfg, results)
	waitSwept(t, s)
	more := firedTicks(t, results, map[string]bool{"api": true, "cfg": true}, time.Now().Add(4*time.Second))
	got, err := s.Get(t.Context(), "api")
	if err != nil || got.Job.Origin != OriginAPI || !got.Job.UpdatedAt.Equal(got.Job.CreatedAt) {
		t.Errorf("Get(api) = %+v, %v; want the API job as created", got.Job, err)
	}
	page, _, err := s.List(t.Context(), ListQuery{Limit: 10})
	if err != nil || len(page) != 2 {
		t.Errorf("List: %d jobs, %v; want 2", len(page), err)
	}
	stop()
	for len(results) > 0 {
		r := <-results
		more[r.Job][r.Tick]++
	}
	if e, err := b.Jobs.Get(t.Context(), "api"); err != nil || e.Revision() != apiRec.Revision() || string(e.Value()) != string(apiRec.Value()) {
		t.Errorf("the API job's record after the upgrade: %v; want untouched (revision %d)", err, apiRec.Revision())
	}
	if stateRev() == before {
		t.Error("the API job's state was not written after the upgrade: it did not fire")
	}
	for id, ticks := range more {
		for k, n := range ticks {
			fired[id][k] += n
		}
	}
	checkEachTickOnce(t, "api", fired["api"], firstAPI)
	checkEachTickOnce(t, "cfg", fired["cfg"], last.Add(2*time.Second))
}
