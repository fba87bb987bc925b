package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/tools/schedule"
	"github.com/agentwork/agentwork/triggers/cron"
)

// TestAgentSchedulesAOneShot is issue 12's self-scheduling promise end to
// end, with the real binary and the OpenAI-compatible fake: a task whose
// scope has schedule_* calls schedule_create with in "2s"; the one-shot
// (origin agent in cron list) fires once, its run (offered notify_user
// alone, cron.agent.tools) notifies, the text reaches the console, and the
// job deletes itself. The same call again with the same idempotency key
// creates nothing. A task whose scope lacks schedule_* is not offered the
// tool, and a forced call is refused without a job.
func TestAgentSchedulesAOneShot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const reminder = "Your tea is ready."
	fake, modelYAML := fakeModel(t)
	srv := startCrashServer(t, `
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
runner:
  max_attempts: 1
tasks:
  planner:
    tools: [schedule_*]
`+modelYAML)
	srv.stderr.waitContains(t, "agentwork is running", 30*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b := srv.dial(ctx)
	defer b.Close()
	cli := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(ctx, append(args, "--data-dir", srv.dataDir), &out, &errOut); err != nil {
			t.Fatalf("agentwork %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	// Every change to the jobs, from the start.
	jobs, err := b.Jobs.WatchAll(ctx, jetstream.IncludeHistory())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = jobs.Stop() }()
	nextChange := func() jetstream.KeyValueEntry {
		t.Helper()
		for {
			select {
			case e := <-jobs.Updates():
				if e != nil {
					return e
				}
			case <-ctx.Done():
				t.Fatal("no change to the jobs")
			}
		}
	}

	const create = `{"name":"tea","prompt":"Tell the user with notify_user: ` + reminder + `","in":"2s","idempotency_key":"tea-1"}`
	var listed string
	fake.Enqueue(
		// The planner's run (deliver reply: no notify_user): offered the
		// schedule tools, it schedules.
		openaifake.Response{Check: wantOffered(schedule.CreateName, schedule.DeleteName, schedule.ListName, schedule.PauseName, schedule.ResumeName, schedule.RunName),
			Reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "s1", Name: schedule.CreateName, Arguments: create}}}},
		openaifake.Response{Check: lastToolResult("one-shot, fires at "), Reply: model.Reply{Text: "Scheduled."}},
		// The one-shot's run, two seconds later: notify_user alone. While
		// it runs, cron list shows the job as the agent's (completed: its
		// one tick is out).
		openaifake.Response{Check: func(r openaifake.Request) error {
			var out, errOut bytes.Buffer
			if err := run(ctx, []string{"cron", "list", "--data-dir", srv.dataDir}, &out, &errOut); err != nil {
				return err
			}
			listed = out.String()
			return wantOffered("notify_user")(r)
		}, Reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "n1", Name: "notify_user", Arguments: fmt.Sprintf(`{"text":%q}`, reminder)}}}},
		openaifake.Text("Reminded."),
	)
	out := cli("task", "send", "remind me of the tea in 2 seconds", "--name", "planner", "--deliver", "reply", "--wait")
	if !strings.Contains(out, "Scheduled.") {
		t.Fatalf("task send --wait = %s, want the planner's reply", out)
	}
	added := nextChange()
	id := added.Key()
	if !strings.HasPrefix(id, "agent-") || added.Operation() != jetstream.KeyValuePut {
		t.Fatalf("first change to the jobs = %s %s, want an agent job added", added.Operation(), id)
	}
	// It fires once, delivers, and deletes itself.
	srv.stdout.waitContains(t, reminder, 30*time.Second)
	if removed := nextChange(); removed.Key() != id || removed.Operation() != jetstream.KeyValueDelete {
		t.Fatalf("next change to the jobs = %s %s, want %s deleted", removed.Operation(), removed.Key(), id)
	}
	if !regexpMatch(id+`\s+tea\s+agent \(task/planner\)\s+completed\s+at `, listed) {
		t.Errorf("cron list while the one-shot ran:\n%s\nwant %s, named tea, of origin agent (task/planner)", listed, id)
	}
	// The job is gone; its history still says which job it was by name.
	if out := cli("cron", "history", id); !strings.Contains(out, "job "+id+" (tea)") || !regexpMatch(`\bdone\b`, out) {
		t.Errorf("cron history of the deleted one-shot:\n%s\nwant its name tea beside its id, and its done run", out)
	}
	if out := cli("cron", "list"); strings.Contains(out, id) {
		t.Errorf("cron list after the run:\n%s\nwant %s gone", out, id)
	}
	hist, err := agentwork.History(ctx, b, agentwork.HistoryQuery{Sources: []string{bus.SourceCron}, Names: []string{id}})
	if err != nil || len(hist) != 1 || hist[0].Outcome != bus.OutcomeDone || hist[0].Result.Metadata[cron.MetaName] != "tea" {
		t.Errorf("the one-shot's history = %d records, %v; want one done run, with the job's name in its metadata (%s)", len(hist), err, cron.MetaName)
		for _, r := range hist {
			t.Logf("%s: metadata %v", r.Outcome, r.Result.Metadata)
		}
	}

	// The same call again: nothing new.
	fake.Enqueue(
		openaifake.Response{Reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "s2", Name: schedule.CreateName, Arguments: create}}}},
		openaifake.Response{Check: lastToolResult("nothing new created: the job " + id), Reply: model.Reply{Text: "Already done."}},
	)
	pub, err := agentwork.Publish(ctx, b, agentwork.Request{Source: bus.SourceTask, Name: "planner", Prompt: "remind me of the tea in 2 seconds", Deliver: agentwork.DeliverReply}, agentwork.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, r := runEvent(t, ctx, b, bus.SourceTask, pub.ID); r.Outcome != bus.OutcomeDone || !slices.Equal(callNames(r), []string{"schedule_create:ok"}) {
		t.Errorf("the repeated call's run = %s %v (%s), want done with schedule_create:ok", r.Outcome, callNames(r), r.Error)
	}

	// A task without schedule_* in its scope: not offered, a forced call
	// refused.
	fake.Enqueue(
		openaifake.Response{Check: wantOffered("notify_user"),
			Reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "s3", Name: schedule.CreateName, Arguments: `{"name":"spam","prompt":"x","in":"2s","idempotency_key":"other"}`}}}},
		openaifake.Response{Check: lastToolResult(`"schedule_create" is not a tool of this run`), Reply: model.Reply{Text: "I cannot schedule."}},
	)
	pub, err = agentwork.Publish(ctx, b, agentwork.Request{Source: bus.SourceTask, Name: "default", Prompt: "remind me", Deliver: agentwork.DeliverReply}, agentwork.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, r := runEvent(t, ctx, b, bus.SourceTask, pub.ID); !slices.Equal(callNames(r), []string{"schedule_create:refused"}) {
		t.Errorf("the unscoped task's run = %s %v (%s), want schedule_create:refused", r.Outcome, callNames(r), r.Error)
	}
	if keys, err := b.Jobs.Keys(ctx); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Errorf("jobs after the refused and the repeated calls = %v, %v; want none", keys, err)
	}
	if n := fake.Pending(); n != 0 {
		t.Errorf("%d scripted model replies unused", n)
	}
}
