package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/triggers"
	"github.com/agentwork/agentwork/triggers/cron"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// The cluster scenario: how long it runs, the heartbeat's interval and how
// long each heartbeat run takes (longer than the interval, so consecutive
// heartbeats would overlap if the overlap lease did not hold).
const (
	clusterRun     = 60 * time.Second
	clusterEvery   = 10 * time.Second
	heartbeatDelay = 12 * time.Second
)

// The per-second cron jobs of the cluster test, one per overlap policy.
// Each tick's outcome must be what its policies allow: done; skip missed
// (catch-up); skip busy only for overlap skip, whose runs (1.5 s) outlast
// the interval.
var clusterJobs = []struct {
	job   cron.Job
	delay time.Duration
	busy  bool // skip busy is an outcome of this job's ticks
}{
	{cron.Job{ID: "every-skip", Schedule: "* * * * * *", Prompt: "tick skip", Overlap: cron.OverlapSkip}, 1500 * time.Millisecond, true},
	{cron.Job{ID: "every-queue", Schedule: "@every 1s", Prompt: "tick queue", Overlap: cron.OverlapQueue}, 200 * time.Millisecond, false},
	{cron.Job{ID: "every-allow", Schedule: "*/1 * * * * *", Prompt: "tick allow", Overlap: cron.OverlapAllow, Catchup: cron.Catchup{Policy: cron.CatchupSkip}}, 0, false},
}

