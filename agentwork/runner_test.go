package agentwork_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
)

// checkRunEvents asserts what every run event must be: a CloudEvents
// envelope of type agentwork.<source>.<outcome> on the matching subject,
// with the CloudEvents content type, a runid, and causationid == the id of
// a request in requests; and exactly one event per run id.
func checkRunEvents(t *testing.T, b *bus.Bus, evs []received, requests ...string) {
	t.Helper()
	perRun := map[string]int{}
	for _, e := range runOnly(evs) {
		ev, res := e.Event, e.Run
		if ev.SpecVersion != "1.0" || ev.ID == "" || ev.Source == "" || ev.Time.IsZero() {
			t.Errorf("event on %s: envelope %+v lacks required CloudEvents attributes", e.Subject, ev)
		}
		if want := bus.TypeOf(res.Source, res.Outcome); ev.Type != want {
			t.Errorf("event on %s: type = %q, want %q", e.Subject, ev.Type, want)
		}
		if want := b.Subjects.Event(res.Source, res.Outcome); e.Subject != want {
			t.Errorf("event type %s: subject = %q, want %q", ev.Type, e.Subject, want)
		}
		if got := e.Header.Get("Content-Type"); got != bus.ContentType {
			t.Errorf("event on %s: Content-Type = %q, want %q", e.Subject, got, bus.ContentType)
		}
		if ev.RunID == "" {
			t.Errorf("event on %s: runid is empty", e.Subject)
		}
		if ev.ID != ev.RunID || e.Header.Get("Nats-Msg-Id") != ev.ID {
			t.Errorf("event on %s: id %q, runid %q, Nats-Msg-Id %q; want all three equal", e.Subject, ev.ID, ev.RunID, e.Header.Get("Nats-Msg-Id"))
		}
		if len(requests) > 0 && !slices.Contains(requests, ev.CausationID) {
			t.Errorf("event on %s: causationid = %q, want one of the requests %v", e.Subject, ev.CausationID, requests)
		}
		perRun[ev.RunID]++
	}
	for run, n := range perRun {
		if n != 1 {
			t.Errorf("run %s emitted %d events, want exactly 1:\n%s", run, n, dump(evs))
		}
	}
}

// gateLog records the order gates were called in.
type gateLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *gateLog) add(s string) {
	l.mu.Lock()
	l.calls = append(l.calls, s)
	l.mu.Unlock()
}

func (l *gateLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

// leaseGate is an input gate that takes a lease (a Releaser).
type leaseGate struct {
	log  *gateLog
	name string
}

func (g leaseGate) Check(context.Context, *agentwork.Run) error { g.log.add(g.name); return nil }
func (g leaseGate) Release(context.Context, *agentwork.Run)     { g.log.add("release " + g.name) }

func TestInputGates(t *testing.T) {
	t.Parallel()
	pass := func(l *gateLog, name string) agentwork.InputGate {
		return agentwork.InputGateFunc(func(context.Context, *agentwork.Run) error { l.add(name); return nil })
	}
	fail := func(l *gateLog, name string, err error) agentwork.InputGate {
		return agentwork.InputGateFunc(func(context.Context, *agentwork.Run) error { l.add(name); return err })
	}
	tests := []struct {
		name      string
		gates     func(l *gateLog) []agentwork.InputGate
		wantCalls []string
		outcome   string
		reason    string
		class     string
		model     int64
	}{
		{
			name: "all pass in order, then the model",
			gates: func(l *gateLog) []agentwork.InputGate {
				return []agentwork.InputGate{pass(l, "a"), pass(l, "b"), pass(l, "c")}
			},
			wantCalls: []string{"a", "b", "c"},
			outcome:   bus.OutcomeDone, model: 1,
		},
		{
			name: "first skip ends the run",
			gates: func(l *gateLog) []agentwork.InputGate {
				return []agentwork.InputGate{fail(l, "a", agentwork.Skip(agentwork.ReasonPaused, "by user")), pass(l, "b")}
			},
			wantCalls: []string{"a"},
			outcome:   bus.OutcomeSkip, reason: agentwork.ReasonPaused,
		},
		{
			name: "middle skip: earlier gates ran, later did not",
			gates: func(l *gateLog) []agentwork.InputGate {
				return []agentwork.InputGate{
					pass(l, "a"),
					fail(l, "b", fmt.Errorf("wrapped: %w", agentwork.Skip(agentwork.ReasonOutside, "22:00"))),
					fail(l, "c", agentwork.Skip(agentwork.ReasonBusy, "")),
				}
			},
			wantCalls: []string{"a", "b"},
			outcome:   bus.OutcomeSkip, reason: agentwork.ReasonOutside,
		},
		{
			name: "a taken lease is released after a later skip",
			gates: func(l *gateLog) []agentwork.InputGate {
				return []agentwork.InputGate{leaseGate{l, "lock"}, fail(l, "b", agentwork.Skip(agentwork.ReasonEmptyList, ""))}
			},
			wantCalls: []string{"lock", "b", "release lock"},
			outcome:   bus.OutcomeSkip, reason: agentwork.ReasonEmptyList,
		},
		{
			name:      "a taken lease is released after a done run",
			gates:     func(l *gateLog) []agentwork.InputGate { return []agentwork.InputGate{leaseGate{l, "lock"}} },
			wantCalls: []string{"lock", "release lock"},
			outcome:   bus.OutcomeDone, model: 1,
		},
		{
			name: "a gate error is retried, then one error event; never a model call",
			gates: func(l *gateLog) []agentwork.InputGate {
				return []agentwork.InputGate{fail(l, "a", errors.New("state unreadable")), pass(l, "b")}
			},
			wantCalls: []string{"a", "a", "a"}, // testConfig().MaxAttempts
			outcome:   bus.OutcomeError, class: string(model.ClassTransient),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			calls, p := scripted(t, script.Config{})
			var log gateLog
			stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": {Input: tt.gates(&log)}})
			id := publish(t, b, agentwork.Request{Source: "task", Name: "gated", Prompt: "go"})

			ev := events.runEvents(1)[0]
			stop()
			if ev.Run.Outcome != tt.outcome || ev.Run.Reason != tt.reason || ev.Run.Class != tt.class {
				t.Errorf("event = %s reason %q class %q, want %s reason %q class %q", ev.Run.Outcome, ev.Run.Reason, ev.Run.Class, tt.outcome, tt.reason, tt.class)
			}
			if got := log.get(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("gate calls = %v, want %v", got, tt.wantCalls)
			}
			if got := calls.Load(); got != tt.model {
				t.Errorf("model runs = %d, want %d", got, tt.model)
			}
			checkRunEvents(t, b, events.final(), id)
		})
	}
}

