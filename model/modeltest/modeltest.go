// Package modeltest is the conformance suite for model.Provider
// implementations. Every provider runs the same cases through Run: plain
// text, one and several tool calls, tool calls under a misleading stop
// reason, missing tool call ids, empty replies, the tool result round trip,
// concurrent use, and, where the provider can be scripted to produce them,
// server errors and their classes, key redaction, malformed replies, timeouts
// and dropped connections.
//
// A provider is driven through a Harness: it builds the provider against a
// scripted backend (an httptest fake of the real API for HTTP clients, a
// script for offline providers) that plays one Turn per call. A capability a
// provider lacks is declared in Features, and the cases that need it are
// skipped, never weakened.
package modeltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/model"
)

// Harness builds providers for the suite.
type Harness struct {
	// Features declares what the provider can be scripted to do.
	Features Features
	// New returns a provider whose backend answers the i-th call with
	// Setup.Turns[i] (in arrival order), configured with Setup's model, key
	// and timeout. Resources are released with t.Cleanup.
	New func(t *testing.T, s Setup) Backend
}

// Features lists optional capabilities. The zero value is a provider that
// can only be scripted with replies.
type Features struct {
	// Usage: replies report the scripted token usage.
	Usage bool
	// ToolCallIDs: replies carry the tool call ids the backend chose, as
	// every HTTP API does. Without it the suite only checks that ids are set
	// and distinct (a script provider may name its calls itself).
	ToolCallIDs bool
	// Requests: Backend.Requests returns what the backend received, so the
	// suite can check the system prompt, tools and tool results sent.
	Requests bool
	// ToolResultErrors: the is_error flag of a tool result reaches the
	// backend as a flag (Anthropic), not only as text (OpenAI).
	ToolResultErrors bool
	// StatusErrors: a Turn can fail with a server status (Turn.Fail), which
	// the provider classifies.
	StatusErrors bool
	// RawBodies: a Turn can answer with a raw body (Turn.Body).
	RawBodies bool
	// Hang: a Turn can never answer (Turn.Hang); the provider then returns
	// a timeout error at the ctx deadline.
	Hang bool
	// Timeout: the provider honours Setup.Timeout (model.timeout) on its own,
	// with a timeout error. Needs Hang.
	Timeout bool
	// Disconnect: a Turn can drop the connection (Turn.Disconnect).
	Disconnect bool
}

// Setup is what a case asks of Harness.New.
type Setup struct {
	// Model is the configured model name.
	Model string
	// APIKey is the configured key; the backend expects it.
	APIKey string
	// Timeout is model.timeout; 0 means the provider's default.
	Timeout time.Duration
	// Turns are the backend's answers, one per call.
	Turns []Turn
}

// Turn is one scripted answer. Exactly one of Reply (the default), Fail,
// Body, Hang or Disconnect applies.
type Turn struct {
	// Reply is the model's answer. A tool call with an empty ID is sent
	// without one. An empty StopReason means the natural one (tool calls:
	// "tool_calls"/"tool_use", else "stop"/"end_turn").
	Reply model.Reply
	// PlainStop sends the ordinary end-of-turn reason ("stop", "end_turn")
	// even though Reply has tool calls, as several servers do.
	PlainStop bool
	// Fail answers with a server error.
	Fail *Failure
	// Body answers 200 with this raw body.
	Body string
	// Hang never answers.
	Hang bool
	// Disconnect drops the connection.
	Disconnect bool
}

// Failure is a scripted server error.
type Failure struct {
	Status int
	// Message is the server's error message, in the API's error body.
	Message string
	// RetryAfter is sent as Retry-After (whole seconds) when > 0.
	RetryAfter time.Duration
}

// Backend is a provider with its scripted backend.
type Backend struct {
	Provider model.Provider
	// Requests returns the requests the backend received so far, decoded to
	// model form. Required when Features.Requests.
	Requests func() []model.Request
}

// The values the suite configures.
const (
	Model  = "conformance-model"
	APIKey = "sk-conformance-SECRET-7f3a9c2e41d8"
)

// Run runs every case against h, each as a parallel subtest with its own
// backend.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("modeltest: Harness.New is nil")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if missing := c.needs.missing(h.Features); missing != "" {
				t.Skipf("provider lacks Features.%s", missing)
			}
			c.run(t, h)
		})
	}
}

type testCase struct {
	name  string
	needs Features
	run   func(t *testing.T, h Harness)
}