// TestClusterExactlyOnce runs three runtimes on a 3-node cluster (R3
// streams) for a minute: three per-second cron jobs and a 10 s heartbeat
// whose runs take 12 s. Meanwhile each runtime is restarted once (two
// cleanly, one abruptly: its connection dropped before it stops), the
// leaders of the timers and requests streams are stepped down, and a node
// is stopped and started again. Then, from the events stream: every tick
// in the window has exactly one outcome (done, or skip missed/busy as its
// policies allow), no request ran twice, heartbeat model calls never
// overlapped, and nothing is left pending in the consumers.
func TestClusterExactlyOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a 3-node cluster and three runtimes for about 75s")
	}
	c := bustest.NewCluster(t, 3)
	obs := c.Open() // the observer: reads events, steps leaders down
	ctx := t.Context()

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, heartbeat.DefaultChecklist), []byte(checklist), 0o600); err != nil {
		t.Fatal(err)
	}
	rules := []script.Rule{{Match: script.Match{Source: bus.SourceHeartbeat}, Reply: script.Reply{Text: "all is well", Delay: heartbeatDelay}}}
	// A short grace: a fire later than 3 s (a leader election, a node
	// down, a loaded machine) follows the jobs' catch-up policies.
	cfg := cron.Config{Grace: 3 * time.Second}
	for _, j := range clusterJobs {
		j.job.Targets = []string{target}
		cfg.Jobs = append(cfg.Jobs, j.job)
		rules = append(rules, script.Rule{Match: script.Match{Source: bus.SourceCron, Name: j.job.ID}, Reply: script.Reply{Text: "tick done", Delay: j.delay}})
	}
	sp, err := script.New(script.Config{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	calls := &callRecorder{p: sp}
	rec := &recorder{}

	events := collectEvents(t, obs)
	var rts [3]*clusterRuntime
	for i := range rts {
		rts[i] = startRuntime(t, c, i, cfg, dir, calls, rec)
	}
	for _, rt := range rts {
		select {
		case <-rt.sched.Started():
		case <-time.After(waitTimeout):
			t.Fatalf("runtime %d: the cron scheduler did not start within %s", rt.n, waitTimeout)
		}
	}
	start := time.Now()
	from := start.Truncate(time.Second).Add(2 * time.Second) // the first tick that counts
	to := start.Add(clusterRun).Truncate(time.Second)        // the first after the window

	// The disruptions, one after another, each at its time.
	restarts, stepDowns := 0, 0
	stepDown := func(stream string) func() error {
		return func() error {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := bustest.StepDown(sctx, obs.Conn(), stream); err != nil {
				return err
			}
			stepDowns++
			return nil
		}
	}
	restart := func(i int, abrupt bool) func() error {
		return func() error {
			rts[i].stop(t, abrupt)
			rts[i] = startRuntime(t, c, i, cfg, dir, calls, rec)
			restarts++
			return nil
		}
	}
	stopped := -1
	steps := []struct {
		at   time.Duration
		what string
		do   func() error
	}{
		{6 * time.Second, "timers leader stepped down", stepDown(bus.StreamTimers)},
		{10 * time.Second, "runtime 0 restarted cleanly", restart(0, false)},
		{16 * time.Second, "requests leader stepped down", stepDown(bus.StreamRequests)},
		{21 * time.Second, "runtime 1 restarted abruptly", restart(1, true)},
		{27 * time.Second, "timers leader stepped down", stepDown(bus.StreamTimers)},
		{31 * time.Second, "timers leader node stopped", func() error {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			leader, err := bustest.StreamLeader(sctx, obs.Conn(), bus.StreamTimers)
			if err != nil {
				return err
			}
			stopped = c.Index(leader)
			c.Stop(stopped)
			return nil
		}},
		{39 * time.Second, "node started again", func() error {
			if stopped >= 0 {
				c.Start(stopped)
			}
			return nil
		}},
		{44 * time.Second, "runtime 2 restarted cleanly", restart(2, false)},
		{50 * time.Second, "requests leader stepped down", stepDown(bus.StreamRequests)},
		{54 * time.Second, "timers leader stepped down", stepDown(bus.StreamTimers)},
	}
	for _, s := range steps {
		select {
		case <-ctx.Done():
			t.Fatal("test ended")
		case <-time.After(time.Until(start.Add(s.at))):
		}
		for attempt := 0; ; attempt++ {
			err := s.do()
			if err == nil {
				t.Logf("%5.1fs: %s", time.Since(start).Seconds(), s.what)
				break
			}
			if attempt == 30 {
				t.Fatalf("%s: %v", s.what, err)
			}
			<-time.After(200 * time.Millisecond)
		}
	}
	<-time.After(time.Until(start.Add(clusterRun)))

	// Every tick of the window has an outcome; then the jobs pause and the
	// consumers settle.
	events.waitFor(t, 45*time.Second, func(evs []clusterEvent) bool { return len(missingTicks(evs, from, to)) == 0 },
		func(evs []clusterEvent) string {
			return fmt.Sprintf("ticks without an outcome: %v", missingTicks(evs, from, to))
		})
	for _, j := range clusterJobs {
		if _, err := rts[0].sched.Pause(ctx, j.job.ID, "the test is over"); err != nil {
			t.Fatalf("Pause(%s) = %v", j.job.ID, err)
		}
	}
	settled(t, obs, 45*time.Second)
	for _, rt := range rts {
		rt.stop(t, false)
	}
	evs := events.all()

	// The assertions.
	type tick struct {
		source, name string
		at           time.Time
	}
	byTick := map[tick][]clusterEvent{}
	byRequest := map[string][]clusterEvent{}
	counts := map[string]int{}
	for _, e := range evs {
		if e.res.ScheduledAt == nil || e.res.Manual {
			t.Errorf("event %s %s: not a scheduled tick: %s", e.subject, e.ID, e.Data)
			continue
		}
		k := tick{e.res.Source, e.Subject, e.res.ScheduledAt.UTC()}
		byTick[k] = append(byTick[k], e)
		if e.CausationID != "" {
			byRequest[e.CausationID] = append(byRequest[e.CausationID], e)
		}
		outcome := e.res.Outcome
		if e.res.Reason != "" {
			outcome += " " + e.res.Reason
		}
		counts[e.res.Source+" "+outcome]++
	}
	for k, es := range byTick {
		if len(es) > 1 {
			t.Errorf("%s %s tick %s has %d outcomes, want 1: %s", k.source, k.name, k.at.Format(time.RFC3339), len(es), describe(es))
		}
		inWindow := !k.at.Before(from) && k.at.Before(to)
		for _, e := range es {
			if !allowed(e) && inWindow {
				t.Errorf("%s %s tick %s: outcome %s %s, not one its policies allow: %s", k.source, k.name, k.at.Format(time.RFC3339), e.res.Outcome, e.res.Reason, e.Data)
			}
		}
	}
	for id, es := range byRequest {
		if len(es) > 1 {
			t.Errorf("request %s ran %d times: %s", id, len(es), describe(es))
		}
	}
	ticks := 0
	for _, j := range clusterJobs {
		for at := from; at.Before(to); at = at.Add(time.Second) {
			ticks++
			if len(byTick[tick{bus.SourceCron, j.job.ID, at.UTC()}]) == 0 {
				t.Errorf("cron %s tick %s has no outcome", j.job.ID, at.UTC().Format(time.RFC3339))
			}
		}
	}
	// Heartbeat ticks missed by more than the interval would collapse into
	// one, with no event for the others; two of three runtimes are always
	// up, so every tick must have fired.
	beats := 0
	for at := from.Truncate(clusterEvery); at.Before(to); at = at.Add(clusterEvery) {
		if at.Before(from) {
			continue
		}
		beats++
		if len(byTick[tick{bus.SourceHeartbeat, heartbeat.DefaultName, at.UTC()}]) == 0 {
			t.Errorf("heartbeat tick %s has no outcome", at.UTC().Format(time.RFC3339))
		}
	}
	spans := calls.spans(bus.SourceHeartbeat)
	for i := 1; i < len(spans); i++ {
		if prev, cur := spans[i-1], spans[i]; cur.start.Before(prev.end) {
			t.Errorf("heartbeat model calls overlap: on %s from %s to %s (error %v), on %s from %s", prev.instance, prev.start.Format(time.StampMilli),
				prev.end.Format(time.StampMilli), prev.err, cur.instance, cur.start.Format(time.StampMilli))
		}
	}
	t.Logf("window %s to %s: %d cron ticks of %d jobs, %d heartbeat ticks; %d restarts, %d step-downs, node %d stopped and started",
		from.UTC().Format(time.TimeOnly), to.UTC().Format(time.TimeOnly), ticks, len(clusterJobs), beats, restarts, stepDowns, stopped)
	t.Logf("outcomes (all ticks): %v; %d heartbeat model calls; %d notifications; took %s", counts, len(spans), len(rec.notifications()), time.Since(start).Round(time.Second))
}

// allowed says whether e is an outcome the policies of its tick allow.
func allowed(e clusterEvent) bool {
	switch {
	case e.res.Outcome == bus.OutcomeDone:
		return true
	case e.res.Outcome != bus.OutcomeSkip:
		return false
	case e.res.Source == bus.SourceHeartbeat:
		// A run (the model says all is well: ack) or a tick that found the
		// previous heartbeat running.
		return e.res.Reason == "ack" || e.res.Reason == agentwork.ReasonBusy
	case e.res.Reason == cron.ReasonMissed:
		return true
	}
	for _, j := range clusterJobs {
		if j.job.ID == e.Subject {
			return j.busy && e.res.Reason == agentwork.ReasonBusy
		}
	}
	return false
}

// missingTicks lists the ticks in [from, to) of the cron jobs and the
// heartbeat that have no outcome yet.
func missingTicks(evs []clusterEvent, from, to time.Time) []string {
	seen := map[string]bool{}
	for _, e := range evs {
		if e.res.ScheduledAt != nil {
			seen[e.Subject+"@"+e.res.ScheduledAt.UTC().Format(time.RFC3339)] = true
		}
	}
	var out []string
	for _, j := range clusterJobs {
		for at := from; at.Before(to); at = at.Add(time.Second) {
			if k := j.job.ID + "@" + at.UTC().Format(time.RFC3339); !seen[k] {
				out = append(out, k)
			}
		}
	}
	for at := from.Truncate(clusterEvery); at.Before(to); at = at.Add(clusterEvery) {
		if k := heartbeat.DefaultName + "@" + at.UTC().Format(time.RFC3339); !at.Before(from) && !seen[k] {
			out = append(out, k)
		}
	}
	return out
}

func describe(es []clusterEvent) string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("{%s run %s request %s at %s: %s %s}", e.subject, e.RunID, e.CausationID, e.Time.Format(time.StampMilli), e.res.Outcome, e.res.Reason))
	}
	return strings.Join(out, " ")
}