func TestNotifyUserFailClosed(t *testing.T) {
	t.Parallel()
	notifyCall := func(args map[string]any) script.Call { return script.Call{Name: tools.NotifyName, Arguments: args} }
	tests := []struct {
		name    string
		reply   script.Reply
		outcome string
		reason  string
		text    string // the delivered text, for done
		urgency string
		// toolErr, if set, is a substring of the tool result the model must
		// see on its second call, marked as an error.
		toolErr string
	}{
		{name: "no call: skip ack", reply: script.Reply{Text: "all quiet"}, outcome: bus.OutcomeSkip, reason: agentwork.ReasonAck},
		{name: "blank text: skip empty", reply: script.Reply{Notify: "  \n\t "}, outcome: bus.OutcomeSkip, reason: agentwork.ReasonEmpty, toolErr: "text is empty"},
		{
			name:    "one call: its text, not the prose, is delivered",
			reply:   script.Reply{Text: "I told the user.", ToolCalls: []script.Call{notifyCall(map[string]any{"text": " disk 91% full ", "urgency": "important"})}},
			outcome: bus.OutcomeDone, text: "disk 91% full", urgency: tools.UrgencyImportant,
		},
		{
			name:    "two calls: both sent, as one message, important if either is",
			reply:   script.Reply{Notify: "first", ToolCalls: []script.Call{notifyCall(map[string]any{"text": "second", "urgency": "important"})}},
			outcome: bus.OutcomeDone, text: "first\n\nsecond", urgency: tools.UrgencyImportant,
		},
		{
			name: "six calls: five sent, the sixth refused to the model",
			reply: script.Reply{Notify: "1", ToolCalls: []script.Call{
				notifyCall(map[string]any{"text": "2"}), notifyCall(map[string]any{"text": "3"}), notifyCall(map[string]any{"text": "4"}),
				notifyCall(map[string]any{"text": "5"}), notifyCall(map[string]any{"text": "6"}),
			}},
			outcome: bus.OutcomeDone, text: "1\n\n2\n\n3\n\n4\n\n5", urgency: tools.UrgencyInfo, toolErr: "at most 5",
		},
		{
			name:    "malformed arguments: a tool error the model sees, then skip empty",
			reply:   script.Reply{ToolCalls: []script.Call{{Name: tools.NotifyName, RawArguments: "{not json"}}},
			outcome: bus.OutcomeSkip, reason: agentwork.ReasonEmpty, toolErr: "not a JSON object",
		},
		{
			name:    "bad urgency: a tool error, nothing delivered",
			reply:   script.Reply{ToolCalls: []script.Call{notifyCall(map[string]any{"text": "x", "urgency": "critical"})}},
			outcome: bus.OutcomeSkip, reason: agentwork.ReasonEmpty, toolErr: "urgency",
		},
		{
			// The model was told the first call failed; delivering it anyway
			// would send what the model believes was not sent.
			name: "a call the tool rejected does not count; the valid one after it wins",
			reply: script.Reply{ToolCalls: []script.Call{
				notifyCall(map[string]any{"text": "rejected", "colour": "red"}),
				notifyCall(map[string]any{"text": "accepted"}),
			}},
			outcome: bus.OutcomeDone, text: "accepted", urgency: tools.UrgencyInfo, toolErr: "unknown field",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			sp, err := script.New(script.Config{Rules: []script.Rule{{Match: script.Match{Source: "heartbeat"}, Reply: tt.reply}}})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var seen []model.Request
			p := model.ProviderFunc(func(ctx context.Context, req model.Request) (model.Reply, error) {
				mu.Lock()
				seen = append(seen, req)
				mu.Unlock()
				return sp.Complete(ctx, req)
			})
			stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"heartbeat": notifyPolicy(b, time.Hour)}, agentwork.WithConnectors("rec"))
			id := publish(t, b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "check the list"})

			ev := events.runEvents(1)[0]
			stop()
			if ev.Run.Outcome != tt.outcome || ev.Run.Reason != tt.reason {
				t.Fatalf("event = %s reason %q (%s), want %s reason %q", ev.Run.Outcome, ev.Run.Reason, ev.Run.Detail, tt.outcome, tt.reason)
			}
			q := queued(t, b)
			if tt.outcome == bus.OutcomeDone {
				if ev.Run.Text != tt.text || ev.Run.Urgency != tt.urgency {
					t.Errorf("done text, urgency = %q, %q; want %q, %q", ev.Run.Text, ev.Run.Urgency, tt.text, tt.urgency)
				}
				if len(q) != 1 || q[0].Text != tt.text || q[0].Urgency != tt.urgency || q[0].Target != "rec" {
					t.Errorf("queued = %+v, want one notification %q (%s) for rec", q, tt.text, tt.urgency)
				}
			} else if len(q) != 0 {
				t.Errorf("queued = %+v, want nothing for a skip", q)
			}
			if tt.toolErr != "" {
				mu.Lock()
				defer mu.Unlock()
				if len(seen) < 2 {
					t.Fatalf("model called %d time(s), want a second call with the tool result", len(seen))
				}
				var found bool
				for _, m := range seen[1].Messages {
					if m.Role == model.RoleTool && m.IsError && strings.Contains(m.Content, tt.toolErr) && m.ToolName == tools.NotifyName {
						found = true
					}
				}
				if !found {
					t.Errorf("second model call's messages = %+v; want a notify_user tool error containing %q", seen[1].Messages, tt.toolErr)
				}
			}
			checkRunEvents(t, b, events.final(), id)
		})
	}
}

func TestDedupAcrossInstances(t *testing.T) {
	t.Parallel()
	rule := script.Config{Rules: []script.Rule{{Match: script.Match{Source: "heartbeat"}, Reply: script.Reply{Notify: "Disk full!"}}}}
	tests := []struct {
		name string
		run  func(t *testing.T, events *sink, a, b *bus.Bus, p model.Provider) []string
	}{
		{
			name: "one instance after the other",
			run: func(t *testing.T, events *sink, a, b *bus.Bus, p model.Provider) []string {
				stopA := startRunner(t, a, p, testConfig(), map[string]agentwork.Policy{"heartbeat": notifyPolicy(a, time.Hour)}, agentwork.WithConnectors("rec"))
				id1 := publish(t, a, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "1"})
				events.runEvents(1)
				stopA()
				startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"heartbeat": notifyPolicy(b, time.Hour)}, agentwork.WithConnectors("rec"))
				id2 := publish(t, b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "2"})
				events.runEvents(2)
				return []string{id1, id2}
			},
		},
		{
			name: "both instances at once",
			run: func(t *testing.T, events *sink, a, b *bus.Bus, p model.Provider) []string {
				startRunner(t, a, p, testConfig(), map[string]agentwork.Policy{"heartbeat": notifyPolicy(a, time.Hour)}, agentwork.WithConnectors("rec"))
				startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"heartbeat": notifyPolicy(b, time.Hour)}, agentwork.WithConnectors("rec"))
				id1 := publish(t, a, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "1"})
				id2 := publish(t, b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "2"})
				events.runEvents(2)
				return []string{id1, id2}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := bustest.New(t)
			b := bustest.Client(t, a)
			calls, p := scripted(t, rule)
			events := watchEvents(t, a)
			ids := tt.run(t, events, a, b, p)
			evs := runOnly(events.wait("two run events", func(evs []received) bool { return len(runOnly(evs)) >= 2 }))
			var outcomes []string
			for _, e := range evs {
				outcomes = append(outcomes, e.Run.Outcome+"/"+e.Run.Reason)
			}
			slices.Sort(outcomes)
			if want := []string{"done/", "skip/duplicate"}; !slices.Equal(outcomes, want) {
				t.Errorf("outcomes = %v, want %v", outcomes, want)
			}
			if got := calls.Load(); got != 2 {
				t.Errorf("model runs = %d, want 2 (dedup is an output gate: both runs ask the model)", got)
			}
			if q := queued(t, a); len(q) != 1 || q[0].Text != "Disk full!" || q[0].DedupKey == "" {
				t.Errorf("queued = %+v, want one notification carrying its dedup key", q)
			}
			checkRunEvents(t, a, evs, ids...)
		})
	}
}

// A notification that no connector delivered must not hold back the next
// identical one; one that was delivered must.
func TestDedupReleasedWhenUndelivered(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		fail      func(n connectors.Notification, call int) error
		outcomes  []string // of the second run
		delivered int
	}{
		{
			name: "first delivery failed for good: the second is sent",
			fail: func(_ connectors.Notification, call int) error {
				if call == 1 {
					return connectors.Permanent(errors.New("chat not found"))
				}
				return nil
			},
			outcomes: []string{"done/"}, delivered: 1,
		},
		{
			name:     "first delivery succeeded: the second is a duplicate",
			outcomes: []string{"skip/duplicate"}, delivered: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := bustest.New(t)
			b := bustest.Client(t, a) // the second run happens on another instance
			events := watchEvents(t, a)
			_, p := scripted(t, script.Config{Default: &script.Reply{Notify: "backup failed"}})
			rec := newRecorder(tt.fail)
			startDispatcher(t, a, connectors.Registry{"rec": rec})
			stopA := startRunner(t, a, p, testConfig(), map[string]agentwork.Policy{"heartbeat": notifyPolicy(a, time.Hour)}, agentwork.WithConnectors("rec"))
			id1 := publish(t, a, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "1"})
			events.wait("the first notification's delivery outcome", func(evs []received) bool {
				return len(deliveryOnly(evs, connectors.OutcomeFailed))+len(deliveryOnly(evs, connectors.OutcomeDelivered)) == 1
			})
			stopA()
			startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"heartbeat": notifyPolicy(b, time.Hour)}, agentwork.WithConnectors("rec"))
			id2 := publish(t, b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "2"})
			evs := events.runEvents(2)
			if got := evs[1].Run.Outcome + "/" + evs[1].Run.Reason; !slices.Contains(tt.outcomes, got) {
				t.Errorf("second run = %s, want %v", got, tt.outcomes)
			}
			if evs[1].Run.Outcome == bus.OutcomeDone {
				rec.waitSent(t, tt.delivered)
			}
			if got := len(rec.delivered()); got != tt.delivered {
				t.Errorf("connector delivered %d notification(s), want %d", got, tt.delivered)
			}
			checkRunEvents(t, a, evs, id1, id2)
		})
	}
}