func (need Features) missing(have Features) string {
	hv, nv := reflect.ValueOf(have), reflect.ValueOf(need)
	for i := range nv.NumField() {
		if nv.Field(i).Bool() && !hv.Field(i).Bool() {
			return nv.Type().Field(i).Name
		}
	}
	return ""
}

var cases = []testCase{
	{name: "text", run: testText},
	{name: "tool_call", run: testToolCall},
	{name: "tool_calls_with_stop_reason_stop", run: testToolCallsPlainStop},
	{name: "parallel_tool_calls", run: testParallelToolCalls},
	{name: "tool_call_without_id", run: testToolCallWithoutID},
	{name: "empty_reply", run: testEmptyReply},
	{name: "canceled_context", run: testCanceled},
	{name: "concurrent_calls", run: testConcurrent},
	{name: "request", needs: Features{Requests: true}, run: testRequest},
	{name: "tool_result_round_trip", needs: Features{Requests: true}, run: testRoundTrip},
	{name: "status_errors", needs: Features{StatusErrors: true}, run: testStatusErrors},
	{name: "key_not_leaked", needs: Features{StatusErrors: true}, run: testKeyNotLeaked},
	{name: "malformed_reply", needs: Features{RawBodies: true}, run: testMalformed},
	{name: "ctx_deadline", needs: Features{Hang: true}, run: testDeadline},
	{name: "config_timeout", needs: Features{Hang: true, Timeout: true}, run: testConfigTimeout},
	{name: "disconnect", needs: Features{Disconnect: true}, run: testDisconnect},
}

// start builds a backend for turns with the suite's model and key.
func start(t *testing.T, h Harness, turns ...Turn) Backend {
	t.Helper()
	b := h.New(t, Setup{Model: Model, APIKey: APIKey, Turns: turns})
	if b.Provider == nil {
		t.Fatal("modeltest: Harness.New returned no Provider")
	}
	if h.Features.Requests && b.Requests == nil {
		t.Fatal("modeltest: Features.Requests is set but Backend.Requests is nil")
	}
	return b
}

func userRequest(text string) model.Request {
	return model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: text}}}
}

func complete(t *testing.T, p model.Provider, req model.Request) model.Reply {
	t.Helper()
	reply, err := p.Complete(t.Context(), req)
	if err != nil {
		t.Fatalf("Complete() error = %v, want nil", err)
	}
	return reply
}

func testText(t *testing.T, h Harness) {
	want := model.Reply{Text: "The disk is 91% full.", Usage: model.Usage{InputTokens: 42, OutputTokens: 7}}
	b := start(t, h, Turn{Reply: want})
	got := complete(t, b.Provider, userRequest("How full is the disk?"))
	if got.Text != want.Text {
		t.Errorf("Complete().Text = %q, want %q", got.Text, want.Text)
	}
	if len(got.ToolCalls) != 0 {
		t.Errorf("Complete().ToolCalls = %v, want none", got.ToolCalls)
	}
	if h.Features.Usage && got.Usage != want.Usage {
		t.Errorf("Complete().Usage = %+v, want %+v", got.Usage, want.Usage)
	}
}

func testToolCall(t *testing.T, h Harness) {
	call := model.ToolCall{ID: "call_disk_1", Name: "notify_user", Arguments: `{"text":"Disk almost full","urgency":"important"}`}
	b := start(t, h, Turn{Reply: model.Reply{ToolCalls: []model.ToolCall{call}}})
	got := complete(t, b.Provider, userRequest("Check the disk."))
	if got.Text != "" {
		t.Errorf("Complete().Text = %q, want empty (no content)", got.Text)
	}
	checkCalls(t, got.ToolCalls, []model.ToolCall{call}, h.Features.ToolCallIDs)
}

func testToolCallsPlainStop(t *testing.T, h Harness) {
	call := model.ToolCall{ID: "call_stop_1", Name: "notify_user", Arguments: `{"text":"Backup failed"}`}
	b := start(t, h, Turn{Reply: model.Reply{Text: "Telling the user.", ToolCalls: []model.ToolCall{call}}, PlainStop: true})
	got := complete(t, b.Provider, userRequest("Check the backups."))
	if got.Text != "Telling the user." {
		t.Errorf("Complete().Text = %q, want %q", got.Text, "Telling the user.")
	}
	checkCalls(t, got.ToolCalls, []model.ToolCall{call}, h.Features.ToolCallIDs)
}