// clusterRuntime is one agentwork of the cluster: its own bus client, the
// heartbeat and the cron scheduler, the runner with their policies, and a
// dispatcher with the recorder, wired as serve does.
type clusterRuntime struct {
	n     int
	b     *bus.Bus
	sched *cron.Scheduler
	// stop stops the runtime: triggers first, then the consumers, then the
	// bus; abrupt drops the connection first, so nothing is settled.
	stop func(t *testing.T, abrupt bool)
}

func startRuntime(t *testing.T, c *bustest.Cluster, n int, cfg cron.Config, dir string, calls *callRecorder, rec *recorder) *clusterRuntime {
	t.Helper()
	b := c.Open()
	log := zap.NewNop()
	hb, err := heartbeat.New(b, heartbeat.Config{Enabled: true, Targets: []string{target}}, heartbeat.WithBaseDir(dir),
		heartbeat.WithEvery(clusterEvery), heartbeat.WithLogger(log))
	if err != nil {
		t.Fatalf("heartbeat.New() error = %v", err)
	}
	sched, err := cron.New(b, cfg, cron.WithLogger(log))
	if err != nil {
		t.Fatalf("cron.New() error = %v", err)
	}
	trs := []triggers.Trigger{hb, sched}
	policies, err := triggers.Policies(trs...)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.Notify())
	if err != nil {
		t.Fatal(err)
	}
	// A short ack wait (claims of an instance that died expire within
	// 10 s) and shutdown grace (a heartbeat in flight at a clean stop is
	// put back for another instance).
	runner := agentwork.NewRunner(b, &instanceProvider{calls, b.Instance()}, reg,
		agentwork.Config{AckWait: 5 * time.Second, ShutdownGrace: 2 * time.Second, Backoff: []time.Duration{tiny}},
		agentwork.WithConnectors(target), agentwork.WithLogger(log))
	for source, p := range policies {
		runner.Handle(source, p)
	}
	disp := connectors.NewDispatcher(b, connectors.Registry{target: rec}, connectors.DispatcherConfig{Backoff: []time.Duration{tiny}}, log)

	consumeCtx, stopConsumers := context.WithCancel(context.WithoutCancel(t.Context()))
	triggerCtx, stopTriggers := context.WithCancel(context.WithoutCancel(t.Context()))
	var consumers, trigs sync.WaitGroup
	errs := make(chan error, 4)
	consumers.Go(func() { errs <- runner.Run(consumeCtx) })
	consumers.Go(func() { errs <- disp.Run(consumeCtx) })
	for _, tr := range trs {
		trigs.Go(func() { errs <- tr.Run(triggerCtx) })
	}
	rt := &clusterRuntime{n: n, b: b, sched: sched}
	var once sync.Once
	rt.stop = func(t *testing.T, abrupt bool) {
		once.Do(func() {
			if abrupt {
				b.Conn().Close()
			}
			stopTriggers()
			trigs.Wait()
			stopConsumers()
			consumers.Wait()
			close(errs)
			for err := range errs {
				if err != nil && !errors.Is(err, context.Canceled) && !abrupt {
					t.Errorf("runtime %d: Run() = %v, want nil", n, err)
				}
			}
			_ = b.Close()
		})
	}
	t.Cleanup(func() { rt.stop(t, false) })
	return rt
}