func TestModelErrors(t *testing.T) {
	t.Parallel()
	loopForever := model.ProviderFunc(func(context.Context, model.Request) (model.Reply, error) {
		return model.Reply{ToolCalls: []model.ToolCall{{ID: "c", Name: tools.NotifyName, Arguments: `{"text":"again"}`}}}, nil
	})
	no := false
	tests := []struct {
		name     string
		reply    *script.Reply  // script rule, or
		provider model.Provider // a provider of its own
		policy   func(*agentwork.Policy)
		outcome  string
		class    model.Class
		attempt  int
		calls    int64 // model runs
		// queued: the texts queued for delivery ("alert" = the failure alert).
		queued []string
		// minGap is the least time between the first two model calls.
		minGap time.Duration
	}{
		{
			name:    "permanent: one error event, no retry, an alert",
			reply:   &script.Reply{Text: "hi", Error: &script.Fault{Class: "permanent", Status: 401, Message: "invalid api key"}},
			outcome: bus.OutcomeError, class: model.ClassPermanent, attempt: 1, calls: 1, queued: []string{"alert"},
		},
		{
			name:    "permanent with alerts off: nothing queued",
			reply:   &script.Reply{Text: "hi", Error: &script.Fault{Class: "permanent"}},
			policy:  func(p *agentwork.Policy) { p.Alert = &no },
			outcome: bus.OutcomeError, class: model.ClassPermanent, attempt: 1, calls: 1,
		},
		{
			name:    "transient twice, then success: retried by redelivery",
			reply:   &script.Reply{Text: "hi", Error: &script.Fault{Class: "transient", Times: 2, Status: 503}},
			outcome: bus.OutcomeDone, attempt: 3, calls: 3, queued: []string{"hi"},
		},
		{
			name:    "timeout once, then success",
			reply:   &script.Reply{Text: "hi", Error: &script.Fault{Class: "timeout", Times: 1}},
			outcome: bus.OutcomeDone, attempt: 2, calls: 2, queued: []string{"hi"},
		},
		{
			name:    "Retry-After longer than the backoff is honoured",
			reply:   &script.Reply{Text: "hi", Error: &script.Fault{Class: "transient", Times: 1, Status: 429, RetryAfter: 300 * time.Millisecond}},
			outcome: bus.OutcomeDone, attempt: 2, calls: 2, queued: []string{"hi"}, minGap: 300 * time.Millisecond,
		},
		{
			name:    "transient until MaxAttempts: one error event and an alert",
			reply:   &script.Reply{Text: "hi", Error: &script.Fault{Class: "transient", Status: 503}},
			outcome: bus.OutcomeError, class: model.ClassTransient, attempt: 3, calls: 3, queued: []string{"alert"},
		},
		{
			name:    "run timeout until MaxAttempts",
			reply:   &script.Reply{Text: "hi", Delay: time.Minute},
			policy:  func(p *agentwork.Policy) { p.Timeout = 50 * time.Millisecond },
			outcome: bus.OutcomeError, class: model.ClassTimeout, attempt: 3, calls: 3, queued: []string{"alert"},
		},
		{
			name:     "tool loop over max_steps is permanent",
			provider: loopForever,
			policy:   func(p *agentwork.Policy) { p.MaxSteps = 2 },
			outcome:  bus.OutcomeError, class: model.ClassPermanent, attempt: 1, calls: 1, queued: []string{"alert"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			var calls *atomic.Int64
			var p model.Provider
			if tt.reply != nil {
				calls, p = scripted(t, script.Config{Rules: []script.Rule{{Reply: *tt.reply}}})
			} else {
				calls, p = counted(tt.provider)
			}
			var mu sync.Mutex
			var at []time.Time
			timed := model.ProviderFunc(func(ctx context.Context, req model.Request) (model.Reply, error) {
				mu.Lock()
				at = append(at, time.Now())
				mu.Unlock()
				return p.Complete(ctx, req)
			})
			pol := agentwork.Policy{}
			if tt.policy != nil {
				tt.policy(&pol)
			}
			stop := startRunner(t, b, timed, testConfig(), map[string]agentwork.Policy{"cron": pol}, agentwork.WithConnectors("rec"))
			id := publish(t, b, agentwork.Request{Source: "cron", Name: "report", Prompt: "sales"})

			ev := events.runEvents(1)[0]
			waitRequestsSettled(t, b)
			stop()
			if ev.Run.Outcome != tt.outcome || model.Class(ev.Run.Class) != tt.class || ev.Run.Attempt != tt.attempt {
				t.Errorf("event = %s class %q attempt %d (%s), want %s class %q attempt %d", ev.Run.Outcome, ev.Run.Class, ev.Run.Attempt, ev.Run.Error, tt.outcome, tt.class, tt.attempt)
			}
			if got := calls.Load(); got != tt.calls {
				t.Errorf("model runs = %d, want %d", got, tt.calls)
			}
			var texts []string
			for _, n := range queued(t, b) {
				switch {
				case strings.HasSuffix(n.ID, ".alert.rec") && n.Urgency == tools.UrgencyImportant && strings.Contains(n.Text, "failed"):
					texts = append(texts, "alert")
				default:
					texts = append(texts, n.Text)
				}
			}
			if !slices.Equal(texts, tt.queued) {
				t.Errorf("queued = %q, want %q", texts, tt.queued)
			}
			if tt.minGap > 0 {
				mu.Lock()
				if gap := at[1].Sub(at[0]); gap < tt.minGap {
					t.Errorf("retry came %s after the failure, want at least %s", gap, tt.minGap)
				}
				mu.Unlock()
			}
			if c := readClaim(t, b, id); c.State != "done" || c.Outcome != tt.outcome {
				t.Errorf("claim = %+v, want done with outcome %s", c, tt.outcome)
			}
			if got, want := keyTTL(t, b, "run."+id), bus.SettledTTL.String(); got != want {
				t.Errorf("done claim's TTL = %q, want %q (kept while its request can come again)", got, want)
			}
			checkRunEvents(t, b, events.final(), id)
		})
	}
}

