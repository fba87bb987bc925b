package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/anthropic"
	"github.com/agentwork/agentwork/model/anthropic/anthropicfake"
	"github.com/agentwork/agentwork/model/openai"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for something the pipeline does.
const waitTimeout = 20 * time.Second

// tiny is the runner's and the dispatcher's backoff: retries come at once
// unless the server asks for a longer wait.
const tiny = 10 * time.Millisecond

// apiKey is the key every provider is configured with; it must never show
// up in an event, a notification or a log line.
const apiKey = "sk-e2e-SECRET-4b1d7f0e9c2a"

// apiKeyEnv is the variable the config read the key from.
const apiKeyEnv = "TEAM_LLM_KEY"

// target is the one connector: a recorder.
const target = "rec"

const checklist = "# Heartbeat\n\n- [ ] Is the disk /var below 90%?\n"

// turn is one scripted answer of a model server, in either wire format.
type turn struct {
	// reply is the 200 answer.
	reply model.Reply
	// status, if set, answers with the API's error body carrying message.
	status  int
	message string
	// retryAfter, if set, is sent as the Retry-After header.
	retryAfter string
	// check, if set, sees the conversation the server received; an error
	// fails the test.
	check func(model.Request) error
	// hang answers nothing until the client gives up.
	hang bool
}

// server is a model API fake behind a real client.
type server struct {
	provider model.Provider
	// model is the configured model name, which done events carry.
	model string
	// requests returns what the server received, as conversations.
	requests func() []model.Request
	// pending is how many scripted turns were not used.
	pending func() int
}

// api starts one kind of model server.
type api struct {
	name  string
	start func(t *testing.T, log *zap.Logger, o options, turns ...turn) server
}

var apis = []api{{"openai", startOpenAI}, {"anthropic", startAnthropic}}

// httpClient is a client whose connections are closed when the test ends
// (goleak would otherwise see their goroutines).
func httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func header(retryAfter string) http.Header {
	if retryAfter == "" {
		return nil
	}
	return http.Header{"Retry-After": {retryAfter}}
}

func startOpenAI(t *testing.T, log *zap.Logger, o options, turns ...turn) server {
	t.Helper()
	srv := openaifake.New(t)
	srv.SetKey("") // accept any key, so a scripted 401 can echo it back
	for _, tn := range turns {
		r := openaifake.Response{Reply: tn.reply, Status: tn.status, Message: tn.message, Header: header(tn.retryAfter), Hang: tn.hang}
		if tn.check != nil {
			check := tn.check
			r.Check = func(req openaifake.Request) error { return check(req.Conversation) }
		}
		srv.Enqueue(r)
	}
	p, err := openai.New(model.Config{Provider: "openai", BaseURL: srv.URL, Model: "gpt-test", APIKey: apiKey, APIKeyEnv: apiKeyEnv, Timeout: o.modelTimeout},
		openai.WithHTTPClient(httpClient(t)), openai.WithLogger(log))
	if err != nil {
		t.Fatalf("openai.New() error = %v", err)
	}
	return server{provider: p, model: "gpt-test", pending: srv.Pending, requests: func() []model.Request {
		var out []model.Request
		for _, r := range srv.Requests() {
			out = append(out, r.Conversation)
		}
		return out
	}}
}

func startAnthropic(t *testing.T, log *zap.Logger, o options, turns ...turn) server {
	t.Helper()
	srv := anthropicfake.New(t)
	srv.SetKey("")
	for _, tn := range turns {
		r := anthropicfake.Response{Reply: tn.reply, Status: tn.status, Message: tn.message, Header: header(tn.retryAfter), Hang: tn.hang}
		if tn.check != nil {
			check := tn.check
			r.Check = func(req anthropicfake.Request) error { return check(req.Conversation) }
		}
		srv.Enqueue(r)
	}
	p, err := anthropic.New(model.Config{Provider: "anthropic", BaseURL: srv.URL, Model: "claude-test", APIKey: apiKey, APIKeyEnv: apiKeyEnv, Timeout: o.modelTimeout},
		anthropic.WithHTTPClient(httpClient(t)), anthropic.WithLogger(log))
	if err != nil {
		t.Fatalf("anthropic.New() error = %v", err)
	}
	return server{provider: p, model: "claude-test", pending: srv.Pending, requests: func() []model.Request {
		var out []model.Request
		for _, r := range srv.Requests() {
			out = append(out, r.Conversation)
		}
		return out
	}}
}