// clusterEvent is one outcome event read from the events stream.
type clusterEvent struct {
	subject string
	bus.Event
	res agentwork.Result
}

// eventLog reads the events stream with an ordered consumer (which
// follows leader changes and node restarts) into memory.
type eventLog struct {
	ch  chan clusterEvent
	evs []clusterEvent
}

func collectEvents(t *testing.T, b *bus.Bus) *eventLog {
	t.Helper()
	cons, err := b.JetStream().OrderedConsumer(t.Context(), bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subjects.Event(bus.SourceCron, "*"), b.Subjects.Event(bus.SourceHeartbeat, "*")},
	})
	if err != nil {
		t.Fatalf("OrderedConsumer: %v", err)
	}
	l := &eventLog{ch: make(chan clusterEvent, 1<<16)}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev, err := bus.DecodeEvent(m.Data())
		if err != nil {
			t.Errorf("event on %s is not a CloudEvent: %v: %s", m.Subject(), err, m.Data())
			return
		}
		e := clusterEvent{subject: m.Subject(), Event: ev}
		if err := ev.DecodeData(&e.res); err != nil {
			t.Errorf("event on %s: %v", m.Subject(), err)
			return
		}
		l.ch <- e
	})
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	t.Cleanup(cc.Stop)
	return l
}