// Emitting an event never crashes a run: with the events stream gone or
// full, the run still finishes, delivers and acks its request.
// When the events stream rejects the run's event, the run still delivers
// its notification, and the request is not acked without its event: it is
// put back and, once the stream takes writes again, the event is emitted
// exactly once, without calling the model again.
func TestEmitFailureDoesNotStopTheRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		breakEvents   func(t *testing.T, b *bus.Bus)
		restoreEvents func(t *testing.T, b *bus.Bus)
	}{
		{
			name: "events stream deleted",
			breakEvents: func(t *testing.T, b *bus.Bus) {
				if err := b.JetStream().DeleteStream(t.Context(), bus.StreamEvents); err != nil {
					t.Fatal(err)
				}
			},
			restoreEvents: func(t *testing.T, b *bus.Bus) {
				for _, sc := range b.StreamConfigs() {
					if sc.Name == bus.StreamEvents {
						if _, err := b.JetStream().CreateStream(t.Context(), sc); err != nil {
							t.Fatal(err)
						}
					}
				}
			},
		},
		{
			name: "events stream full and rejecting new messages",
			breakEvents: func(t *testing.T, b *bus.Bus) {
				js := b.JetStream()
				st, err := js.Stream(t.Context(), bus.StreamEvents)
				if err != nil {
					t.Fatal(err)
				}
				cfg := st.CachedInfo().Config
				cfg.MaxMsgs, cfg.Discard = 1, jetstream.DiscardNew
				if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
					t.Fatal(err)
				}
				if _, err := js.Publish(t.Context(), b.Subjects.Event("test", "filler"), []byte("{}")); err != nil {
					t.Fatal(err)
				}
			},
			restoreEvents: func(t *testing.T, b *bus.Bus) {
				js := b.JetStream()
				st, err := js.Stream(t.Context(), bus.StreamEvents)
				if err != nil {
					t.Fatal(err)
				}
				cfg := st.CachedInfo().Config
				cfg.MaxMsgs, cfg.Discard = -1, jetstream.DiscardOld
				if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			tt.breakEvents(t, b)
			calls, p := scripted(t, script.Config{Default: &script.Reply{Text: "report ready"}})
			rec := newRecorder(nil)
			startDispatcher(t, b, connectors.Registry{"rec": rec})
			outcomes := make(chan string, 4)
			pol := agentwork.Policy{Observer: agentwork.ObserverFunc(func(_ *agentwork.Run, o string) { outcomes <- o })}
			stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": pol}, agentwork.WithConnectors("rec"))
			id := publish(t, b, agentwork.Request{Source: "task", Name: "report", Prompt: "go"})

			// The notification goes out although the event cannot.
			if got := rec.waitSent(t, 1); got[0].Text != "report ready" || got[0].RequestID != id {
				t.Errorf("delivered %+v, want the report of request %s", got[0], id)
			}
			// The request is put back with its result kept, not acked.
			waitClaimState(t, b, id, "deferred")
			select {
			case o := <-outcomes:
				t.Fatalf("the run ended (%s) while its event could not be stored", o)
			default:
			}
			tt.restoreEvents(t, b)
			select {
			case o := <-outcomes:
				if o != bus.OutcomeDone {
					t.Errorf("outcome = %s, want done", o)
				}
			case <-time.After(waitTimeout):
				t.Fatal("the run did not end after the events stream came back")
			}
			waitRequestsSettled(t, b)
			stop()
			if c := readClaim(t, b, id); c.State != "done" {
				t.Errorf("claim = %+v, want done", c)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("model calls = %d, want 1 (the retry emits the kept result)", n)
			}
			if n := len(rec.delivered()); n != 1 {
				t.Errorf("delivered %d times, want once", n)
			}
			st, err := b.JetStream().Stream(t.Context(), bus.StreamEvents)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.GetLastMsgForSubject(t.Context(), b.Subjects.Event("task", bus.OutcomeDone)); err != nil {
				t.Errorf("no done event stored after the stream came back: %v", err)
			}
		})
	}
}

// A failing connector marks its notification failed and never holds back
// another connector.
func TestConnectorFailureIsolated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		bad       func(release <-chan struct{}) func(connectors.Notification, int) error
		failed    bool // the bad connector's notifications end as failed events
		permanent bool
	}{
		{
			name: "permanent error",
			bad: func(<-chan struct{}) func(connectors.Notification, int) error {
				return func(connectors.Notification, int) error { return connectors.Permanent(errors.New("401 bad token")) }
			},
			failed: true, permanent: true,
		},
		{
			name: "retryable until attempts run out",
			bad: func(<-chan struct{}) func(connectors.Notification, int) error {
				return func(connectors.Notification, int) error { return connectors.Retry(errors.New("503"), 0) }
			},
			failed: true,
		},
		{
			name: "hangs",
			bad: func(release <-chan struct{}) func(connectors.Notification, int) error {
				return func(connectors.Notification, int) error { <-release; return errors.New("gave up") }
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			_, p := scripted(t, script.Config{Default: &script.Reply{Text: "result of {{prompt}}"}})
			good := newRecorder(nil)
			release := make(chan struct{})
			bad := newRecorder(tt.bad(release))
			startDispatcher(t, b, connectors.Registry{"good": good, "bad": bad})
			t.Cleanup(func() { close(release) }) // before the dispatcher stops
			startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": {}}, agentwork.WithConnectors("bad", "good"))
			id1 := publish(t, b, agentwork.Request{Source: "task", Name: "one", Prompt: "one"})
			id2 := publish(t, b, agentwork.Request{Source: "task", Name: "two", Prompt: "two"})

			got := good.waitSent(t, 2)
			texts := []string{got[0].Text, got[1].Text}
			slices.Sort(texts)
			if want := []string{"result of one", "result of two"}; !slices.Equal(texts, want) {
				t.Errorf("good connector sent %q, want %q", texts, want)
			}
			evs := events.wait("both runs and the deliveries", func(evs []received) bool {
				return len(runOnly(evs)) == 2 && len(deliveryOnly(evs, connectors.OutcomeDelivered)) == 2 &&
					(!tt.failed || len(deliveryOnly(evs, connectors.OutcomeFailed)) == 2)
			})
			for _, e := range runOnly(evs) {
				if e.Run.Outcome != bus.OutcomeDone || !slices.Equal(e.Run.Targets, []string{"bad", "good"}) || len(e.Run.NotificationIDs) != 2 {
					t.Errorf("run event %+v, want done with both targets and two notification ids", e.Run)
				}
			}
			for _, e := range deliveryOnly(evs, connectors.OutcomeDelivered) {
				if e.Delivery.Connector != "good" {
					t.Errorf("delivered event from %q, want only good", e.Delivery.Connector)
				}
			}
			for _, e := range deliveryOnly(evs, connectors.OutcomeFailed) {
				d := e.Delivery
				if d.Connector != "bad" || d.Error == "" || d.Permanent != tt.permanent || d.Notification.RunID == "" || e.Event.RunID != d.Notification.RunID {
					t.Errorf("failed event %+v (runid %s), want bad's failure with its error, permanent=%v, tied to its run", d, e.Event.RunID, tt.permanent)
				}
			}
			checkRunEvents(t, b, evs, id1, id2)
		})
	}
}