func testParallelToolCalls(t *testing.T, h Harness) {
	calls := []model.ToolCall{
		{ID: "call_p1", Name: "read_file", Arguments: `{"path":"/var/log/syslog"}`},
		{ID: "call_p2", Name: "read_file", Arguments: `{"path":"/var/log/auth.log"}`},
		{ID: "call_p3", Name: "notify_user", Arguments: `{"text":"Reading logs"}`},
	}
	b := start(t, h, Turn{Reply: model.Reply{ToolCalls: calls}})
	got := complete(t, b.Provider, userRequest("Read both logs."))
	checkCalls(t, got.ToolCalls, calls, h.Features.ToolCallIDs)
}

func testToolCallWithoutID(t *testing.T, h Harness) {
	calls := []model.ToolCall{
		{Name: "notify_user", Arguments: `{"text":"one"}`},
		{Name: "notify_user", Arguments: `{"text":"two"}`},
	}
	b := start(t, h, Turn{Reply: model.Reply{ToolCalls: calls}})
	got := complete(t, b.Provider, userRequest("Notify twice."))
	if len(got.ToolCalls) != 2 {
		t.Fatalf("Complete().ToolCalls = %v, want 2 calls", got.ToolCalls)
	}
	for i, tc := range got.ToolCalls {
		if tc.ID == "" {
			t.Errorf("ToolCalls[%d].ID is empty, want a generated id (the tool loop pairs results with it)", i)
		}
		if tc.Name != calls[i].Name || !jsonEqual(tc.Arguments, calls[i].Arguments) {
			t.Errorf("ToolCalls[%d] = %+v, want name %s and arguments %s", i, tc, calls[i].Name, calls[i].Arguments)
		}
	}
	if got.ToolCalls[0].ID == got.ToolCalls[1].ID {
		t.Errorf("generated ids are equal (%q), want distinct", got.ToolCalls[0].ID)
	}
}

func testEmptyReply(t *testing.T, h Harness) {
	b := start(t, h, Turn{})
	got := complete(t, b.Provider, userRequest("Anything?"))
	if got.Text != "" || len(got.ToolCalls) != 0 {
		t.Errorf("Complete() = %+v, want an empty reply (the runner decides what empty means)", got)
	}
}

func testCanceled(t *testing.T, h Harness) {
	b := start(t, h, Turn{Reply: model.Reply{Text: "unused"}})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := b.Provider.Complete(ctx, userRequest("hello"))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Complete(canceled ctx) error = %v, want one wrapping context.Canceled", err)
	}
}

func testConcurrent(t *testing.T, h Harness) {
	const n = 8
	turns := make([]Turn, n)
	for i := range turns {
		turns[i] = Turn{Reply: model.Reply{Text: "ok"}}
	}
	b := start(t, h, turns...)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			got, err := b.Provider.Complete(t.Context(), userRequest("ping"))
			switch {
			case err != nil:
				errs <- err
			case got.Text != "ok":
				errs <- fmt.Errorf("text = %q, want ok", got.Text)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Complete(): %v", err)
	}
}

var notifySchema = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","minLength":1}},"required":["text"],"additionalProperties":false}`)

