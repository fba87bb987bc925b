package e2e_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

const diskFull = "Disk /var is 93% full: clean up the old logs."

// wantCounts checks how many events of each kind were seen.
func wantCounts(t *testing.T, s *stack, want map[string]int) {
	t.Helper()
	for subject, n := range want {
		if got := s.count(subject); got != n {
			t.Errorf("%s events = %d, want %d; seen %s", subject, got, n, s.subjects())
		}
	}
}

// wantDelivered checks that the recorder got exactly one notification,
// with text, and that exactly one was queued.
func wantDelivered(t *testing.T, s *stack, text string) {
	t.Helper()
	got := s.rec.notifications()
	if len(got) != 1 || got[0].Text != text {
		t.Fatalf("connector received %+v, want exactly one notification %q", got, text)
	}
	if n := s.queued(t); n != 1 {
		t.Errorf("notifications queued = %d, want 1", n)
	}
}

// TestHeartbeatNotifies: heartbeat -> model server that calls notify_user
// -> the connector receives exactly that text; the done event names the
// model and sums the token usage of both calls.
func TestHeartbeatNotifies(t *testing.T) {
	t.Parallel()
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			s, srv := start(t, a, options{},
				turn{
					reply: model.Reply{ToolCalls: []model.ToolCall{notifyCall("call_disk", diskFull)}, Usage: model.Usage{InputTokens: 120, OutputTokens: 18}},
					check: func(req model.Request) error {
						if len(req.Tools) != 1 || req.Tools[0].Name != tools.NotifyName {
							return fmt.Errorf("tools offered = %+v, want notify_user only", req.Tools)
						}
						if len(req.Messages) != 1 || !strings.Contains(req.Messages[0].Content, "Is the disk /var below 90%?") {
							return fmt.Errorf("conversation = %+v, want one user turn with the checklist", req.Messages)
						}
						return nil
					},
				},
				turn{
					reply: model.Reply{Text: "I told the user about /var.", Usage: model.Usage{InputTokens: 150, OutputTokens: 7}},
					check: func(req model.Request) error {
						m, err := lastToolResult(req)
						if err != nil {
							return err
						}
						if m.ToolCallID != "call_disk" || m.IsError || !strings.Contains(m.Content, "acknowledged") {
							return fmt.Errorf("tool result = %+v, want call_disk acknowledged", m)
						}
						return nil
					},
				},
			)
			pub := s.wake(t)
			done := s.waitFor(t, "heartbeat.done")
			delivered := s.waitFor(t, "delivery.delivered")
			s.stop()

			r := done.result(t)
			if r.Text != diskFull || r.Model != srv.model || r.Usage == nil || *r.Usage != (model.Usage{InputTokens: 270, OutputTokens: 25}) {
				t.Errorf("done event = {text %q model %q usage %+v}, want {%q %q {270 25}}", r.Text, r.Model, r.Usage, diskFull, srv.model)
			}
			if done.CausationID != pub.ID || !r.Manual || len(r.Targets) != 1 || r.Targets[0] != target || r.Attempt != 1 {
				t.Errorf("done event = %+v / %+v, want the first attempt of the woken request %s, to %s", done.Event, r, pub.ID, target)
			}
			if len(r.ToolCalls) != 1 || r.ToolCalls[0].Error != "" {
				t.Errorf("done event tool calls = %+v, want one successful notify_user", r.ToolCalls)
			}
			wantDelivered(t, s, diskFull)
			if d := delivered.delivery(t); d.Notification.RunID != done.RunID || d.Connector != target {
				t.Errorf("delivery event = %+v, want run %s on %s", d, done.RunID, target)
			}
			wantCounts(t, s, map[string]int{"heartbeat.done": 1, "heartbeat.skip": 0, "heartbeat.error": 0, "delivery.delivered": 1})
			if n := len(srv.requests()); n != 2 || srv.pending() != 0 {
				t.Errorf("model server got %d requests with %d turns unused, want 2 and 0", n, srv.pending())
			}
			s.settled(t)
			s.noSecret(t)
		})
	}
}