// A request already run is not run again, and a run cut off by a crash is
// finished once, by another instance, under the same run id.
func TestRedeliveryAfterCrash(t *testing.T) {
	t.Parallel()
	const crashedRun = "0190d6a4-0000-7000-8000-00000000dead"
	type setup struct {
		b     *bus.Bus
		reqID string
	}
	tests := []struct {
		name string
		// before runs before the runner starts; the request is published
		// with reqID as its envelope id.
		before func(t *testing.T, s setup)
		// republish stores the same request again (same envelope id, so
		// the same claim; another Nats-Msg-Id, so the stream keeps both)
		// "after" the run ended or "during" the model call.
		republish string
		// liveLease: the claim belongs to a live instance until it expires.
		liveLease bool
		calls     int64
		events    int
		runID     string // "" any
		outcome   string
		queued    int
		attempt   int
	}{
		{
			name:      "the same request stored again after it finished",
			republish: "after",
			calls:     1, events: 1, outcome: bus.OutcomeDone, queued: 1, attempt: 1,
		},
		{
			name:      "the same request stored again while it runs",
			republish: "during",
			calls:     1, events: 1, outcome: bus.OutcomeDone, queued: 1, attempt: 1,
		},
		{
			name: "a done claim from an earlier life",
			before: func(t *testing.T, s setup) {
				putClaim(t, s.b, s.reqID, claimRecord{State: "done", RunID: crashedRun, Owner: "gone", Attempts: 1, Outcome: "done"})
			},
			calls: 0, events: 0,
		},
		{
			name: "crash before the model answered: taken over with the same run id",
			before: func(t *testing.T, s setup) {
				putClaim(t, s.b, s.reqID, claimRecord{State: "running", RunID: crashedRun, Owner: "gone", Expires: time.Now().Add(-time.Second), Attempts: 1})
			},
			calls: 1, events: 1, runID: crashedRun, outcome: bus.OutcomeDone, queued: 1, attempt: 2, // a takeover counts an attempt
		},
		{
			name: "crash after the dedup key was taken: its own key is not a duplicate",
			before: func(t *testing.T, s setup) {
				putClaim(t, s.b, s.reqID, claimRecord{State: "running", RunID: crashedRun, Owner: "gone", Expires: time.Now().Add(-time.Second), Attempts: 1})
				if _, err := s.b.Dedup.Create(t.Context(), agentwork.NoticeKey("heartbeat", "default", []string{"rec"}, "disk full"), []byte(crashedRun), jetstream.KeyTTL(time.Hour)); err != nil {
					t.Fatal(err)
				}
			},
			calls: 1, events: 1, runID: crashedRun, outcome: bus.OutcomeDone, queued: 1, attempt: 2, // a takeover counts an attempt
		},
		{
			name: "crash after the notification was queued: queued once",
			before: func(t *testing.T, s setup) {
				putClaim(t, s.b, s.reqID, claimRecord{State: "running", RunID: crashedRun, Owner: "gone", Expires: time.Now().Add(-time.Second), Attempts: 1})
				if _, err := s.b.Dedup.Create(t.Context(), agentwork.NoticeKey("heartbeat", "default", []string{"rec"}, "disk full"), []byte(crashedRun), jetstream.KeyTTL(time.Hour)); err != nil {
					t.Fatal(err)
				}
				if err := connectors.Enqueue(t.Context(), s.b, connectors.Notification{
					ID: crashedRun + ".rec", RunID: crashedRun, RequestID: s.reqID, Source: "heartbeat", Name: "default",
					Text: "disk full", Urgency: tools.UrgencyInfo, Target: "rec", Time: time.Now(),
				}); err != nil {
					t.Fatal(err)
				}
			},
			calls: 1, events: 1, runID: crashedRun, outcome: bus.OutcomeDone, queued: 1, attempt: 2, // a takeover counts an attempt
		},
		{
			name: "a live instance's claim is left alone until its lease ends",
			before: func(t *testing.T, s setup) {
				putClaim(t, s.b, s.reqID, claimRecord{State: "running", RunID: crashedRun, Owner: "alive", Expires: time.Now().Add(time.Second), Attempts: 1})
			},
			liveLease: true, calls: 1, events: 1, runID: crashedRun, outcome: bus.OutcomeDone, queued: 1, attempt: 2, // a takeover counts an attempt
		},
		{
			name: "a claim of a process on this data dir that is gone is taken over at once",
			before: func(t *testing.T, s setup) {
				putClaim(t, s.b, s.reqID, claimRecord{State: "running", RunID: crashedRun, Owner: "killed", Boot: "deadbeef", Expires: time.Now().Add(time.Hour), Attempts: 1})
			},
			calls: 1, events: 1, runID: crashedRun, outcome: bus.OutcomeDone, queued: 1, attempt: 2, // a takeover counts an attempt
		},
		{
			name: "a claim of another live instance of this process is left alone until its lease ends",
			before: func(t *testing.T, s setup) {
				l := bustest.Client(t, s.b).NewLease(time.Now().Add(time.Second))
				putClaim(t, s.b, s.reqID, claimRecord{State: "running", RunID: crashedRun, Owner: l.Owner, Boot: l.Boot, Expires: l.Expires, Attempts: 1})
			},
			liveLease: true, calls: 1, events: 1, runID: crashedRun, outcome: bus.OutcomeDone, queued: 1, attempt: 2, // a takeover counts an attempt
		},
		{
			name: "a request that crashed its runner MaxAttempts times is given up with one error event",
			before: func(t *testing.T, s setup) {
				putClaim(t, s.b, s.reqID, claimRecord{State: "running", RunID: crashedRun, Owner: "gone", Expires: time.Now().Add(-time.Second), Attempts: 3})
			},
			calls: 0, events: 1, runID: crashedRun, outcome: bus.OutcomeError, queued: 1, attempt: 4, // the alert
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			s := setup{b: b, reqID: bus.NewID()}
			var firstCall atomic.Pointer[time.Time]
			started, held := make(chan struct{}), make(chan struct{})
			if tt.republish != "during" {
				close(held)
			}
			sp := must(script.New(script.Config{Default: &script.Reply{Notify: "disk full"}}))
			calls, p := counted(model.ProviderFunc(func(ctx context.Context, req model.Request) (model.Reply, error) {
				now := time.Now()
				if firstCall.CompareAndSwap(nil, &now) {
					close(started)
				}
				select {
				case <-held:
				case <-ctx.Done():
					return model.Reply{}, ctx.Err()
				}
				return sp.Complete(ctx, req)
			}))
			republish := func() {
				if _, err := agentwork.Publish(t.Context(), b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "check"},
					agentwork.PublishOptions{EventID: s.reqID, MsgID: "stored-again"}); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			if tt.before != nil {
				tt.before(t, s)
			}
			var leaseEnd time.Time
			if tt.liveLease {
				leaseEnd = readClaim(t, b, s.reqID).Expires
			}
			stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"heartbeat": notifyPolicy(b, time.Hour)}, agentwork.WithConnectors("rec"))
			if _, err := agentwork.Publish(t.Context(), b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "check"},
				agentwork.PublishOptions{EventID: s.reqID}); err != nil {
				t.Fatal(err)
			}
			if tt.republish == "during" {
				<-started
				republish()
				waitConsumer(t, b, "the copy handed to the runner", func(ci *jetstream.ConsumerInfo) bool { return ci.Delivered.Stream >= 2 })
				close(held)
			}
			if tt.events > 0 {
				events.runEvents(1)
			}
			if tt.republish == "after" {
				republish()
			}
			waitRequestsSettled(t, b)
			stop()
			evs := runOnly(events.final())
			if len(evs) != tt.events {
				t.Fatalf("%d run events, want %d:\n%s", len(evs), tt.events, dump(evs))
			}
			if got := calls.Load(); got != tt.calls {
				t.Errorf("model runs = %d, want %d", got, tt.calls)
			}
			if q := queued(t, b); len(q) != tt.queued {
				t.Errorf("queued %d notifications, want %d: %+v", len(q), tt.queued, q)
			}
			if tt.events == 0 {
				return
			}
			ev := evs[0]
			if ev.Run.Outcome != tt.outcome || ev.Run.Attempt != tt.attempt {
				t.Errorf("event = %s (%s %s) attempt %d, want %s attempt %d", ev.Run.Outcome, ev.Run.Reason, ev.Run.Detail, ev.Run.Attempt, tt.outcome, tt.attempt)
			}
			if tt.runID != "" && ev.Event.RunID != tt.runID {
				t.Errorf("runid = %s, want the crashed run's %s", ev.Event.RunID, tt.runID)
			}
			if !leaseEnd.IsZero() {
				if fc := firstCall.Load(); fc == nil || fc.Before(leaseEnd) {
					t.Errorf("model called at %v, before the live lease ended at %v (started %v)", fc, leaseEnd, start)
				}
			}
			if c := readClaim(t, b, s.reqID); c.State != "done" || c.RunID != ev.Event.RunID {
				t.Errorf("claim = %+v, want done by run %s", c, ev.Event.RunID)
			}
			checkRunEvents(t, b, evs, s.reqID)
		})
	}
}

