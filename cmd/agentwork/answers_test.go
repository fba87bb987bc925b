package main

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/config"
	"github.com/agentwork/agentwork/connectors"
)

// fakeAnswers reports when its Answer starts and stops polling.
type fakeAnswers struct {
	name        string
	start, stop chan string
}

func (f *fakeAnswers) Answer(ctx context.Context, _ connectors.Decider) error {
	f.start <- f.name
	<-ctx.Done()
	f.stop <- f.name
	return nil
}

// One instance polls a bot at a time, under its lease: the other takes
// over when the first stops; a lost lease stops polling.
func TestOnePollerPerBot(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	start, stop := make(chan string, 4), make(chan string, 4)
	ctx := t.Context()
	cancels := map[string]context.CancelFunc{}
	for _, name := range []string{"one", "two"} {
		pctx, cancel := context.WithCancel(ctx)
		cancels[name] = cancel
		p := &poller{ttl: 900 * time.Millisecond, bus: bustest.Client(t, b), name: "phone", c: &fakeAnswers{name: name, start: start, stop: stop}, log: zap.NewNop()}
		done := make(chan struct{})
		go func() { defer close(done); p.run(pctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	recv := func(ch chan string, what string) string {
		t.Helper()
		select {
		case v := <-ch:
			return v
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s", what)
		}
		return ""
	}
	first := recv(start, "poller started")
	// The lease names the instance that polls; the other waits.
	var rec answerRecord
	ent, err := b.Locks.Get(ctx, answerLeaseKey("phone"))
	if err != nil || ent == nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(ent.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Connector != "phone" || rec.Token == "" {
		t.Fatalf("lease record = %+v", rec)
	}
	cancels[first]()
	if got := recv(stop, "the first poller's stop"); got != first {
		t.Fatalf("%s stopped, want %s", got, first)
	}
	second := recv(start, "the other poller taking over")
	if second == first {
		t.Fatalf("%s polls again after it stopped", first)
	}
	// The lease is lost (removed under it): polling stops, then the
	// lease is taken again and polling resumes.
	if err := b.Locks.Purge(ctx, answerLeaseKey("phone")); err != nil {
		t.Fatal(err)
	}
	if got := recv(stop, "the stop after the lease was lost"); got != second {
		t.Fatalf("%s stopped, want %s", got, second)
	}
	if got := recv(start, "polling again under a new lease"); got != second {
		t.Fatalf("%s polls, want %s", got, second)
	}
}

// Each press is answered with what became of it.
func TestPressReplies(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ap := approval.New(b, approval.Config{})
	ctx := t.Context()
	ask := func(run string) string {
		t.Helper()
		a, _, err := ap.Ask(ctx, approval.Request{ID: approval.WorkflowStepID(run, "ask", 1), Kind: approval.KindWorkflowStep, Run: run,
			Question: "Ship?", Targets: []string{"phone"}, Approvers: []string{"telegram:42"}, Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return a.ID
	}
	d := decider(ap)
	press := func(id, verb, by, conn string) connectors.Reply {
		t.Helper()
		r, err := d(ctx, connectors.Answer{Connector: conn, ApprovalID: id, Verb: verb, By: by, ByName: "Ana"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	id := ask("r1")
	for _, tc := range []struct {
		name, id, verb, by, conn string
		want                     func(connectors.Reply) bool
	}{
		{"elsewhere", id, "approve", "telegram:42", "other", func(r connectors.Reply) bool { return r.Alert && r.Text == replyNotHere && !r.Decided }},
		{"unknown", approval.WorkflowStepID("nope", "ask", 1), "approve", "telegram:42", "phone", func(r connectors.Reply) bool { return r.Alert && r.Text == replyUnknown }},
		{"stranger", id, "approve", "telegram:7", "phone", func(r connectors.Reply) bool { return r.Alert && r.Text == replyNotAllowed && !r.Decided }},
		{"approver", id, "approve", "telegram:42", "phone", func(r connectors.Reply) bool {
			return !r.Alert && r.Text == "Approved" && r.Decided && strings.HasPrefix(r.Summary, "✅ Approved by Ana at ")
		}},
		{"again", id, "approve", "telegram:42", "phone", func(r connectors.Reply) bool { return r.Text == "Approved" && r.Decided }},
		{"conflict", id, "reject", "telegram:42", "phone", func(r connectors.Reply) bool {
			return r.Alert && strings.HasPrefix(r.Text, "Already approved by telegram:42 at ") && r.Decided
		}},
	} {
		if r := press(tc.id, tc.verb, tc.by, tc.conn); !tc.want(r) {
			t.Errorf("%s: reply %+v", tc.name, r)
		}
	}
	cancelled := ask("r2")
	if _, err := ap.Cancel(ctx, cancelled, "its run was cancelled"); err != nil {
		t.Fatal(err)
	}
	if r := press(cancelled, "approve", "telegram:42", "phone"); !r.Alert || !r.Decided || !strings.Contains(r.Text, "cancelled (its run was cancelled)") || !strings.HasPrefix(r.Summary, "🚫 Cancelled") {
		t.Errorf("cancelled: reply %+v", r)
	}
}

// A Telegram connector is polled for button presses only when approvals
// can be asked on it: polling a bot nobody asks on evicts the other
// programs reading it (409) and fails every minute on a bot with a
// webhook.
func TestAnswerersOnlyWhereApprovalsAreAsked(t *testing.T) {
	t.Parallel()
	const conns = "connectors:\n  tg1: {type: telegram, bot_token: '1:a', chat_id: '1'}\n  tg2: {type: telegram, bot_token: '2:b', chat_id: '2'}\n  console: {type: console}\n"
	all := map[string]connectors.Answers{"tg1": &fakeAnswers{name: "tg1"}, "tg2": &fakeAnswers{name: "tg2"}}
	for _, tt := range []struct {
		name, yaml string
		want       []string
	}{
		{"no approvals", conns, nil},
		{"approvals targets", conns + "runner:\n  approval: [notify_user]\n  approvals: {targets: [tg2]}\n", []string{"tg2"}},
		{"runner targets", conns + "runner:\n  targets: [console, 'tg1:5']\ntasks:\n  deploy: {approval: [notify_user]}\n", []string{"tg1"}},
		{"heartbeat, every connector", conns + "heartbeat:\n  approval: [notify_user]\n", []string{"tg1", "tg2"}},
		{"workflow step", conns + "workflows:\n  w:\n    steps:\n      - id: ask\n        approval: {message: go, targets: [tg1]}\n", []string{"tg1"}},
		{"workflow's targets", conns + "workflows:\n  w:\n    targets: [tg2]\n    steps:\n      - id: ask\n        approval: {message: go}\n", []string{"tg2"}},
		{"templated", conns + "workflows:\n  w:\n    steps:\n      - id: ask\n        approval: {message: go, targets: ['${{ input.where }}']}\n", []string{"tg1", "tg2"}},
	} {
		f, err := config.Parse("agentwork.yaml", []byte(tt.yaml), func(string) (string, bool) { return "", false }, connectorTypes())
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got := slices.Sorted(maps.Keys(askedOn(f, all)))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: polled %v, want %v", tt.name, got, tt.want)
		}
	}
}
