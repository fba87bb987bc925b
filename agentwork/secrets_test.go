package agentwork_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
)

// botToken stands for a config secret (a ${VAR} value), such as a chat
// bot's token.
const botToken = "123456789:AAF-bot-token-0123456789abcdef"

// leaks reports where s holds botToken, as is or in a form secret.Redact
// knows (JSON-escaped, URL-encoded, base64).
func leaks(s string) bool {
	js, _ := json.Marshal(botToken)
	for _, f := range []string{botToken, string(js[1 : len(js)-1]), base64.StdEncoding.EncodeToString([]byte(botToken)), "AAF-bot-token"} {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

// TestSecretsLeaveNoNotificationNorEvent is the quick start's rule
// `text: "Done: {{prompt}}"` given a task whose prompt is a config secret
// (as is, and base64): the notification sent and the done event's reply and
// text say [redacted]. A model error that quotes it, in the error event and
// the alert, too.
func TestSecretsLeaveNoNotificationNorEvent(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	sp := must(script.New(script.Config{Rules: []script.Rule{
		{Match: script.Match{Name: "broken"}, Reply: script.Reply{Error: &script.Fault{Class: "permanent", Message: "401: the key " + botToken + " was refused"}}},
		{Match: script.Match{Name: "notify"}, Reply: script.Reply{Notify: "the token is " + botToken, Text: "sent"}},
		{Match: script.Match{Source: "task"}, Reply: script.Reply{Text: "Done: {{prompt}}"}},
	}}))
	rec := newRecorder(nil)
	startDispatcher(t, b, connectors.Registry{"console": rec})
	stop := startRunner(t, b, sp, testConfig(), map[string]agentwork.Policy{"task": {}},
		agentwork.WithConnectors("console"), agentwork.WithSecrets(botToken))
	for _, prompt := range []string{botToken, "in base64: " + base64.StdEncoding.EncodeToString([]byte(botToken))} {
		publish(t, b, agentwork.Request{Source: "task", Name: "echo", Prompt: prompt})
	}
	publish(t, b, agentwork.Request{Source: "task", Name: "notify", Prompt: "hi"})
	publish(t, b, agentwork.Request{Source: "task", Name: "broken", Prompt: "hi"})
	evs := events.runEvents(4)
	sent := rec.waitSent(t, 4) // two replies, a notify_user message, an alert
	stop()
	for _, n := range queued(t, b) {
		// The dedup key is that of the text sent.
		if n.DedupKey != "" && n.DedupKey != agentwork.NoticeKey(n.Source, n.Name, n.Targets, n.Text) {
			t.Errorf("notification %q queued with dedup key %s, want that of its text %s", n.Text, n.DedupKey, agentwork.NoticeKey(n.Source, n.Name, n.Targets, n.Text))
		}
	}
	for _, n := range sent {
		if leaks(n.Text) || !strings.Contains(n.Text, "[redacted]") {
			t.Errorf("notification sent %q, want the secret [redacted]", n.Text)
		}
	}
	for _, ev := range evs {
		r := ev.Run
		var what string
		switch r.Outcome {
		case bus.OutcomeDone:
			what = r.Reply + "\n" + r.Text
		case bus.OutcomeError:
			what = r.Error
		}
		if leaks(what) || !strings.Contains(what, "[redacted]") {
			t.Errorf("%s event of %s has %q, want the secret [redacted]", r.Outcome, r.Name, what)
		}
	}
}

// TestToolResultsReachTheModelRedacted: a tool that reads a secret (exec
// reading /proc/<pid>/environ, an MCP server that echoes its token) hands
// the model [redacted], in its result and in its error, so the next model
// request, and the checkpoint that keeps it, hold no secret.
func TestToolResultsReachTheModelRedacted(t *testing.T) {
	t.Parallel()
	environ := tools.Func("environ", "read the environment", func(context.Context, struct{}) (string, error) {
		return "PATH=/usr/bin\x00TELEGRAM_BOT_TOKEN=" + botToken + "\x00", nil
	})
	failing := tools.Func("failing", "fail quoting the token", func(context.Context, struct{}) (string, error) {
		js, _ := json.Marshal(map[string]string{"token": botToken})
		return "", errors.New("server said: " + string(js))
	})
	var mu sync.Mutex
	var seen []model.Request
	p := model.ProviderFunc(func(_ context.Context, req model.Request) (model.Reply, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, req)
		if len(seen) == 1 {
			return model.Reply{ToolCalls: []model.ToolCall{{ID: "a", Name: "environ", Arguments: "{}"}, {ID: "b", Name: "failing", Arguments: "{}"}}}, nil
		}
		return model.Reply{Text: "read it"}, nil
	})
	b := bustest.New(t)
	events := watchEvents(t, b)
	r := agentwork.NewRunner(b, p, must(tools.NewRegistry(tools.Notify(), environ, failing)), testConfig(),
		agentwork.WithSecrets(botToken), agentwork.WithConnectors("console"))
	r.Handle("task", agentwork.Policy{Tools: []string{"environ", "failing"}})
	stop := runInBackground(t, "runner", r.Run)
	publish(t, b, agentwork.Request{Source: "task", Name: "env", Prompt: "read the environment"})
	ev := events.runEvents(1)[0]
	stop()
	if ev.Run.Outcome != bus.OutcomeDone {
		t.Fatalf("event %s %q, want done", ev.Run.Outcome, ev.Run.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("%d model requests, want 2", len(seen))
	}
	var results int
	for _, m := range seen[1].Messages {
		if m.Role != model.RoleTool {
			continue
		}
		results++
		if leaks(m.Content) || !strings.Contains(m.Content, "[redacted]") {
			t.Errorf("the model got %s's result %q, want the secret [redacted]", m.ToolName, m.Content)
		}
	}
	if results != 2 {
		t.Errorf("the second model request has %d tool results, want 2", results)
	}
}
