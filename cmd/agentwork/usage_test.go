package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	tokenusage "github.com/agentwork/agentwork/agentwork/usage"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai/openaifake"
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
	fake := openaifake.New(t)
	for range 2 {
		fake.Enqueue(openaifake.Response{Reply: model.Reply{Text: "numbers are fine", Usage: model.Usage{InputTokens: 300, OutputTokens: 100}}})
	}
	t.Setenv("OPENAI_KEY", openaifake.DefaultKey)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	cfg := writeConfig(t, dir, fmt.Sprintf(`
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
model:
  provider: openai
  base_url: %s
  model: gpt-fake
  api_key: ${OPENAI_KEY}
cron:
  jobs:
    - id: spender
      schedule: "@every 1s"
      prompt: check the numbers
      budget: {daily_tokens: 1000}
`, fake.URL))
	console, stop := startServe(t, cfg, dataDir)
	console.waitContains(t, "agentwork cron resume spender", 30*time.Second)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b, err := bus.Dial(ctx, bus.Config{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waitUsage(ctx, t, b, "spender", 800)

	cli := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(ctx, append(args, "--data-dir", dataDir), &out, &errOut); err != nil {
			t.Fatalf("agentwork %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out.String()
	}
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
