package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	tokenusage "github.com/agentwork/agentwork/agentwork/usage"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// TestCronBudgetEndToEnd is the acceptance with the real runtime
// and the OpenAI-compatible fake: a job with a daily budget of 1,000
// tokens whose runs use 400 each runs twice, then pauses itself with one
// alert on the console; agentwork usage shows the 800 tokens against it.
// (The fake fails the test on a third model call.)
func TestCronBudgetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the runtime")
	}
	console, stop, dataDir := serveSpender(t, "numbers are fine", `
cron:
  jobs:
    - id: spender
      schedule: "@every 1s"
      prompt: check the numbers
      budget: {daily_tokens: 1000}
`)
	console.waitContains(t, "agentwork cron resume spender", 30*time.Second)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b, err := bus.Dial(ctx, bus.Config{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waitUsage(ctx, t, b, "spender", 800)

	cli := cliOf(ctx, t, dataDir)
	table := cli("usage", "--since", "1d", "--name", "spender")
	if !strings.Contains(table, "spender") || !strings.Contains(table, "gpt-fake") || !strings.Contains(table, " 800") {
		t.Errorf("agentwork usage =\n%s\nwant spender's 800 tokens on gpt-fake", table)
	}
	var reply struct{ Usage []tokenusage.Record }
	if err := json.Unmarshal([]byte(cli("usage", "--by", "name", "--json")), &reply); err != nil {
		t.Fatal(err)
	}
	if len(reply.Usage) != 1 || reply.Usage[0].Name != "spender" || reply.Usage[0].Runs != 2 || reply.Usage[0].Total() != 800 {
		t.Errorf("agentwork usage --by name --json = %+v, want spender: 2 runs, 800 tokens", reply.Usage)
	}
	show := cli("cron", "show", "spender")
	if !strings.Contains(show, "daily budget of 1000") {
		t.Errorf("cron show spender =\n%s\nwant the budget pause", show)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	out := console.String()
	if n := strings.Count(out, "agentwork cron resume spender"); n != 1 {
		t.Errorf("console printed %d budget alerts, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "numbers are fine"); n != 2 {
		t.Errorf("console printed %d run replies, want 2:\n%s", n, out)
	}
}

// A heartbeat with a budget of 1,000 tokens whose runs use 400 each is
// paused by its second run with one alert; heartbeat status shows the
// budget, the day's tokens and the pause, and heartbeat resume lifts it.
// (Its schedule is off: the 1m floor of heartbeat.every is too slow for a
// test, and a wake runs and counts whether paused or not.)
func TestHeartbeatBudgetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the runtime")
	}
	console, stop, dataDir := serveSpender(t, "HEARTBEAT_OK", `
heartbeat:
  output_mode: ok_token
  budget: {daily_tokens: 1000}
`)
	// The checklist is read at each run.
	if err := os.WriteFile(filepath.Join(filepath.Dir(dataDir), "HEARTBEAT.md"), []byte("- [ ] check the numbers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cli := cliOf(ctx, t, dataDir)
	for range 2 {
		if out := cli("heartbeat", "wake", "--wait"); !strings.Contains(out, "skip") {
			t.Fatalf("heartbeat wake --wait printed %q, want a skip (ack)", out)
		}
	}
	console.waitContains(t, "agentwork heartbeat resume", 30*time.Second)
	status := cli("heartbeat", "status")
	for _, want := range []string{"paused (runs only on wake)", "daily budget of 1000", "800 in 2 run(s) (day in UTC)", "1000 tokens a day (UTC), 200 left today"} {
		if !strings.Contains(status, want) {
			t.Errorf("heartbeat status =\n%s\nwant %q", status, want)
		}
	}
	var st heartbeat.Status
	if err := json.Unmarshal([]byte(cli("heartbeat", "resume", "--json")), &st); err != nil || st.Paused || st.Spent == nil || st.Spent.Tokens != 0 {
		t.Errorf("heartbeat resume --json = %+v, %v; want running, 0 tokens today", st, err)
	}
	if out := cli("heartbeat", "pause", "--reason", "holiday"); !strings.Contains(out, "paused heartbeat default (holiday)") {
		t.Errorf("heartbeat pause printed %q", out)
	}
	if out := cli("heartbeat", "status"); !strings.Contains(out, "holiday") {
		t.Errorf("heartbeat status after pause =\n%s\nwant the reason", out)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if n := strings.Count(console.String(), "agentwork heartbeat resume"); n != 1 {
		t.Errorf("console printed %d budget alerts, want 1:\n%s", n, console.String())
	}
}

// serveSpender runs serve with section (YAML) on the OpenAI fake, which
// answers reply twice with a usage of 400 tokens (and fails the test on a
// third call). It returns the console, the stop function and the data
// directory (in the config's directory).
func serveSpender(t *testing.T, reply, section string) (*syncBuffer, func() error, string) {
	t.Helper()
	fake, modelYAML := fakeModel(t)
	for range 2 {
		fake.Enqueue(openaifake.Response{Reply: model.Reply{Text: reply, Usage: model.Usage{InputTokens: 300, OutputTokens: 100}}})
	}
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	cfg := writeConfig(t, dir, `
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
`+modelYAML+section)
	console, stop := startServe(t, cfg, dataDir)
	return console, stop, dataDir
}

// waitUsage waits until the usage bucket sums total tokens for name.
func waitUsage(ctx context.Context, t *testing.T, b *bus.Bus, name string, total int64) {
	t.Helper()
	w, err := b.Usage.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var last tokenusage.Record
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("usage of %s never reached %d tokens; last %+v", name, total, last)
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			var r tokenusage.Record
			if json.Unmarshal(e.Value(), &r) == nil && r.Name == name {
				if last = r; r.Total() == total {
					return
				}
			}
		}
	}
}