func TestConcurrentRunsStayIndependent(t *testing.T) {
	t.Parallel()
	const n = 20
	b := bustest.New(t)
	events := watchEvents(t, b)
	sp := must(script.New(script.Config{Default: &script.Reply{Text: "echo: {{prompt}}", Delay: 20 * time.Millisecond}}))
	var inflight, peak atomic.Int64
	p := model.ProviderFunc(func(ctx context.Context, req model.Request) (model.Reply, error) {
		cur := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			old := peak.Load()
			if cur <= old || peak.CompareAndSwap(old, cur) {
				break
			}
		}
		return sp.Complete(ctx, req)
	})
	rec := newRecorder(nil)
	startDispatcher(t, b, connectors.Registry{"rec": rec})
	cfg := testConfig()
	cfg.Concurrency = 4
	startRunner(t, b, p, cfg, map[string]agentwork.Policy{"task": {}}, agentwork.WithConnectors("rec"))
	prompts := map[string]string{} // request id -> prompt
	var ids []string
	for i := range n {
		prompt := fmt.Sprintf("prompt %02d", i)
		id := publish(t, b, agentwork.Request{Source: "task", Name: fmt.Sprintf("job-%d", i%3), Prompt: prompt})
		prompts[id] = prompt
		ids = append(ids, id)
	}
	evs := events.runEvents(n)
	for _, e := range evs {
		want := "echo: " + prompts[e.Event.CausationID]
		if e.Run.Outcome != bus.OutcomeDone || e.Run.Text != want || e.Run.Reply != want {
			t.Errorf("run of request %s: %s text %q, want done with %q", e.Event.CausationID, e.Run.Outcome, e.Run.Text, want)
		}
	}
	for _, nt := range rec.waitSent(t, n) {
		if want := "echo: " + prompts[nt.RequestID]; nt.Text != want {
			t.Errorf("notification of request %s = %q, want %q", nt.RequestID, nt.Text, want)
		}
	}
	if got := peak.Load(); got < 2 || got > int64(cfg.Concurrency) {
		t.Errorf("peak concurrent model calls = %d, want 2..%d", got, cfg.Concurrency)
	}
	checkRunEvents(t, b, evs, ids...)
}

// Requests the runner cannot run end with one error event, never silently,
// and are terminated rather than redelivered.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	envelope := func(data string) []byte {
		if data != "" {
			data = `,"data":` + data
		}
		return []byte(`{"specversion":"1.0","id":"0190d6a4-0000-7000-8000-0000000000aa","source":"test","type":"agentwork.task.requested","time":"2026-01-01T00:00:00Z"` + data + `}`)
	}
	tests := []struct {
		name    string
		subject string
		data    []byte
		source  string // of the error event
		cause   string // wanted causationid
		errText string
	}{
		{name: "unknown source", subject: "agentwork.request.nosuch.x", data: envelope(`{"prompt":"hi"}`), source: "nosuch", cause: "0190d6a4-0000-7000-8000-0000000000aa", errText: "unknown source"},
		{name: "not JSON", subject: "agentwork.request.task.x", data: []byte("not json"), source: "task", cause: "msg-not-json", errText: "malformed request"},
		{name: "not an envelope", subject: "agentwork.request.task.x", data: []byte(`{"prompt":"hi"}`), source: "task", cause: "msg-not-an-envelope", errText: "malformed request"},
		{name: "invalid request data", subject: "agentwork.request.task.x", data: envelope(`{"prompt":"hi","deliver":"fax"}`), source: "task", cause: "0190d6a4-0000-7000-8000-0000000000aa", errText: "deliver"},
		{name: "data missing", subject: "agentwork.request.task.x", data: envelope(""), source: "task", cause: "0190d6a4-0000-7000-8000-0000000000aa", errText: "malformed request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			terminated := make(chan *nats.Msg, 4)
			sub, err := b.Conn().ChanSubscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."+bus.StreamRequests+"."+agentwork.ConsumerName, terminated)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			calls, p := scripted(t, script.Config{})
			stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": {}}, agentwork.WithConnectors("rec"))
			msg := &nats.Msg{Subject: tt.subject, Data: tt.data, Header: nats.Header{}}
			msg.Header.Set(jetstream.MsgIDHeader, "msg-"+strings.ReplaceAll(strings.ToLower(tt.name), " ", "-"))
			if _, err := b.JetStream().PublishMsg(t.Context(), msg); err != nil {
				t.Fatal(err)
			}
			ev := events.runEvents(1)[0]
			ci := waitRequestsSettled(t, b)
			stop()
			if ev.Run.Outcome != bus.OutcomeError || ev.Run.Class != string(model.ClassPermanent) || !strings.Contains(ev.Run.Error, tt.errText) {
				t.Errorf("event = %s class %q error %q, want a permanent error mentioning %q", ev.Run.Outcome, ev.Run.Class, ev.Run.Error, tt.errText)
			}
			if ev.Subject != b.Subjects.Event(tt.source, bus.OutcomeError) {
				t.Errorf("event subject = %s, want %s", ev.Subject, b.Subjects.Event(tt.source, bus.OutcomeError))
			}
			if ev.Event.CausationID != tt.cause {
				t.Errorf("causationid = %q, want %q", ev.Event.CausationID, tt.cause)
			}
			if ci.Delivered.Consumer != 1 || calls.Load() != 0 || len(queued(t, b)) != 0 {
				t.Errorf("deliveries %d, model calls %d, queued %d; want 1, 0, 0", ci.Delivered.Consumer, calls.Load(), len(queued(t, b)))
			}
			checkRunEvents(t, b, events.final())
		})
	}
}

// While the model works the runner tells JetStream it is still busy, so a
// slow model does not get its request redelivered.
func TestSlowModelIsNotRedelivered(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	calls, p := scripted(t, script.Config{Default: &script.Reply{Text: "slow", Delay: 1500 * time.Millisecond}})
	cfg := testConfig()
	cfg.AckWait = time.Second
	stop := startRunner(t, b, p, cfg, map[string]agentwork.Policy{"task": {}})
	id := publish(t, b, agentwork.Request{Source: "task", Name: "slow", Prompt: "take your time"})
	events.runEvents(1)
	ci := waitRequestsSettled(t, b)
	stop()
	if ci.Delivered.Consumer != 1 || calls.Load() != 1 {
		t.Errorf("delivered %d times, model called %d times; want 1 and 1 (progress must hold the ack deadline)", ci.Delivered.Consumer, calls.Load())
	}
	checkRunEvents(t, b, events.final(), id)
}

// A deferred request (an input gate asking to try later) is retried without
// using up a model attempt.
func TestDeferDoesNotCountAnAttempt(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	var checks atomic.Int64
	gate := agentwork.InputGateFunc(func(context.Context, *agentwork.Run) error {
		if checks.Add(1) <= 3 {
			return agentwork.Defer(10*time.Millisecond, "previous run still going")
		}
		return nil
	})
	// The model fails transiently once: with MaxAttempts 2 there is room
	// for that one retry only if the deferrals did not count.
	calls, p := scripted(t, script.Config{Default: &script.Reply{Text: "ok", Error: &script.Fault{Class: "transient", Times: 1}}})
	cfg := testConfig()
	cfg.MaxAttempts = 2
	stop := startRunner(t, b, p, cfg, map[string]agentwork.Policy{"cron": {Input: []agentwork.InputGate{gate}}})
	id := publish(t, b, agentwork.Request{Source: "cron", Name: "queued", Prompt: "go"})
	ev := events.runEvents(1)[0]
	stop()
	if ev.Run.Outcome != bus.OutcomeDone || ev.Run.Attempt != 2 || calls.Load() != 2 || checks.Load() != 5 {
		t.Errorf("event %s attempt %d (%s), model calls %d, gate checks %d; want done at attempt 2 after 2 model calls and 5 checks",
			ev.Run.Outcome, ev.Run.Attempt, ev.Run.Error, calls.Load(), checks.Load())
	}
	checkRunEvents(t, b, events.final(), id)
}