func testRequest(t *testing.T, h Harness) {
	b := start(t, h, Turn{Reply: model.Reply{Text: "ok"}})
	req := model.Request{
		System:   "You are the heartbeat. Call notify_user only if something needs attention.",
		Messages: []model.Message{{Role: model.RoleUser, Content: "- [ ] disk below 90%"}},
		Tools:    []model.Tool{{Name: "notify_user", Description: "Send a short message to the user.", Parameters: notifySchema}},
		Meta:     map[string]string{"source": "heartbeat"},
	}
	complete(t, b.Provider, req)
	reqs := b.Requests()
	if len(reqs) != 1 {
		t.Fatalf("backend got %d requests, want 1", len(reqs))
	}
	got := reqs[0]
	if got.System != req.System {
		t.Errorf("system prompt = %q, want %q", got.System, req.System)
	}
	if texts := userTexts(got); !reflect.DeepEqual(texts, []string{"- [ ] disk below 90%"}) {
		t.Errorf("user texts = %q, want [%q]", texts, "- [ ] disk below 90%")
	}
	if len(got.Tools) != 1 {
		t.Fatalf("tools = %+v, want 1", got.Tools)
	}
	if tl := got.Tools[0]; tl.Name != "notify_user" || tl.Description != req.Tools[0].Description || !jsonEqual(string(tl.Parameters), string(notifySchema)) {
		t.Errorf("tool = {%s %q %s}, want {notify_user %q %s}", tl.Name, tl.Description, tl.Parameters, req.Tools[0].Description, notifySchema)
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	calls := []model.ToolCall{
		{ID: "call_rt_1", Name: "read_file", Arguments: `{"path":"/etc/hosts"}`},
		{ID: "call_rt_2", Name: "read_file", Arguments: `{"path":"/nope"}`},
	}
	b := start(t, h,
		Turn{Reply: model.Reply{ToolCalls: calls}},
		Turn{Reply: model.Reply{Text: "hosts has 2 entries; /nope does not exist."}},
	)
	req := userRequest("Read /etc/hosts and /nope.")
	req.Tools = []model.Tool{{Name: "read_file", Description: "Read a file.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}}
	first := complete(t, b.Provider, req)
	checkCalls(t, first.ToolCalls, calls, h.Features.ToolCallIDs)

	results := []model.Message{
		{Role: model.RoleTool, ToolCallID: first.ToolCalls[0].ID, ToolName: "read_file", Content: "127.0.0.1 localhost\n::1 localhost"},
		{Role: model.RoleTool, ToolCallID: first.ToolCalls[1].ID, ToolName: "read_file", Content: "error: open /nope: no such file or directory", IsError: true},
	}
	req.Messages = append(req.Messages, model.Message{Role: model.RoleAssistant, Content: first.Text, ToolCalls: first.ToolCalls})
	req.Messages = append(req.Messages, results...)
	second := complete(t, b.Provider, req)
	if want := "hosts has 2 entries; /nope does not exist."; second.Text != want {
		t.Errorf("second Complete().Text = %q, want %q", second.Text, want)
	}

	reqs := b.Requests()
	if len(reqs) != 2 {
		t.Fatalf("backend got %d requests, want 2 (one per call)", len(reqs))
	}
	got := reqs[1]
	var sentCalls []model.ToolCall
	var sentResults []model.Message
	for _, m := range got.Messages {
		switch m.Role {
		case model.RoleAssistant:
			sentCalls = append(sentCalls, m.ToolCalls...)
		case model.RoleTool:
			sentResults = append(sentResults, m)
		}
	}
	checkCalls(t, sentCalls, first.ToolCalls, true)
	if len(sentResults) != len(results) {
		t.Fatalf("backend got tool results %+v, want %d", sentResults, len(results))
	}
	for i, r := range sentResults {
		w := results[i]
		if r.ToolCallID != w.ToolCallID || r.Content != w.Content {
			t.Errorf("tool result %d = {id %q content %q}, want {id %q content %q}", i, r.ToolCallID, r.Content, w.ToolCallID, w.Content)
		}
		if h.Features.ToolResultErrors && r.IsError != w.IsError {
			t.Errorf("tool result %d is_error = %v, want %v", i, r.IsError, w.IsError)
		}
	}
	if texts := userTexts(got); !reflect.DeepEqual(texts, []string{"Read /etc/hosts and /nope."}) {
		t.Errorf("user texts = %q, want the original question only", texts)
	}
}

func testStatusErrors(t *testing.T, h Harness) {
	tests := []struct {
		name       string
		fail       Failure
		class      model.Class
		retryAfter time.Duration
		mention    []string // substrings the message must contain
	}{
		{"400", Failure{Status: 400, Message: "Invalid value for 'temperature'"}, model.ClassPermanent, 0, []string{"400", "Invalid value for 'temperature'"}},
		{"401", Failure{Status: 401, Message: "invalid key"}, model.ClassPermanent, 0, []string{"401", "model.api_key", "invalid key"}},
		{"403", Failure{Status: 403, Message: "not allowed"}, model.ClassPermanent, 0, []string{"403", "not allowed"}},
		{"404", Failure{Status: 404, Message: "model not found"}, model.ClassPermanent, 0, []string{"404", "model.model", Model, "model not found"}},
		{"422", Failure{Status: 422, Message: "unprocessable"}, model.ClassPermanent, 0, []string{"422", "unprocessable"}},
		{"429", Failure{Status: 429, Message: "rate limited", RetryAfter: 7 * time.Second}, model.ClassTransient, 7 * time.Second, []string{"429"}},
		{"500", Failure{Status: 500, Message: "internal"}, model.ClassTransient, 0, []string{"500"}},
		{"503", Failure{Status: 503, Message: "unavailable", RetryAfter: 2 * time.Second}, model.ClassTransient, 2 * time.Second, []string{"503"}},
		{"529", Failure{Status: 529, Message: "Overloaded"}, model.ClassTransient, 0, []string{"529"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := start(t, h, Turn{Fail: &tt.fail})
			_, err := b.Provider.Complete(t.Context(), userRequest("hello"))
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("Complete() error = %v (%T), want *model.Error", err, err)
			}
			if me.Class != tt.class || me.Status != tt.fail.Status || me.RetryAfter != tt.retryAfter {
				t.Errorf("Complete() error = {class %s status %d retry_after %s}, want {%s %d %s}",
					me.Class, me.Status, me.RetryAfter, tt.class, tt.fail.Status, tt.retryAfter)
			}
			if model.Classify(err) != tt.class {
				t.Errorf("model.Classify() = %s, want %s", model.Classify(err), tt.class)
			}
			for _, s := range tt.mention {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if h.Features.Requests {
				if n := len(b.Requests()); n != 1 {
					t.Errorf("backend got %d requests, want exactly 1 attempt", n)
				}
			}
		})
	}
}

func testKeyNotLeaked(t *testing.T, h Harness) {
	for _, status := range []int{400, 401, 429, 500} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			b := start(t, h, Turn{Fail: &Failure{Status: status, Message: "Incorrect API key provided: " + APIKey + " (echoed)"}})
			_, err := b.Provider.Complete(t.Context(), userRequest("hello"))
			if err == nil {
				t.Fatal("Complete() error = nil, want an error")
			}
			shown := []string{err.Error(), fmt.Sprintf("%+v", err)}
			var me *model.Error
			if errors.As(err, &me) {
				shown = append(shown, me.Message, fmt.Sprintf("%+v", *me))
			}
			for _, s := range shown {
				if strings.Contains(s, APIKey) {
					t.Errorf("error leaks the API key: %s", s)
				}
			}
		})
	}
}