// recorder is the connector: it keeps what it was sent.
type recorder struct {
	mu  sync.Mutex
	got []connectors.Notification
}

var _ connectors.Connector = (*recorder)(nil)

// Send implements connectors.Connector.
func (r *recorder) Send(_ context.Context, n connectors.Notification) (connectors.Receipt, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, n)
	return connectors.Receipt{Parts: 1}, nil
}

func (r *recorder) notifications() []connectors.Notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]connectors.Notification(nil), r.got...)
}

// event is one message seen on <prefix>.event.>.
type event struct {
	subject string
	raw     []byte
	bus.Event
}

func (e event) result(t *testing.T) agentwork.Result {
	t.Helper()
	var r agentwork.Result
	if err := e.DecodeData(&r); err != nil {
		t.Fatalf("event %s: %v", e.subject, err)
	}
	return r
}

func (e event) delivery(t *testing.T) connectors.Result {
	t.Helper()
	var r connectors.Result
	if err := e.DecodeData(&r); err != nil {
		t.Fatalf("event %s: %v", e.subject, err)
	}
	return r
}

// stack is a whole agentwork: bus, heartbeat, runner, dispatcher with the
// recorder, and a subscriber on every event subject, as a user's NATS
// client would be.
type stack struct {
	b    *bus.Bus
	h    *heartbeat.Heartbeat
	rec  *recorder
	logs *observer.ObservedLogs

	msgs chan *nats.Msg
	seen []event
	// taken marks the events of seen that waitFor returned.
	taken map[int]bool
	stop  func()
}

// options adjust a stack.
type options struct {
	runner agentwork.Config
	// modelTimeout is model.timeout, one call's limit (0: the default).
	modelTimeout time.Duration
}

// newLogger returns a debug logger that keeps every entry, to check that no
// secret is logged.
func newLogger() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}

// start runs a stack whose model is a server of kind a playing turns. Stop
// it with stack.stop (also done at the end of the test).
func start(t *testing.T, a api, o options, turns ...turn) (*stack, server) {
	t.Helper()
	log, logs := newLogger()
	srv := a.start(t, log, o, turns...)
	b := bustest.New(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "HEARTBEAT.md"), []byte(checklist), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := heartbeat.New(b, heartbeat.Config{}, heartbeat.WithBaseDir(dir), heartbeat.WithLogger(log))
	if err != nil {
		t.Fatalf("heartbeat.New() error = %v", err)
	}
	reg, err := tools.NewRegistry(tools.Notify())
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.runner
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = []time.Duration{tiny}
	}
	runner := agentwork.NewRunner(b, srv.provider, reg, cfg, agentwork.WithConnectors(target), agentwork.WithLogger(log))
	runner.Handle(bus.SourceHeartbeat, h.Policy())
	runner.Handle(bus.SourceTask, agentwork.Policy{}) // as serve wires tasks: the default delivery
	rec := &recorder{}
	disp := connectors.NewDispatcher(b, connectors.Registry{target: rec}, connectors.DispatcherConfig{Backoff: []time.Duration{tiny}}, log)

	s := &stack{b: b, h: h, rec: rec, logs: logs, msgs: make(chan *nats.Msg, 4096), taken: map[int]bool{}}
	sub, err := b.Conn().ChanSubscribe(b.Subjects.Events(), s.msgs)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() { errs <- runner.Run(ctx) })
	wg.Go(func() { errs <- disp.Run(ctx) })
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			close(errs)
			for err := range errs {
				// Stopped while still creating its consumer, a component
				// reports the cancellation (the dispatcher does when a run
				// ends before it got going).
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("Run() = %v, want nil", err)
				}
			}
			// Everything published so far is in the channel once a round
			// trip to the server is done.
			if err := b.Conn().Flush(); err != nil {
				t.Errorf("flush: %v", err)
			}
			_ = sub.Unsubscribe()
			for {
				select {
				case m := <-s.msgs:
					s.add(t, m)
				default:
					return
				}
			}
		})
	}
	t.Cleanup(s.stop)
	return s, srv
}

func (s *stack) add(t *testing.T, m *nats.Msg) {
	t.Helper()
	ev, err := bus.DecodeEvent(m.Data)
	if err != nil {
		t.Fatalf("event on %s is not a CloudEvent: %v: %s", m.Subject, err, m.Data)
	}
	s.seen = append(s.seen, event{subject: m.Subject, raw: m.Data, Event: ev})
}

