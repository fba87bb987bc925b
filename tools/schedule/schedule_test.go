package schedule_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/schedule"
)

var now = time.Date(2026, 5, 4, 10, 0, 30, 500_000_000, time.UTC)

func TestParse(t *testing.T) {
	t.Parallel()
	yes := true
	at := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	base := schedule.CreateArgs{Name: "remind", Prompt: "remind the user"}
	with := func(f func(*schedule.CreateArgs)) schedule.CreateArgs { a := base; f(&a); return a }
	for _, tc := range []struct {
		name    string
		args    schedule.CreateArgs
		want    schedule.Job
		wantErr string
	}{
		{name: "in, rounded up to the second, deletes itself",
			args: with(func(a *schedule.CreateArgs) { a.In = "2s" }),
			want: schedule.Job{At: at("2026-05-04T10:00:33Z"), DeleteAfterRun: true}},
		{name: "at with offset, in UTC",
			args: with(func(a *schedule.CreateArgs) { a.At = "2026-05-04T14:00:00+02:00" }),
			want: schedule.Job{At: at("2026-05-04T12:00:00Z"), DeleteAfterRun: true}},
		{name: "at without offset in the time zone",
			args: with(func(a *schedule.CreateArgs) { a.At = "2026-05-04T14:00:00"; a.Timezone = "Europe/Berlin" }),
			want: schedule.Job{At: at("2026-05-04T12:00:00Z"), Timezone: "Europe/Berlin", DeleteAfterRun: true}},
		{name: "every is @every, kept after its runs",
			args: with(func(a *schedule.CreateArgs) { a.Every = "90m" }),
			want: schedule.Job{Schedule: "@every 1h30m0s"}},
		{name: "cron, deleted after its last run on request",
			args: with(func(a *schedule.CreateArgs) { a.Cron = "0 9 * * mon"; a.MaxRuns = 3; a.DeleteAfterRun = &yes }),
			want: schedule.Job{Schedule: "0 9 * * mon", MaxRuns: 3, DeleteAfterRun: true}},
		{name: "at in the past", args: with(func(a *schedule.CreateArgs) { a.At = "2026-05-04T09:00:00Z" }),
			wantErr: "at: 2026-05-04T09:00:00Z is in the past (now is 2026-05-04T10:00:30Z)"},
		{name: "both at and in", args: with(func(a *schedule.CreateArgs) { a.At = "2026-05-05T09:00:00Z"; a.In = "20m" }),
			wantErr: "set exactly one of cron, every, at and in (got at and in)"},
		{name: "none", args: base, wantErr: "when: set one of in"},
		{name: "bad zone", args: with(func(a *schedule.CreateArgs) { a.Cron = "0 9 * * *"; a.Timezone = "Mars/Olympus" }),
			wantErr: `timezone: "Mars/Olympus" is not an IANA time zone`},
		{name: "Local is no zone", args: with(func(a *schedule.CreateArgs) { a.Cron = "0 9 * * *"; a.Timezone = "Local" }),
			wantErr: `timezone: "Local" is not an IANA time zone`},
		{name: "in not a duration", args: with(func(a *schedule.CreateArgs) { a.In = "twenty minutes" }),
			wantErr: `in: "twenty minutes" is not a duration`},
		{name: "in negative", args: with(func(a *schedule.CreateArgs) { a.In = "-5m" }), wantErr: "want a duration after now"},
		{name: "at not RFC 3339", args: with(func(a *schedule.CreateArgs) { a.At = "tomorrow 9am" }), wantErr: "is not an RFC 3339 time"},
		{name: "every below a second", args: with(func(a *schedule.CreateArgs) { a.Every = "500ms" }), wantErr: "want whole seconds"},
		{name: "expires before the one-shot",
			args:    with(func(a *schedule.CreateArgs) { a.In = "2h"; a.ExpiresAt = "2026-05-04T11:00:00Z" }),
			wantErr: "expires_at: 2026-05-04T11:00:00Z is before the job's time"},
		{name: "expired", args: with(func(a *schedule.CreateArgs) { a.Every = "1h"; a.ExpiresAt = "2026-01-01T00:00:00Z" }),
			wantErr: "expires_at: 2026-01-01T00:00:00Z is in the past"},
		{name: "max_runs of a one-shot", args: with(func(a *schedule.CreateArgs) { a.In = "1h"; a.MaxRuns = 2 }),
			wantErr: "a one-shot (at/in) runs once"},
		{name: "no prompt", args: schedule.CreateArgs{Name: "x", In: "1m"}, wantErr: "prompt: empty"},
		{name: "long key", args: with(func(a *schedule.CreateArgs) { a.In = "1m"; a.IdempotencyKey = strings.Repeat("k", 201) }),
			wantErr: "idempotency_key: 201 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := schedule.Parse(tc.args, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%+v) = %v, want an error containing %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%+v) = %v", tc.args, err)
			}
			tc.want.Name, tc.want.Prompt = "remind", "remind the user"
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(tc.want)
			if string(g) != string(w) {
				t.Errorf("Parse(%+v) = %s, want %s", tc.args, g, w)
			}
		})
	}
}

