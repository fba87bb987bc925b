package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai/openaifake"
)

// childEnv makes the test binary act as the agentwork command (see TestMain),
// so a test can run `agentwork serve` as a real process and kill -9 it.
const childEnv = "AGENTWORK_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(mcpServerEnv) != "" {
		os.Exit(runMCPServer())
	}
	if os.Getenv(appendEnv) != "" && os.Getenv(childEnv) == "" {
		os.Exit(runAppend())
	}
	if os.Getenv(childEnv) == "1" {
		os.Args = append([]string{"agentwork"}, strings.Fields(os.Getenv(childEnv+"_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type child struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
}

func startChild(t *testing.T, dataDir string, args ...string) *child {
	t.Helper()
	os.Remove(filepath.Join(dataDir, "nats.json"))
	c := &child{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"=1", childEnv+"_ARGS="+strings.Join(args, " "))
	c.cmd.Stdout, c.cmd.Stderr = c.stdout, c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	waitFor(t, 30*time.Second, "the server's credentials", func() bool {
		_, err := os.Stat(filepath.Join(dataDir, "nats.json"))
		return err == nil
	}, c)
	return c
}

// crashServer is `agentwork serve` in a child process on a data dir of
// its own, to be killed with SIGKILL and started again on the same data.
type crashServer struct {
	t       *testing.T
	dataDir string
	args    []string
	*child
}

// startCrashServer writes config and starts serve on it in a child process.
func startCrashServer(t *testing.T, config string) *crashServer {
	t.Helper()
	dir := t.TempDir()
	s := &crashServer{t: t, dataDir: filepath.Join(dir, "data")}
	s.args = []string{"serve", "--config", writeConfig(t, dir, config), "--data-dir", s.dataDir}
	s.child = startChild(t, s.dataDir, s.args...)
	return s
}

// dial connects to the running server as the CLI does.
func (s *crashServer) dial(ctx context.Context) *bus.Bus {
	s.t.Helper()
	b, err := bus.Dial(ctx, bus.Config{DataDir: s.dataDir})
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

// kill9 kills the server with SIGKILL and waits until it is gone. The
// child it was stays readable (stdout, stderr).
func (s *crashServer) kill9() *child {
	s.t.Helper()
	killed := s.child
	if err := killed.cmd.Process.Kill(); err != nil {
		s.t.Fatal(err)
	}
	_ = killed.cmd.Wait()
	return killed
}

// restart starts serve again on the same data dir.
func (s *crashServer) restart() { s.child = startChild(s.t, s.dataDir, s.args...) }

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool, c *child) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s\nserver stderr:\n%s", what, d, c.stderr.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// TestKilledMidRunRunsOnceAfterRestart kills the server with SIGKILL while
// the model is answering, restarts it on the same data dir, and checks the
// request is finished exactly once: one done event, one delivery.
func TestKilledMidRunRunsOnceAfterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	srv := startCrashServer(t, `
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
runner:
  ack_wait: 1s
model:
  script:
    rules:
      - match: {source: task}
        text: "backup checked"
        delay: 1500ms
`)
	first := srv.child

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b := srv.dial(ctx)
	pub, err := agentwork.Publish(ctx, b, agentwork.Request{Source: "task", Name: "crash", Prompt: "check the backup"}, agentwork.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Kill it once the run has claimed the request (the model is answering).
	waitFor(t, 20*time.Second, "run claim", func() bool {
		e, err := b.Locks.Get(ctx, "run."+pub.ID)
		return err == nil && strings.Contains(string(e.Value()), `"running"`)
	}, first)
	b.Close()
	srv.kill9()
	if strings.Contains(first.stdout.String(), "backup checked") {
		t.Fatal("the first server delivered before it was killed; the test did not kill it mid-run")
	}

	srv.restart()
	second := srv.child
	b2 := srv.dial(ctx)
	defer b2.Close()
	second.stdout.waitContains(t, "backup checked", 30*time.Second)

	// Give a second run (if the claim were broken) time to happen: wait
	// until the request consumer has nothing pending or unacked.
	waitFor(t, 20*time.Second, "settled request consumer", func() bool {
		cons, err := b2.JetStream().Consumer(ctx, bus.StreamRequests, agentwork.ConsumerName)
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, second)

	var runEvents []bus.Event
	oc, err := b2.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{b2.Subjects.Event("task", "*")}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := oc.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		ev, err := bus.DecodeEvent(m.Data())
		if err == nil && ev.CausationID == pub.ID {
			runEvents = append(runEvents, ev)
		}
	}
	if len(runEvents) != 1 || runEvents[0].Type != "agentwork.task.done" {
		t.Fatalf("events for the request = %v, want exactly one agentwork.task.done", runEvents)
	}
	if n := strings.Count(second.stdout.String(), "backup checked"); n != 1 {
		t.Fatalf("console printed the notification %d times, want 1:\n%s", n, second.stdout.String())
	}
}

// TestCronKilledBetweenTicks kills the server with SIGKILL, keeps it down
// for a few ticks of a per-second job, and restarts it: the missed ticks
// follow the job's catch-up policy (run_once: the latest runs, the others
// are recorded as missed) and every tick appears in history exactly once.
func TestCronKilledBetweenTicks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	srv := startCrashServer(t, `
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
cron:
  grace: 1s
  jobs:
    - id: tick
      schedule: "* * * * * *"
      prompt: ping
      catchup: run_once
`)
	first := srv.child
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	history := func(b *bus.Bus) []agentwork.Record {
		recs, err := agentwork.History(ctx, b, agentwork.HistoryQuery{Sources: []string{"cron"}, Names: []string{"tick"}, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	b := srv.dial(ctx)
	waitFor(t, 30*time.Second, "two cron runs", func() bool { return len(history(b)) >= 2 }, first)
	b.Close()
	srv.kill9()
	killed := time.Now()
	time.Sleep(4 * time.Second) // the downtime under test: ticks pass while nothing runs

	srv.restart()
	second := srv.child
	b2 := srv.dial(ctx)
	defer b2.Close()
	restarted := time.Now()
	// Wait until ticks after the restart run again, and a missed tick of the
	// downtime is recorded.
	waitFor(t, 30*time.Second, "missed ticks in history and runs after the restart", func() bool {
		missed, after := 0, 0
		for _, r := range history(b2) {
			at := r.Result.ScheduledAt
			if at == nil {
				continue
			}
			if r.Result.Outcome == "skip" && r.Result.Reason == "missed" {
				missed++
			}
			if r.Result.Outcome == "done" && at.After(restarted.Add(time.Second)) {
				after++
			}
		}
		return missed > 0 && after > 0
	}, second)

	perTick := map[time.Time][]string{}
	for _, r := range history(b2) {
		if at := r.Result.ScheduledAt; at != nil {
			perTick[at.UTC()] = append(perTick[at.UTC()], r.Result.Outcome+"/"+r.Result.Reason)
		}
	}
	caughtUp := 0
	for at, outcomes := range perTick {
		if len(outcomes) != 1 {
			t.Errorf("tick %s recorded %d times (%v), want once", at.Format(time.TimeOnly), len(outcomes), outcomes)
		}
		if at.After(killed) && at.Before(restarted) && outcomes[0] == "done/" {
			caughtUp++
		}
	}
	missed := 0
	for _, o := range perTick {
		if o[0] == "skip/missed" {
			missed++
		}
	}
	t.Logf("%d ticks in history; downtime %s: %d ran as catch-up, %d recorded as missed", len(perTick), restarted.Sub(killed).Round(100*time.Millisecond), caughtUp, missed)
	// run_once: of the ticks that fell in the downtime, at most one ran.
	if caughtUp > 1 {
		t.Errorf("%d ticks of the downtime ran, want at most one (catchup run_once)", caughtUp)
	}
}

// TestKilledWithRunsInFlightResumesWithinSeconds kills the server with
// SIGKILL while 100 runs of 3 s are in flight, with the default ack wait
// (30 s) and run claim lease (60 s), and restarts it on the same data dir:
// the new process knows the old one is gone, so its requests are handed
// out again and their claims taken over at once. Every request ends done
// exactly once, the last within 25 s of the restart.
func TestKilledWithRunsInFlightResumesWithinSeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const runs = 100
	srv := startCrashServer(t, `
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
runner:
  concurrency: 100
model:
  script:
    rules:
      - match: {source: task}
        text: "checked"
        delay: 3s
`)
	first := srv.child
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	b := srv.dial(ctx)
	claims, err := b.Locks.Watch(ctx, "run.*", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for range runs {
		pub, err := agentwork.Publish(ctx, b, agentwork.Request{Source: "task", Name: "load", Prompt: "check"}, agentwork.PublishOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids[pub.ID] = true
	}
	// Kill it once every run has claimed its request (the model is
	// answering, for 3 s).
	running := map[string]bool{}
	for len(running) < runs {
		select {
		case e := <-claims.Updates():
			if e != nil && strings.Contains(string(e.Value()), `"state":"running"`) {
				running[e.Key()] = true
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d runs claimed before the deadline\nserver stderr:\n%s", len(running), runs, first.stderr.String())
		}
	}
	_ = claims.Stop()
	srv.kill9()
	b.Close()
	before := strings.Count(first.stdout.String(), "checked")
	if before == runs {
		t.Fatal("every run finished before the kill; the test did not kill it mid-run")
	}

	restarted := time.Now()
	srv.restart()
	second := srv.child
	b2 := srv.dial(ctx)
	defer b2.Close()
	events := make(chan bus.Event, 2*runs)
	oc, err := b2.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{b2.Subjects.Event("task", "*")}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		if ev, err := bus.DecodeEvent(m.Data()); err == nil {
			events <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	perRequest := map[string][]string{}
	var last time.Time
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for done := 0; done < runs; {
		select {
		case ev := <-events:
			if !ids[ev.CausationID] {
				continue
			}
			perRequest[ev.CausationID] = append(perRequest[ev.CausationID], ev.Type)
			if len(perRequest[ev.CausationID]) == 1 {
				done++
			}
			if ev.Time.After(last) {
				last = ev.Time
			}
		case <-deadline.C:
			t.Fatalf("%d of %d requests ended within a minute of the restart\nserver stderr:\n%s", len(perRequest), runs, second.stderr.String())
		}
	}
	// Give a second run of any request (if a claim were broken) time to
	// show: wait until the request consumer has nothing pending or unacked.
	waitFor(t, 30*time.Second, "settled request consumer", func() bool {
		cons, err := b2.JetStream().Consumer(ctx, bus.StreamRequests, agentwork.ConsumerName)
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, second)
	for len(events) > 0 {
		if ev := <-events; ids[ev.CausationID] {
			perRequest[ev.CausationID] = append(perRequest[ev.CausationID], ev.Type)
		}
	}
	for id, types := range perRequest {
		if len(types) != 1 || types[0] != "agentwork.task.done" {
			t.Errorf("request %s: events %v, want exactly one agentwork.task.done", id, types)
		}
	}
	took := last.Sub(restarted)
	t.Logf("%d runs finished before the kill; the last of %d ended %s after the restart", before, runs, took.Round(100*time.Millisecond))
	if took > 25*time.Second {
		t.Errorf("the last run ended %s after the restart, want within 25s", took.Round(100*time.Millisecond))
	}
}

// TestKilledAfterAToolCallDoesNotRepeatIt is issue 11's "no side effect
// twice" with the real binary: a task's model calls a tool of a stdio MCP
// server that appends a line to a file, and the server is killed with
// SIGKILL while the model works on its second reply. After a restart on
// the same data dir the run goes on from its checkpoint: the model is
// asked for the second reply (with the tool's result), not the first
// again, the tool is not called again, the run ends with one done event
// and the file holds the line once.
func TestKilledAfterAToolCallDoesNotRepeatIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const line = "backup checked at 02:00"
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fake, modelYAML := fakeModel(t)
	files := t.TempDir()
	logFile := filepath.Join(files, "log.txt")
	srv := startCrashServer(t, fmt.Sprintf(`
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
tasks:
  log:
    tools: [fs__append_line]
mcp:
  servers:
    fs:
      command: %s
      env:
        %s: serve
      cwd: %s
`, exe, mcpServerEnv, files)+modelYAML)
	first := srv.child
	first.stderr.waitContains(t, "agentwork is running", 30*time.Second)

	fake.Enqueue(
		openaifake.Response{Check: wantOffered("fs__append_line"),
			Reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "a1", Name: "fs__append_line", Arguments: fmt.Sprintf(`{"path":"log.txt","line":%q}`, line)}}}},
		// The second model call hangs until the server is killed.
		openaifake.Response{Check: lastToolResult("appended"), Hang: true},
	)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b := srv.dial(ctx)
	pub, err := agentwork.Publish(ctx, b, agentwork.Request{Source: bus.SourceTask, Name: "log", Prompt: "Append the line to log.txt.", Deliver: agentwork.DeliverReply}, agentwork.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the second model call", func() bool { return len(fake.Requests()) >= 2 }, first)
	b.Close()
	srv.kill9()
	if got, err := os.ReadFile(logFile); err != nil || string(got) != line+"\n" {
		t.Fatalf("before the restart the file holds %q (%v), want the line once", got, err)
	}

	// The run goes on with its second model call: the model still sees the
	// tool's result, and its first reply is not asked for again.
	fake.Enqueue(openaifake.Response{Check: lastToolResult("appended"), Reply: model.Reply{Text: "The line is in log.txt."}})
	srv.restart()
	second := srv.child
	b2 := srv.dial(ctx)
	defer b2.Close()
	ev, res := runEvent(t, ctx, b2, bus.SourceTask, pub.ID)
	if ev.Type != "agentwork.task.done" || res.Reply != "The line is in log.txt." || res.Attempt != 2 {
		t.Fatalf("run event = %s %q (%s) attempt %d, want done with the second reply, attempt 2\nserver stderr:\n%s", ev.Type, res.Reply, res.Error, res.Attempt, second.stderr.String())
	}
	if got := callNames(res); !slices.Equal(got, []string{"fs__append_line:ok"}) {
		t.Errorf("the done event lists %v, want fs__append_line:ok once", got)
	}

	// Give a second run (if the checkpoint were broken) time to happen:
	// wait until the request consumer has nothing pending or unacked.
	waitFor(t, 20*time.Second, "settled request consumer", func() bool {
		cons, err := b2.JetStream().Consumer(ctx, bus.StreamRequests, agentwork.ConsumerName)
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, second)
	oc, err := b2.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{b2.Subjects.Event(bus.SourceTask, "*")}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := oc.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for m := range batch.Messages() {
		if ev, err := bus.DecodeEvent(m.Data()); err == nil && ev.CausationID == pub.ID {
			types = append(types, ev.Type)
		}
	}
	if !slices.Equal(types, []string{"agentwork.task.done"}) {
		t.Errorf("events of the request = %v, want one agentwork.task.done", types)
	}
	if got, err := os.ReadFile(logFile); err != nil || string(got) != line+"\n" {
		t.Errorf("after the restart the file holds %q (%v), want the line once", got, err)
	}
	if n, pending := len(fake.Requests()), fake.Pending(); n != 3 || pending != 0 {
		t.Errorf("the model was called %d times with %d replies left, want 3 calls (two before the kill, one after) and none left", n, pending)
	}
}