// TestHeartbeatRetriesRateLimits: 429 twice, then success -> one done,
// one notification, no error event; the server's Retry-After is waited for.
func TestHeartbeatRetriesRateLimits(t *testing.T) {
	t.Parallel()
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var at []time.Time
			stamp := func(model.Request) error {
				mu.Lock()
				defer mu.Unlock()
				at = append(at, time.Now())
				return nil
			}
			s, srv := start(t, a, options{},
				turn{status: 429, message: "Rate limit reached for requests", retryAfter: "1", check: stamp},
				turn{status: 429, message: "Rate limit reached for requests", retryAfter: "0", check: stamp},
				turn{reply: model.Reply{ToolCalls: []model.ToolCall{notifyCall("call_disk", diskFull)}}, check: stamp},
				turn{reply: model.Reply{Text: "Done."}},
			)
			s.wake(t)
			done := s.waitFor(t, "heartbeat.done")
			s.waitFor(t, "delivery.delivered")
			s.stop()

			if r := done.result(t); r.Text != diskFull || r.Attempt != 3 {
				t.Errorf("done event = {text %q attempt %d}, want {%q 3}", r.Text, r.Attempt, diskFull)
			}
			wantDelivered(t, s, diskFull)
			wantCounts(t, s, map[string]int{"heartbeat.done": 1, "heartbeat.skip": 0, "heartbeat.error": 0, "delivery.delivered": 1})
			if n := len(srv.requests()); n != 4 || srv.pending() != 0 {
				t.Errorf("model server got %d requests with %d turns unused, want 4 and 0", n, srv.pending())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(at) == 3 && at[1].Sub(at[0]) < time.Second {
				t.Errorf("retry came %s after a 429 with Retry-After: 1, want at least 1s", at[1].Sub(at[0]))
			}
			s.settled(t)
			s.noSecret(t)
		})
	}
}

// TestHeartbeatUnauthorized: a 401 fails the run at once: one error event,
// class permanent, a message that says to check api_key, no retry, and the
// key (which the server echoed) nowhere.
func TestHeartbeatUnauthorized(t *testing.T) {
	t.Parallel()
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			s, srv := start(t, a, options{},
				turn{status: 401, message: "Incorrect API key provided: " + apiKey + ". You can find your API key in your account settings."})
			s.wake(t)
			failed := s.waitFor(t, "heartbeat.error")
			alert := s.waitFor(t, "delivery.delivered") // a failed heartbeat alerts its targets
			s.stop()

			r := failed.result(t)
			if r.Class != string(model.ClassPermanent) {
				t.Errorf("error event class = %q, want permanent", r.Class)
			}
			for _, want := range []string{"401", "check model.api_key", "${" + apiKeyEnv + "}", "Incorrect API key provided: [redacted]"} {
				if !strings.Contains(r.Error, want) {
					t.Errorf("error event message %q does not say %q", r.Error, want)
				}
			}
			wantCounts(t, s, map[string]int{"heartbeat.error": 1, "heartbeat.done": 0, "heartbeat.skip": 0})
			if n := len(srv.requests()); n != 1 {
				t.Errorf("model server got %d requests, want 1 (no retry of a permanent error)", n)
			}
			if n := s.settled(t); n != 1 {
				t.Errorf("request delivered to the runner %d times, want 1", n)
			}
			got := s.rec.notifications()
			if len(got) != 1 || got[0].Urgency != tools.UrgencyImportant || !strings.Contains(got[0].Text, "check model.api_key") {
				t.Errorf("connector received %+v, want only the alert saying to check model.api_key", got)
			}
			if d := alert.delivery(t); d.Notification.RunID != failed.RunID {
				t.Errorf("alert belongs to run %s, want %s", d.Notification.RunID, failed.RunID)
			}
			s.noSecret(t)
		})
	}
}