func testMalformed(t *testing.T, h Harness) {
	for name, body := range map[string]string{
		"html":      "<html><body>502 Bad Gateway</body></html>",
		"truncated": `{"id":"x","choices":[{"message":{"content":"hel`,
		"empty":     `{}`,
		"null":      `null`,
		"array":     `[]`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := start(t, h, Turn{Body: body})
			_, err := b.Provider.Complete(t.Context(), userRequest("hello"))
			if model.Classify(err) != model.ClassPermanent || !strings.Contains(fmt.Sprint(err), "malformed reply") {
				t.Errorf("Complete() with body %s: error = %v, want a permanent \"malformed reply\" error", body, err)
			}
		})
	}
}

func testDeadline(t *testing.T, h Harness) {
	b := start(t, h, Turn{Hang: true})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := b.Provider.Complete(ctx, userRequest("hello"))
	if model.Classify(err) != model.ClassTimeout {
		t.Errorf("Complete() past ctx deadline: error = %v (class %s), want class timeout", err, model.Classify(err))
	}
}

func testConfigTimeout(t *testing.T, h Harness) {
	b := h.New(t, Setup{Model: Model, APIKey: APIKey, Timeout: 100 * time.Millisecond, Turns: []Turn{{Hang: true}}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a safety net well above model.timeout
	defer cancel()
	began := time.Now()
	_, err := b.Provider.Complete(ctx, userRequest("hello"))
	if model.Classify(err) != model.ClassTimeout {
		t.Errorf("Complete() past model.timeout: error = %v (class %s), want class timeout", err, model.Classify(err))
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("Complete() returned after %s, want about model.timeout (100ms)", d)
	}
}

func testDisconnect(t *testing.T, h Harness) {
	b := start(t, h, Turn{Disconnect: true})
	_, err := b.Provider.Complete(t.Context(), userRequest("hello"))
	if err == nil || model.Classify(err) != model.ClassTransient {
		t.Errorf("Complete() on a dropped connection: error = %v, want class transient", err)
	}
}

// checkCalls compares tool calls; ids must match when sameIDs, and must be
// set and distinct in any case.
func checkCalls(t *testing.T, got, want []model.ToolCall, sameIDs bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("tool calls = %+v, want %+v", got, want)
	}
	seen := map[string]bool{}
	for i := range want {
		if got[i].Name != want[i].Name || !jsonEqual(got[i].Arguments, want[i].Arguments) || (sameIDs && got[i].ID != want[i].ID) {
			t.Errorf("tool call %d = %+v, want %+v", i, got[i], want[i])
		}
		if got[i].ID == "" || seen[got[i].ID] {
			t.Errorf("tool call %d id = %q, want a non-empty id unique in the reply", i, got[i].ID)
		}
		seen[got[i].ID] = true
	}
}

// jsonEqual reports whether a and b are the same JSON value (providers may
// re-encode arguments), or the same text if either is not JSON.
func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}

// userTexts returns the texts of the user turns, in order.
func userTexts(r model.Request) []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == model.RoleUser && m.Content != "" {
			out = append(out, m.Content)
		}
	}
	return out
}