// jobs records what the tools ask of the job store.
type jobs struct {
	created []schedule.Job
	owners  []schedule.Owner
}

func (j *jobs) Create(_ context.Context, o schedule.Owner, job schedule.Job) (schedule.Info, bool, error) {
	j.created, j.owners = append(j.created, job), append(j.owners, o)
	return schedule.Info{ID: "agent-1", Name: job.Name, Status: "active", Schedule: "at " + job.At.Format(time.RFC3339),
		Targets: job.Targets, DeleteAfterRun: job.DeleteAfterRun}, true, nil
}

func (j *jobs) List(context.Context, schedule.Owner) ([]schedule.Info, error) { return nil, nil }

func (j *jobs) Act(context.Context, schedule.Owner, string, string) (schedule.Info, error) {
	return schedule.Info{}, nil
}

func TestCreateActsForTheRun(t *testing.T) {
	t.Parallel()
	store := &jobs{}
	reg, err := tools.NewRegistry(schedule.Tools(store, func() time.Time { return now })...)
	if err != nil {
		t.Fatal(err)
	}
	run := tools.RunInfo{ID: "run-1", Source: "task", Name: "default", Targets: []string{"console", "telegram:42"}}
	ctx := tools.WithRun(t.Context(), run)

	// The owner is the run, whatever the model says; targets default to
	// the run's; the answer names the id and the UTC time.
	c := reg.Call(ctx, "c1", schedule.CreateName, `{"name":"tea","prompt":"remind me of the tea","in":"20m"}`)
	if c.Outcome != tools.OutcomeOK || !strings.Contains(c.Result, "created job agent-1") || !strings.Contains(c.Result, "fires at 2026-05-04T10:20:31Z") {
		t.Fatalf("schedule_create = %s %q %q, want the job id and its UTC time", c.Outcome, c.Result, c.Error)
	}
	if want := (schedule.Owner{Source: "task", Name: "default", RunID: "run-1"}); !reflect.DeepEqual(store.owners[0], want) {
		t.Errorf("owner = %+v, want %+v", store.owners[0], want)
	}
	if got := strings.Join(store.created[0].Targets, ","); got != "console,telegram:42" {
		t.Errorf("targets = %s, want the run's", got)
	}

	for _, tc := range []struct{ name, args, wantErr string }{
		{"an owner in the arguments", `{"name":"x","prompt":"y","in":"1m","owner":"someone"}`, "unknown field"},
		{"a destination the run does not deliver to", `{"name":"x","prompt":"y","in":"1m","targets":["telegram:666"]}`, `targets: "telegram:666" names a destination this run does not deliver to`},
		{"a connector the run does not deliver to", `{"name":"x","prompt":"y","in":"1m","targets":["slack"]}`, `targets: "slack" is not a connector this run delivers to (it delivers to console, telegram:42)`},
		// The run sends to one chat of telegram, not to its configured one.
		{"the bare name of a connector the run delivers to one chat of", `{"name":"x","prompt":"y","in":"1m","targets":["telegram"]}`, `targets: "telegram" is not a connector this run delivers to`},
		{"in the past", `{"name":"x","prompt":"y","at":"2020-01-01T00:00:00Z"}`, "is in the past"},
	} {
		if c := reg.Call(ctx, "c2", schedule.CreateName, tc.args); c.Outcome != tools.OutcomeError || !strings.Contains(c.Error, tc.wantErr) {
			t.Errorf("schedule_create with %s = %s %q, want an error containing %q", tc.name, c.Outcome, c.Error, tc.wantErr)
		}
	}
	// The run's own targets, as it names them.
	if c := reg.Call(ctx, "c4", schedule.CreateName, `{"name":"x","prompt":"y","in":"1m","targets":["console","telegram:42"]}`); c.Outcome != tools.OutcomeOK {
		t.Errorf("schedule_create to the run's connectors = %s %q, want created", c.Outcome, c.Error)
	}
	if len(store.created) != 2 {
		t.Errorf("%d jobs created, want 2 (refused calls create none)", len(store.created))
	}

	// Outside a run (agentwork tools call) there is no owner: refused.
	for _, name := range reg.Names() {
		args := `{"id":"agent-1"}`
		switch name {
		case schedule.CreateName:
			args = `{"name":"tea","prompt":"p","in":"20m"}`
		case schedule.ListName:
			args = `{}`
		}
		if c := reg.Call(t.Context(), "c3", name, args); c.Outcome != tools.OutcomeError || !strings.Contains(c.Error, "part of no run") {
			t.Errorf("%s outside a run = %s %q, want refused", name, c.Outcome, c.Error)
		}
	}
}