// TestHeartbeatBrokenToolArguments: a notify_user call whose arguments are
// not valid JSON becomes a tool error the model sees; the model calls again
// properly and that text is delivered. (Only the OpenAI wire can carry broken
// arguments: Anthropic's tool_use input is always a JSON object.)
func TestHeartbeatBrokenToolArguments(t *testing.T) {
	t.Parallel()
	s, srv := start(t, apis[0], options{},
		turn{reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "call_bad", Name: tools.NotifyName, Arguments: `{"text": "Disk /var is 93% fu`}}}},
		turn{
			reply: model.Reply{ToolCalls: []model.ToolCall{notifyCall("call_good", diskFull)}},
			check: func(req model.Request) error {
				m, err := lastToolResult(req)
				if err != nil {
					return err
				}
				if m.ToolCallID != "call_bad" || !strings.Contains(m.Content, "arguments are not a JSON object") {
					return fmt.Errorf("tool result = %+v, want call_bad telling the model its arguments were not JSON", m)
				}
				return nil
			},
		},
		turn{reply: model.Reply{Text: "Sent."}},
	)
	s.wake(t)
	done := s.waitFor(t, "heartbeat.done")
	s.waitFor(t, "delivery.delivered")
	s.stop()

	r := done.result(t)
	if r.Text != diskFull || len(r.ToolCalls) != 2 || r.ToolCalls[0].Error == "" || r.ToolCalls[1].Error != "" {
		t.Errorf("done event = {text %q calls %+v}, want %q after one failed and one good call", r.Text, r.ToolCalls, diskFull)
	}
	wantDelivered(t, s, diskFull)
	wantCounts(t, s, map[string]int{"heartbeat.done": 1, "heartbeat.error": 0})
	if srv.pending() != 0 {
		t.Errorf("%d model turns unused, want 0", srv.pending())
	}
	s.settled(t)
}

// TestHeartbeatUnknownTool: a call of a tool that does not exist becomes a
// tool error naming the tools there are; the model recovers.
func TestHeartbeatUnknownTool(t *testing.T) {
	t.Parallel()
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			s, srv := start(t, a, options{},
				turn{reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "call_shell", Name: "run_shell", Arguments: `{"cmd":"df -h /var"}`}}}},
				turn{
					reply: model.Reply{ToolCalls: []model.ToolCall{notifyCall("call_disk", diskFull)}},
					check: func(req model.Request) error {
						m, err := lastToolResult(req)
						if err != nil {
							return err
						}
						if m.ToolCallID != "call_shell" || !strings.Contains(m.Content, `"run_shell" is not a tool of this run`) || !strings.Contains(m.Content, tools.NotifyName) {
							return fmt.Errorf("tool result = %+v, want call_shell: not a tool of this run, naming notify_user", m)
						}
						if a.name == "anthropic" && !m.IsError {
							return fmt.Errorf("tool result = %+v, want is_error", m)
						}
						return nil
					},
				},
				turn{reply: model.Reply{Text: "Sent."}},
			)
			s.wake(t)
			done := s.waitFor(t, "heartbeat.done")
			s.waitFor(t, "delivery.delivered")
			s.stop()

			r := done.result(t)
			if r.Text != diskFull || len(r.ToolCalls) != 2 || r.ToolCalls[0].Outcome != tools.OutcomeRefused || !strings.Contains(r.ToolCalls[0].Error, "is not a tool of this run") {
				t.Errorf("done event = {text %q calls %+v}, want %q after an unknown tool", r.Text, r.ToolCalls, diskFull)
			}
			wantDelivered(t, s, diskFull)
			wantCounts(t, s, map[string]int{"heartbeat.done": 1, "heartbeat.error": 0})
			if srv.pending() != 0 {
				t.Errorf("%d model turns unused, want 0", srv.pending())
			}
			s.settled(t)
		})
	}
}