// wake fires one heartbeat now.
func (s *stack) wake(t *testing.T) agentwork.Published {
	t.Helper()
	pub, err := s.h.Wake(t.Context())
	if err != nil {
		t.Fatalf("Wake() error = %v", err)
	}
	return pub
}

// task requests a task, as `agentwork task send` does.
func (s *stack) task(t *testing.T, prompt string) agentwork.Published {
	t.Helper()
	pub, err := agentwork.Publish(t.Context(), s.b, agentwork.Request{Source: bus.SourceTask, Name: "e2e", Prompt: prompt, Targets: []string{target}}, agentwork.PublishOptions{})
	if err != nil {
		t.Fatalf("Publish(task) error = %v", err)
	}
	return pub
}

// waitFor returns the first event on subject (relative to the prefix, e.g.
// "heartbeat.done") that it did not return before, whether it was seen
// already or arrives within waitTimeout. Events arrive in any order: a
// notification may be delivered before its run's done event is out.
func (s *stack) waitFor(t *testing.T, subject string) event {
	t.Helper()
	full := strings.TrimSuffix(s.b.Subjects.Events(), ">") + subject
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	next := 0 // the first event of seen not looked at yet
	for {
		for ; next < len(s.seen); next++ {
			if !s.taken[next] && s.seen[next].subject == full {
				s.taken[next] = true
				return s.seen[next]
			}
		}
		select {
		case m := <-s.msgs:
			s.add(t, m)
		case <-timeout.C:
			t.Fatalf("no %s event within %s; seen: %s", subject, waitTimeout, s.subjects())
		}
	}
}

// count says how many events were seen on subject (relative to the prefix).
func (s *stack) count(subject string) int {
	full := strings.TrimSuffix(s.b.Subjects.Events(), ">") + subject
	n := 0
	for _, e := range s.seen {
		if e.subject == full {
			n++
		}
	}
	return n
}

func (s *stack) subjects() string {
	var out []string
	for _, e := range s.seen {
		out = append(out, e.subject)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// settled checks, after stop, that the request was handled for good: no
// message of the runner's consumer is pending or waiting for an ack, so no
// retry is still to come. It returns how often the request was delivered.
func (s *stack) settled(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), waitTimeout)
	defer cancel()
	cons, err := s.b.JetStream().Consumer(ctx, bus.StreamRequests, agentwork.ConsumerName)
	if err != nil {
		t.Fatalf("runner consumer: %v", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatalf("runner consumer info: %v", err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		t.Errorf("runner consumer: %d pending, %d waiting for ack; want the request settled (no retry to come)", info.NumPending, info.NumAckPending)
	}
	return info.Delivered.Consumer
}

// noSecret fails the test if the API key shows in any event, notification
// or log entry.
func (s *stack) noSecret(t *testing.T) {
	t.Helper()
	for _, e := range s.seen {
		if strings.Contains(string(e.raw), apiKey) {
			t.Errorf("event %s shows the API key: %s", e.subject, e.raw)
		}
	}
	for _, n := range s.rec.notifications() {
		if strings.Contains(fmt.Sprintf("%+v", n), apiKey) {
			t.Errorf("notification shows the API key: %+v", n)
		}
	}
	for _, l := range s.logs.All() {
		if line := fmt.Sprintf("%s %v", l.Message, l.ContextMap()); strings.Contains(line, apiKey) {
			t.Errorf("log entry shows the API key: %s", line)
		}
	}
}

// notifyCall is a notify_user call with text.
func notifyCall(id, text string) model.ToolCall {
	args, _ := json.Marshal(tools.NotifyArgs{Text: text})
	return model.ToolCall{ID: id, Name: tools.NotifyName, Arguments: string(args)}
}

// lastToolResult is the last tool result of a conversation.
func lastToolResult(req model.Request) (model.Message, error) {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == model.RoleTool {
			return m, nil
		}
	}
	return model.Message{}, fmt.Errorf("no tool result in the conversation: %+v", req.Messages)
}

// queued says how many notifications were queued for delivery (the
// AGENTWORK_DELIVERIES stream), delivered or not.
func (s *stack) queued(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), waitTimeout)
	defer cancel()
	st, err := s.b.JetStream().Stream(ctx, bus.StreamDeliveries)
	if err != nil {
		t.Fatalf("deliveries stream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("deliveries stream info: %v", err)
	}
	return info.State.Msgs
}