// A run cut short by shutdown goes back to the stream and is finished by
// the next instance, once, under the same run id.
func TestShutdownPutsRunsBack(t *testing.T) {
	t.Parallel()
	a := bustest.New(t)
	b := bustest.Client(t, a)
	events := watchEvents(t, a)
	started := make(chan struct{}, 1)
	var calls atomic.Int64
	p := model.ProviderFunc(func(ctx context.Context, req model.Request) (model.Reply, error) {
		if calls.Add(1) == 1 {
			started <- struct{}{}
			<-ctx.Done() // the first instance is shut down mid-call
			return model.Reply{}, ctx.Err()
		}
		return model.Reply{Text: "finished"}, nil
	})
	cfg := testConfig()
	cfg.ShutdownGrace = 50 * time.Millisecond
	stopA := startRunner(t, a, p, cfg, map[string]agentwork.Policy{"task": {}})
	id := publish(t, a, agentwork.Request{Source: "task", Name: "long", Prompt: "go"})
	select {
	case <-started:
	case <-time.After(waitTimeout):
		t.Fatal("model not called")
	}
	firstRun := readClaim(t, a, id).RunID
	stopA()
	if evs := runOnly(events.final()); len(evs) != 0 {
		t.Fatalf("a run interrupted by shutdown emitted %s", dump(evs))
	}
	startRunner(t, b, p, cfg, map[string]agentwork.Policy{"task": {}})
	ev := events.runEvents(1)[0]
	if ev.Run.Outcome != bus.OutcomeDone || ev.Event.RunID != firstRun || ev.Run.Attempt != 1 || calls.Load() != 2 {
		t.Errorf("event %s runid %s attempt %d, model calls %d; want done under run %s at attempt 1 after 2 calls",
			ev.Run.Outcome, ev.Event.RunID, ev.Run.Attempt, calls.Load(), firstRun)
	}
	waitRequestsSettled(t, a)
	checkRunEvents(t, a, events.final(), id)
}

// Requests an instance had taken but not started when it shut down go back
// at once, not after AckWait: the next instance runs them promptly.
func TestShutdownHandsQueuedRequestsBack(t *testing.T) {
	t.Parallel()
	for _, concurrency := range []int{1, 4} {
		t.Run(fmt.Sprintf("concurrency %d", concurrency), func(t *testing.T) {
			t.Parallel()
			n := 3 * concurrency
			a := bustest.New(t)
			b := bustest.Client(t, a)
			events := watchEvents(t, a)
			started := make(chan struct{}, n)
			blocking := model.ProviderFunc(func(ctx context.Context, req model.Request) (model.Reply, error) {
				started <- struct{}{}
				<-ctx.Done()
				return model.Reply{}, ctx.Err()
			})
			cfg := testConfig()
			cfg.Concurrency, cfg.ShutdownGrace, cfg.AckWait = concurrency, 50*time.Millisecond, 30*time.Second
			stopA := startRunner(t, a, blocking, cfg, map[string]agentwork.Policy{"task": {}})
			var ids []string
			for i := range n {
				ids = append(ids, publish(t, a, agentwork.Request{Source: "task", Name: "queued", Prompt: fmt.Sprint(i)}))
			}
			for range concurrency {
				select {
				case <-started:
				case <-time.After(waitTimeout):
					t.Fatal("model not called")
				}
			}
			waitConsumer(t, a, "the first instance to hold more than the requests it runs", func(ci *jetstream.ConsumerInfo) bool {
				return ci.NumAckPending > concurrency
			})
			stopA()
			_, p := scripted(t, script.Config{})
			startRunner(t, b, p, cfg, map[string]agentwork.Policy{"task": {}})
			evs := events.runEvents(n) // times out (waitTimeout < AckWait) if a request was held back
			for _, e := range evs {
				if e.Run.Outcome != bus.OutcomeDone {
					t.Errorf("run of %s: %s, want done", e.Event.CausationID, e.Run.Outcome)
				}
			}
			checkRunEvents(t, a, evs, ids...)
		})
	}
}

// A run that cannot work out ends at once with one permanent error event and
// its request settled: no silent redelivery loop, no model retries.
func TestRunsThatCannotWork(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		policy  func(l *gateLog) agentwork.Policy
		req     agentwork.Request
		panics  bool // the provider panics
		model   int64
		errText string
		gates   []string
	}{
		{
			name: "an input gate panics",
			policy: func(l *gateLog) agentwork.Policy {
				return agentwork.Policy{Input: []agentwork.InputGate{
					leaseGate{l, "lock"},
					agentwork.InputGateFunc(func(context.Context, *agentwork.Run) error { panic("nil map") }),
				}}
			},
			errText: "panic", gates: []string{"lock", "release lock"},
		},
		{
			name:    "the model provider panics",
			policy:  func(*gateLog) agentwork.Policy { return agentwork.Policy{} },
			panics:  true,
			model:   1,
			errText: "panic",
		},
		{
			name: "an output gate panics",
			policy: func(*gateLog) agentwork.Policy {
				return agentwork.Policy{Output: []agentwork.OutputGate{agentwork.OutputGateFunc(func(context.Context, *agentwork.Run, agentwork.Output) error { panic("boom") })}}
			},
			model:   1,
			errText: "panic",
		},
		{
			name:    "every target is unknown",
			policy:  func(*gateLog) agentwork.Policy { return agentwork.Policy{} },
			req:     agentwork.Request{Targets: []string{"slack"}},
			errText: "slack",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			sp := must(script.New(script.Config{}))
			calls, p := counted(model.ProviderFunc(func(ctx context.Context, req model.Request) (model.Reply, error) {
				if tt.panics {
					panic("provider bug")
				}
				return sp.Complete(ctx, req)
			}))
			var log gateLog
			stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": tt.policy(&log)}, agentwork.WithConnectors("rec"))
			req := tt.req
			req.Source, req.Name, req.Prompt = "task", "broken", "go"
			id := publish(t, b, req)
			ev := events.runEvents(1)[0]
			ci := waitRequestsSettled(t, b)
			stop()
			if ev.Run.Outcome != bus.OutcomeError || ev.Run.Class != string(model.ClassPermanent) || !strings.Contains(ev.Run.Error, tt.errText) {
				t.Errorf("event = %s class %q error %q, want a permanent error mentioning %q", ev.Run.Outcome, ev.Run.Class, ev.Run.Error, tt.errText)
			}
			if calls.Load() != tt.model || ci.Delivered.Consumer != 1 {
				t.Errorf("model runs %d, deliveries %d; want %d and 1", calls.Load(), ci.Delivered.Consumer, tt.model)
			}
			if got := log.get(); !slices.Equal(got, tt.gates) {
				t.Errorf("gate calls = %v, want %v", got, tt.gates)
			}
			if c := readClaim(t, b, id); c.State != "done" || c.Outcome != bus.OutcomeError {
				t.Errorf("claim = %+v, want done with outcome error", c)
			}
			checkRunEvents(t, b, events.final(), id)
		})
	}
}

// releaseFlag is an input gate whose lease release is observable.
type releaseFlag struct{ released atomic.Bool }

func (g *releaseFlag) Check(context.Context, *agentwork.Run) error { return nil }
func (g *releaseFlag) Release(context.Context, *agentwork.Run)     { g.released.Store(true) }