// TestHeartbeatToolsForever: a model that never stops calling tools ends
// the run after max_steps calls with one error event; the text of its
// notify_user calls is not sent (the run failed), only the alert.
func TestHeartbeatToolsForever(t *testing.T) {
	t.Parallel()
	const steps = 3
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			var turns []turn
			for i := range steps {
				turns = append(turns, turn{reply: model.Reply{ToolCalls: []model.ToolCall{notifyCall(fmt.Sprintf("call_%d", i), fmt.Sprintf("Still checking (%d)", i))}}})
			}
			s, srv := start(t, a, options{runner: agentwork.Config{MaxSteps: steps}}, turns...)
			s.wake(t)
			failed := s.waitFor(t, "heartbeat.error")
			s.waitFor(t, "delivery.delivered")
			s.stop()

			r := failed.result(t)
			if r.Class != string(model.ClassPermanent) || !strings.Contains(r.Error, "max_steps") {
				t.Errorf("error event = {class %q error %q}, want permanent, naming max_steps", r.Class, r.Error)
			}
			wantCounts(t, s, map[string]int{"heartbeat.error": 1, "heartbeat.done": 0, "heartbeat.skip": 0})
			if n := len(srv.requests()); n != steps {
				t.Errorf("model server got %d requests, want %d (max_steps)", n, steps)
			}
			got := s.rec.notifications()
			if len(got) != 1 || strings.Contains(got[0].Text, "Still checking") || got[0].Urgency != tools.UrgencyImportant {
				t.Errorf("connector received %+v, want only the alert", got)
			}
			if n := s.settled(t); n != 1 {
				t.Errorf("request delivered to the runner %d times, want 1", n)
			}
		})
	}
}

// TestHeartbeatEmptyReply: a reply with neither text nor tool calls is a
// heartbeat that found nothing: skip "ack", nothing queued.
func TestHeartbeatEmptyReply(t *testing.T) {
	t.Parallel()
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			s, _ := start(t, a, options{}, turn{})
			s.wake(t)
			skip := s.waitFor(t, "heartbeat.skip")
			s.stop()

			if r := skip.result(t); r.Reason != agentwork.ReasonAck {
				t.Errorf("skip reason = %q, want %q", r.Reason, agentwork.ReasonAck)
			}
			wantCounts(t, s, map[string]int{"heartbeat.skip": 1, "heartbeat.done": 0, "heartbeat.error": 0})
			if n := s.queued(t); n != 0 || len(s.rec.notifications()) != 0 {
				t.Errorf("notifications queued = %d, received %d; want none", n, len(s.rec.notifications()))
			}
			s.settled(t)
		})
	}
}

// TestHeartbeatModelTimeout: a model server that never answers hits
// model.timeout on each call; the error event says so (not that the whole
// run took too long) and the run is retried as a timeout.
func TestHeartbeatModelTimeout(t *testing.T) {
	t.Parallel()
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			s, srv := start(t, a, options{modelTimeout: 300 * time.Millisecond, runner: agentwork.Config{MaxAttempts: 2}},
				turn{hang: true}, turn{hang: true})
			s.wake(t)
			failed := s.waitFor(t, "heartbeat.error")
			s.stop()
			r := failed.result(t)
			if r.Class != string(model.ClassTimeout) || !strings.Contains(r.Error, "model.timeout is 300ms") || strings.Contains(r.Error, "run took longer") {
				t.Errorf("error event = {class %q error %q}, want class timeout naming model.timeout is 300ms", r.Class, r.Error)
			}
			if n := len(srv.requests()); n != 2 {
				t.Errorf("model server got %d requests, want 2 (one per attempt)", n)
			}
		})
	}
}

// TestTruncatedReply: a reply cut short by the model's token limit is
// delivered marked as truncated, and its done event says why it ended.
func TestTruncatedReply(t *testing.T) {
	t.Parallel()
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			stop := map[string]string{"openai": "length", "anthropic": "max_tokens"}[a.name]
			s, _ := start(t, a, options{}, turn{reply: model.Reply{Text: "Sales fell in EMEA because the", StopReason: stop}})
			s.task(t, "why did sales fall?")
			done := s.waitFor(t, "task.done")
			s.waitFor(t, "delivery.delivered")
			s.stop()
			r := done.result(t)
			if r.StopReason != stop || !r.ReplyTruncated || !r.Truncated {
				t.Errorf("done event = {stop_reason %q reply_truncated %v truncated %v}, want {%q true true}", r.StopReason, r.ReplyTruncated, r.Truncated, stop)
			}
			got := s.rec.notifications()
			if len(got) != 1 || !got[0].Truncated || got[0].Text != "Sales fell in EMEA because the" {
				t.Errorf("connector received %+v, want the cut reply marked truncated", got)
			}
		})
	}
}
