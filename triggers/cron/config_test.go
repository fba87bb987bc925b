package cron

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Job{ID: "ok", Schedule: "* * * * *", Prompt: "p"}
	at := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		mod  func(*Job)
		want string
	}{
		{"bad schedule names the field and index", func(j *Job) { j.Schedule = "61 * * * *" }, `cron.jobs[1].schedule: "61 * * * *": end of range (61) above maximum (59)`},
		{"no schedule", func(j *Job) { j.Schedule = "" }, "cron.jobs[1].schedule: missing"},
		{"both schedule and at", func(j *Job) { j.At = &at }, "cron.jobs[1].at: set either schedule or at"},
		{"bad id", func(j *Job) { j.ID = "Sales Report" }, `cron.jobs[1].id: "Sales Report"`},
		{"bad zone", func(j *Job) { j.Timezone = "Mars/Olympus" }, `cron.jobs[1].timezone: "Mars/Olympus" is not an IANA time zone`},
		{"local zone", func(j *Job) { j.Timezone = "Local" }, "cron.jobs[1].timezone"},
		{"no prompt", func(j *Job) { j.Prompt = " " }, "cron.jobs[1].prompt: missing"},
		{"bad overlap", func(j *Job) { j.Overlap = "wait" }, `cron.jobs[1].overlap: "wait": want skip, queue or allow`},
		{"bad catchup", func(j *Job) { j.Catchup.Policy = "all" }, `cron.jobs[1].catchup: "all"`},
		{"max without run_all", func(j *Job) { j.Catchup = Catchup{Policy: CatchupSkip, Max: 3} }, "cron.jobs[1].catchup.max: only applies"},
		{"bad deliver", func(j *Job) { j.Deliver = "email" }, `cron.jobs[1].deliver: "email"`},
		{"bad target", func(j *Job) { j.Targets = []string{"Tele gram"} }, `cron.jobs[1].targets[0]: "Tele gram"`},
		{"negative jitter", func(j *Job) { j.Jitter = Duration(-time.Second) }, "cron.jobs[1].jitter"},
		{"too many retries", func(j *Job) { j.Retry.Attempts = 99 }, "cron.jobs[1].retry.attempts: 99"},
		{"duplicate id", func(j *Job) { j.ID = "ok" }, `cron.jobs[1].id: "ok" is already the id of cron.jobs[0]`},
		{"bad tools glob", func(j *Job) { j.Tools = []string{"sales__*", "fs/read"} }, `cron.jobs[1].tools[1]: "fs/read"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := Job{ID: "second", Schedule: "0 9 * * *", Prompt: "p"}
			tt.mod(&j)
			err := Config{Jobs: []Job{ok, j}}.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := (Config{Jobs: []Job{ok, {ID: "once", At: &at, Prompt: "p", Timezone: "Europe/Berlin"}}}).Validate(); err != nil {
		t.Fatalf("Validate(valid) = %v", err)
	}
}

func TestConfigYAML(t *testing.T) {
	t.Parallel()
	src := `
alert_after: 2
pause_after: 5
jobs:
  - id: report
    schedule: "0 9 * * mon"
    timezone: Europe/Berlin
    prompt: Analyse the sales data
    targets: [telegram]
    overlap: queue
    catchup: {policy: run_all, max: 3}
    jitter: 30s
    retry: {attempts: 2, backoff: 1m}
    expires_at: 2027-01-01T00:00:00Z
  - id: once
    at: "2026-12-01T09:00:00+01:00"
    prompt: Remind me
    catchup: skip
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	r := c.Jobs[0]
	if r.Catchup != (Catchup{Policy: CatchupRunAll, Max: 3}) || r.Jitter != Duration(30*time.Second) ||
		r.Retry != (Retry{Attempts: 2, Backoff: Duration(time.Minute)}) || r.ExpiresAt == nil || c.AlertAfter != 2 {
		t.Fatalf("decoded %+v", r)
	}
	o := c.Jobs[1]
	if o.Catchup.Policy != CatchupSkip || o.At == nil || !o.At.Equal(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("decoded %+v", o)
	}

	bad := "jobs:\n  - id: x\n    schedule: '* * * * *'\n    prompt: p\n    catchup: {policy: run_all, limit: 3}\n"
	dec = yaml.NewDecoder(strings.NewReader(bad))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err == nil || !strings.Contains(err.Error(), `unknown key "limit"`) {
		t.Fatalf("decode with unknown catchup key = %v, want an error naming it", err)
	}
}

func TestJobJSONRoundTrip(t *testing.T) {
	t.Parallel()
	j := Job{ID: "x", Schedule: "@every 90m", Prompt: "p", Jitter: Duration(90 * time.Second), Catchup: Catchup{Policy: CatchupRunAll, Max: 4}}
	j.normalize()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"jitter":"1m30s"`, `"catchup":{"policy":"run_all","max":4}`, `"enabled":true`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("json = %s, want it to contain %s", b, want)
		}
	}
	var back Job
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !sameDefinition(j, back) {
		t.Fatalf("round trip: %+v != %+v", back, j)
	}
	var c Catchup
	if err := json.Unmarshal([]byte(`"skip"`), &c); err != nil || c.Policy != CatchupSkip {
		t.Fatalf("Catchup from string = %+v, %v", c, err)
	}
	if err := json.Unmarshal([]byte(`{"policy":"run_all","cap":3}`), &c); err == nil {
		t.Fatal("Catchup with an unknown key decoded without error")
	}
}

func TestMergePatch(t *testing.T) {
	t.Parallel()
	got, err := mergePatch([]byte(`{"a":1,"b":{"c":2,"d":3},"e":[1]}`), []byte(`{"a":null,"b":{"c":5},"e":[2,3],"f":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"b":{"c":5,"d":3},"e":[2,3],"f":"x"}`; string(got) != want {
		t.Fatalf("mergePatch = %s, want %s", got, want)
	}
	if _, err := mergePatch([]byte(`{}`), []byte(`[1]`)); err == nil {
		t.Fatal("mergePatch with an array patch: no error")
	}
}