// A subscriber that starts new work on seeing a run's event must find the
// run's leases free: they are released before the event is emitted.
func TestLeasesReleasedBeforeTheEvent(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	gate := &releaseFlag{}
	seen := make(chan bool, 1)
	sub, err := b.Conn().Subscribe(b.Subjects.Event("task", "*"), func(*nats.Msg) {
		select {
		case seen <- gate.released.Load():
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_, p := scripted(t, script.Config{})
	stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": {Input: []agentwork.InputGate{gate}}})
	defer stop()
	publish(t, b, agentwork.Request{Source: "task", Name: "lease", Prompt: "go"})
	select {
	case released := <-seen:
		if !released {
			t.Fatal("the run's event arrived while its input-gate lease was still held")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no event")
	}
}

// A heartbeat that ends in skip "ack" still spent tokens: its event says so.
func TestSkipEventsCarryModelAndUsage(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	_, p := scripted(t, script.Config{Default: &script.Reply{Text: "all fine, nothing to report"}})
	stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"heartbeat": notifyPolicy(b, time.Hour)})
	publish(t, b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "checklist: disks"})
	ev := events.runEvents(1)[0]
	stop()
	if ev.Run.Outcome != bus.OutcomeSkip || ev.Run.Reason != agentwork.ReasonAck {
		t.Fatalf("outcome = %s %s, want skip ack", ev.Run.Outcome, ev.Run.Reason)
	}
	if ev.Run.Model != "script" || ev.Run.Usage == nil || ev.Run.Usage.OutputTokens == 0 {
		t.Errorf("skip event model %q usage %+v, want the model and its token usage", ev.Run.Model, ev.Run.Usage)
	}
}

// A heartbeat whose API key expired fails on every tick: it alerts once per
// alert window, not every tick; another name or class alerts on its own.
func TestAlertsAreNotRepeated(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	_, p := scripted(t, script.Config{Default: &script.Reply{Error: &script.Fault{Class: "permanent", Message: "401: check model.api_key"}}})
	cfg := testConfig()
	cfg.Targets = []string{"rec"}
	stop := startRunner(t, b, p, cfg, map[string]agentwork.Policy{"heartbeat": {}}, agentwork.WithConnectors("rec"))
	for _, name := range []string{"default", "default", "default", "other"} {
		publish(t, b, agentwork.Request{Source: "heartbeat", Name: name, Prompt: "check"})
	}
	evs := events.runEvents(4)
	waitRequestsSettled(t, b)
	stop()
	for _, e := range evs {
		if e.Run.Outcome != bus.OutcomeError {
			t.Fatalf("outcome = %s, want error", e.Run.Outcome)
		}
	}
	alerts := map[string]int{}
	for _, n := range queued(t, b) {
		alerts[n.Name]++
	}
	if alerts["default"] != 1 || alerts["other"] != 1 {
		t.Fatalf("alerts queued per name = %v, want one for default and one for other", alerts)
	}
}

func TestRunnerReady(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	_, p := scripted(t, script.Config{})
	r := agentwork.NewRunner(b, p, must(tools.NewRegistry(tools.Notify())), testConfig())
	if err := r.Ready(t.Context()); !errors.Is(err, agentwork.ErrNotConsuming) {
		t.Fatalf("Ready before Run = %v, want ErrNotConsuming", err)
	}
	stop := runInBackground(t, "runner", r.Run)
	deadline := time.Now().Add(10 * time.Second)
	for r.Ready(t.Context()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("Ready never nil while Run consumes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := r.Ready(t.Context()); !errors.Is(err, agentwork.ErrNotConsuming) {
		t.Fatalf("Ready after Run returned = %v, want ErrNotConsuming", err)
	}
}

// A run whose notification could be queued for one target but not another
// is retried from its checkpoint: the model is not called again (it might
// answer differently), both targets get the same text, and the done event
// reports that text.
func TestPartialQueueingRetriesTheSameNotice(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	js := b.JetStream()
	st, err := js.Stream(t.Context(), bus.StreamDeliveries)
	if err != nil {
		t.Fatal(err)
	}
	orig := st.CachedInfo().Config
	full := orig
	full.MaxMsgsPerSubject, full.Discard, full.DiscardNewPerSubject = 1, jetstream.DiscardNew, true
	if _, err := js.UpdateStream(t.Context(), full); err != nil {
		t.Fatal(err)
	}
	filler := connectors.Notification{ID: "filler", RunID: "filler", Source: "task", Name: "x", Text: "filler", Target: "b", Time: time.Now()}
	if err := connectors.Enqueue(t.Context(), b, filler); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	p := model.ProviderFunc(func(context.Context, model.Request) (model.Reply, error) {
		n := calls.Add(1)
		return model.Reply{Text: fmt.Sprintf("Disk %d is full", n), Model: "counter"}, nil
	})
	events := watchEvents(t, b)
	stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": {Targets: []string{"a", "b"}}}, agentwork.WithConnectors("a", "b"))
	id := publish(t, b, agentwork.Request{Source: "task", Name: "disk", Prompt: "check"})
	waitClaimState(t, b, id, "retry")
	if _, err := js.UpdateStream(t.Context(), orig); err != nil {
		t.Fatal(err)
	}
	ev := events.runEvents(1)[0]
	waitRequestsSettled(t, b)
	stop()
	if n := calls.Load(); n != 1 {
		t.Errorf("model calls = %d, want 1", n)
	}
	if ev.Run.Outcome != bus.OutcomeDone || ev.Run.Text != "Disk 1 is full" {
		t.Errorf("event = %s %q, want done with the first answer", ev.Run.Outcome, ev.Run.Text)
	}
	texts := map[string]string{}
	for _, n := range queued(t, b) {
		if n.ID != "filler" {
			texts[n.Target] = n.Text
		}
	}
	if texts["a"] != "Disk 1 is full" || texts["b"] != "Disk 1 is full" {
		t.Errorf("queued %v, want the same first answer for a and b", texts)
	}
}

// A runner whose durable consumer is deleted under it (an operator, a
// re-created stream) must not go on waiting while requests pile up: Run
// returns an error, which stops `agentwork serve`.
func TestRunStopsWhenItsConsumerIsDeleted(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	_, p := scripted(t, script.Config{})
	r := agentwork.NewRunner(b, p, must(tools.NewRegistry(tools.Notify())), testConfig())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(t.Context()) }()
	deadline := time.Now().Add(waitTimeout)
	for r.Ready(t.Context()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("runner never ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.JetStream().DeleteConsumer(t.Context(), bus.StreamRequests, agentwork.ConsumerName); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "lost") {
			t.Fatalf("Run = %v, want a consumer lost error", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run went on after its consumer was deleted")
	}
}

// A gate whose lookups time out while the bus answers pings is not an
// outage: the attempts are spent and the run ends with one error event,
// never a silent loop.
func TestGateTimeoutsWhileTheBusAnswersSpendAttempts(t *testing.T) {
	t.Parallel()
	for _, gerr := range []error{nats.ErrTimeout, context.DeadlineExceeded, jetstream.ErrBucketNotFound} {
		t.Run(gerr.Error(), func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			var checks atomic.Int64
			gate := agentwork.InputGateFunc(func(context.Context, *agentwork.Run) error {
				checks.Add(1)
				return fmt.Errorf("read state: %w", gerr)
			})
			calls, p := scripted(t, script.Config{})
			stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": {Input: []agentwork.InputGate{gate}}})
			publish(t, b, agentwork.Request{Source: "task", Name: "slowgate", Prompt: "go"})
			ev := events.runEvents(1)[0]
			stop()
			if ev.Run.Outcome != bus.OutcomeError || checks.Load() != 3 {
				t.Fatalf("event = %s after %d checks, want one error event after 3 (max_attempts)", ev.Run.Outcome, checks.Load())
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("model calls = %d, want 0", n)
			}
		})
	}
}

// A run that saved its checkpoint and was then interrupted at its last
// attempt is finished from the checkpoint, not failed as a crash loop:
// resuming calls no model.
func TestCheckpointResumesPastTheCrashGuard(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	calls, p := scripted(t, script.Config{})
	id := bus.NewID()
	runID := bus.NewID()
	res := agentwork.Result{Source: "task", Name: "cp", Outcome: bus.OutcomeDone, Text: "saved text", Targets: []string{"rec"}, NotificationIDs: []string{runID + ".rec"}, Attempt: 3}
	raw, _ := json.Marshal(map[string]any{
		"state": "running", "run_id": runID, "owner": "gone", "expires": time.Now().Add(-time.Second), "attempts": 3,
		"checkpoint": map[string]any{"result": res, "notice": map[string]any{"Text": "saved text", "Urgency": "info"}, "targets": []string{"rec"}},
	})
	if _, err := b.Locks.Put(t.Context(), "run."+id, raw); err != nil {
		t.Fatal(err)
	}
	stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": {}}, agentwork.WithConnectors("rec"))
	if _, err := agentwork.Publish(t.Context(), b, agentwork.Request{Source: "task", Name: "cp", Prompt: "go"}, agentwork.PublishOptions{EventID: id}); err != nil {
		t.Fatal(err)
	}
	ev := events.runEvents(1)[0]
	waitRequestsSettled(t, b)
	stop()
	if ev.Run.Outcome != bus.OutcomeDone || ev.Run.Text != "saved text" || ev.Event.RunID != runID {
		t.Fatalf("event = %s %q run %s, want the checkpoint's done event of run %s", ev.Run.Outcome, ev.Run.Text, ev.Event.RunID, runID)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("model calls = %d, want 0 (resumed from the checkpoint)", n)
	}
	q := queued(t, b)
	if len(q) != 1 || q[0].Text != "saved text" {
		t.Errorf("queued %+v, want the saved notice once", q)
	}
}