// waitFor waits until ok says yes to the events read so far, at most d.
func (l *eventLog) waitFor(t *testing.T, d time.Duration, ok func([]clusterEvent) bool, why func([]clusterEvent) string) {
	t.Helper()
	timeout := time.After(d)
	for !ok(l.evs) {
		select {
		case e := <-l.ch:
			l.evs = append(l.evs, e)
		case <-timeout:
			t.Fatalf("not within %s: %s", d, why(l.evs))
		}
	}
}

// all returns every event read, once the stream's last event is in.
func (l *eventLog) all() []clusterEvent {
	for {
		select {
		case e := <-l.ch:
			l.evs = append(l.evs, e)
		default:
			return l.evs
		}
	}
}

// settled waits until every consumer of the requests, timers and
// deliveries streams has nothing pending and nothing waiting for an ack
// (at one instant), at most d.
func settled(t *testing.T, b *bus.Bus, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last string
	for {
		var busy []string
		for _, stream := range []string{bus.StreamRequests, bus.StreamTimers, bus.StreamDeliveries} {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			st, err := b.JetStream().Stream(ctx, stream)
			if err != nil {
				cancel()
				busy = append(busy, fmt.Sprintf("%s: %v", stream, err))
				continue
			}
			for info := range st.ListConsumers(ctx).Info() {
				if info.NumPending != 0 || info.NumAckPending != 0 {
					busy = append(busy, fmt.Sprintf("%s/%s: %d pending, %d waiting for ack", stream, info.Name, info.NumPending, info.NumAckPending))
				}
			}
			cancel()
		}
		if len(busy) == 0 {
			return
		}
		last = strings.Join(busy, "; ")
		if time.Now().After(deadline) {
			t.Errorf("consumers not settled within %s: %s", d, last)
			return
		}
		<-time.After(200 * time.Millisecond)
	}
}

// instanceProvider is the model of one runtime: the shared recorder,
// told which instance makes each call.
type instanceProvider struct {
	rec      *callRecorder
	instance string
}

var _ model.Provider = (*instanceProvider)(nil)

// Complete implements model.Provider.
func (p *instanceProvider) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	return p.rec.complete(ctx, req, p.instance)
}

// callRecorder wraps the model and keeps when each call started and ended.
type callRecorder struct {
	p     model.Provider
	mu    sync.Mutex
	calls []span
}

type span struct {
	source, instance string
	start, end       time.Time
	err              error
}

func (r *callRecorder) complete(ctx context.Context, req model.Request, instance string) (model.Reply, error) {
	s := span{source: req.Meta["source"], instance: instance, start: time.Now()}
	reply, err := r.p.Complete(ctx, req)
	s.err = err
	s.end = time.Now()
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
	return reply, err
}

// spans returns the calls of source, by start.
func (r *callRecorder) spans(source string) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, s := range r.calls {
		if s.source == source {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b span) int { return a.start.Compare(b.start) })
	return out
}
