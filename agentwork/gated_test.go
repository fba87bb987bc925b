package agentwork_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
)

// gatedWorld is a runner whose runs may call "append" (a line to a file:
// a side effect to count), gated by runner.approval, with the approvals
// service, its timer consumer, and a dispatcher delivering to "phone".
type gatedWorld struct {
	t      *testing.T
	b      *bus.Bus
	events *sink
	phone  *recorder
	svc    *approval.Service
	file   string
	model  *asked
	// block, if set, makes a call of append, after writing, say so on
	// running and wait for its ctx (the instance stopping).
	mu      sync.Mutex
	block   bool
	running chan struct{}
}

// asked is the script provider, recording every request it is sent.
type asked struct {
	p    model.Provider
	mu   sync.Mutex
	seen []model.Request
}

func (a *asked) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	a.mu.Lock()
	a.seen = append(a.seen, req)
	a.mu.Unlock()
	return a.p.Complete(ctx, req)
}

func (a *asked) requests() []model.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]model.Request(nil), a.seen...)
}

func newGatedWorld(t *testing.T) *gatedWorld {
	t.Helper()
	b := bustest.New(t)
	w := &gatedWorld{t: t, b: b, events: watchEvents(t, b), phone: newRecorder(nil), file: filepath.Join(t.TempDir(), "log"), running: make(chan struct{}, 1)}
	p, err := script.New(script.Config{Default: &script.Reply{
		Text:      "all done",
		ToolCalls: []script.Call{{Name: "append", Arguments: map[string]any{"line": "deploy v2"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	w.model = &asked{p: p}
	w.svc = approval.New(b, approval.Config{})
	runInBackground(t, "approval.Service", w.svc.Run)
	startDispatcher(t, b, connectors.Registry{"phone": w.phone})
	return w
}

func (w *gatedWorld) reg() *tools.Registry {
	appendLine := tools.Func("append", "append a line to the log", func(ctx context.Context, a struct {
		Line string `json:"line"`
	}) (string, error) {
		f, err := os.OpenFile(w.file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return "", err
		}
		_, err = f.WriteString(a.Line + "\n")
		f.Close()
		w.mu.Lock()
		block := w.block
		w.mu.Unlock()
		if block {
			w.running <- struct{}{}
			<-ctx.Done() // the instance stops while the call runs
			return "", ctx.Err()
		}
		return "appended " + a.Line, err
	})
	return must(tools.NewRegistry(tools.Notify(), appendLine))
}

// start runs a runner instance until the test ends or stop is called.
func (w *gatedWorld) start() (stop func()) {
	w.t.Helper()
	cfg := testConfig()
	cfg.Approval = []string{"append"}
	cfg.ShutdownGrace = 100 * time.Millisecond
	r := agentwork.NewRunner(w.b, w.model, w.reg(), cfg, agentwork.WithConnectors("phone"), agentwork.WithApprovals(w.svc))
	r.Handle("heartbeat", agentwork.Policy{Tools: []string{"append"}, Targets: []string{"phone"}, Output: []agentwork.OutputGate{agentwork.ModeGate{}}})
	return runInBackground(w.t, "Runner", r.Run)
}

func (w *gatedWorld) publish(id string) {
	w.t.Helper()
	if _, err := agentwork.Publish(w.t.Context(), w.b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "check the deploy", Deliver: agentwork.DeliverReply},
		agentwork.PublishOptions{EventID: id}); err != nil {
		w.t.Fatal(err)
	}
}

// parked waits until the run of request id is parked and returns its
// pending approval.
func (w *gatedWorld) parked(id string) approval.Approval {
	w.t.Helper()
	waitClaimState(w.t, w.b, id, "parked")
	c := readClaim(w.t, w.b, id)
	a, err := w.svc.Get(w.t.Context(), approval.ToolCallID(c.RunID, 0))
	if err != nil {
		w.t.Fatalf("the parked run's approval: %v", err)
	}
	if a.State != approval.Pending {
		w.t.Fatalf("approval %s is %s, want pending", a.ID, a.State)
	}
	return a
}

func (w *gatedWorld) lines() []string {
	raw, err := os.ReadFile(w.file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(raw), " ", "_"))
}

// runEvent waits for the run event of request id.
func (w *gatedWorld) runEvent(id string) received {
	w.t.Helper()
	evs := w.events.wait("the run event of "+id, func(evs []received) bool {
		for _, e := range runOnly(evs) {
			if e.Event.CausationID == id {
				return true
			}
		}
		return false
	})
	for _, e := range runOnly(evs) {
		if e.Event.CausationID == id {
			return e
		}
	}
	return received{}
}

// A gated call parks the run: nothing runs, the message is settled (no
// slot held), the question names the tool and its arguments, and a copy
// of the request changes nothing. Approved, the call is made once and the
// model's reply delivered; the event shows who approved.
func TestGatedCallParksAndRunsOnceApproved(t *testing.T) {
	t.Parallel()
	w := newGatedWorld(t)
	w.start()
	id := bus.NewID()
	w.publish(id)
	a := w.parked(id)
	waitRequestsSettled(t, w.b)
	if a.Tool != "append" || !strings.Contains(a.Args, "deploy v2") || a.Source != "heartbeat" || len(a.Targets) != 1 || a.Targets[0] != "phone" {
		t.Fatalf("approval = %+v, want the append call with its arguments, asked of the run's targets", a)
	}
	q := w.phone.waitSent(t, 1)[0]
	if !strings.Contains(q.Text, "Tool: append") || !strings.Contains(q.Text, "deploy v2") {
		t.Errorf("question = %q, want the tool and its arguments", q.Text)
	}
	if got := w.lines(); len(got) != 0 {
		t.Fatalf("the file has %v while the call waits, want nothing", got)
	}
	// A copy of the request (another Nats-Msg-Id) while parked: acked,
	// nothing runs, still parked.
	if _, err := agentwork.Publish(t.Context(), w.b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "check the deploy", Deliver: agentwork.DeliverReply},
		agentwork.PublishOptions{EventID: id, MsgID: "copy"}); err != nil {
		t.Fatal(err)
	}
	waitRequestsSettled(t, w.b)
	if n := len(w.model.requests()); n != 1 {
		t.Errorf("model calls after the copy = %d, want 1", n)
	}
	if c := readClaim(t, w.b, id); c.State != "parked" {
		t.Errorf("claim after the copy = %s, want parked", c.State)
	}

	if _, err := w.svc.Decide(t.Context(), a.ID, approval.Approve, "telegram:123", ""); err != nil {
		t.Fatal(err)
	}
	ev := w.runEvent(id)
	if ev.Run.Outcome != bus.OutcomeDone || callList(ev.Run) != "append:ok" {
		t.Fatalf("event = %s (%s), calls %s; want done, append:ok", ev.Run.Outcome, ev.Run.Error, callList(ev.Run))
	}
	if got := w.lines(); len(got) != 1 {
		t.Errorf("file lines = %v, want one", got)
	}
	if ap := ev.Run.Approvals; len(ap) != 1 || ap[0].ID != a.ID || ap[0].Verdict != "approve" || ap[0].By != "telegram:123" || ap[0].Tool != "append" {
		t.Errorf("event approvals = %+v, want %s approved by telegram:123", ap, a.ID)
	}
	// The model call before the run parked is listed, from its checkpoint.
	if mc := ev.Run.ModelCalls; len(mc) != 2 || mc[0].ToolCalls != 1 || mc[1].ToolCalls != 0 {
		t.Errorf("event model calls = %+v, want the one that asked for append, then the one after it", mc)
	}
	sent := w.phone.waitSent(t, 2)
	if last := sent[len(sent)-1]; last.Text != "all done" {
		t.Errorf("delivered %q, want the model's reply", last.Text)
	}
	waitRequestsSettled(t, w.b)
	if got := w.lines(); len(got) != 1 {
		t.Errorf("file lines after settling = %v, want one", got)
	}
}

// Rejected, the call is never made and the model is told who refused it
// and why.
func TestGatedCallRejectedTellsTheModel(t *testing.T) {
	t.Parallel()
	w := newGatedWorld(t)
	w.start()
	id := bus.NewID()
	w.publish(id)
	a := w.parked(id)
	if _, err := w.svc.Decide(t.Context(), a.ID, approval.Reject, "telegram:123", "not on a Friday"); err != nil {
		t.Fatal(err)
	}
	ev := w.runEvent(id)
	if ev.Run.Outcome != bus.OutcomeDone || callList(ev.Run) != "append:refused" {
		t.Fatalf("event = %s (%s), calls %s; want done, append:refused", ev.Run.Outcome, ev.Run.Error, callList(ev.Run))
	}
	if got := w.lines(); len(got) != 0 {
		t.Errorf("file lines = %v, want none: the call was rejected", got)
	}
	seen := w.model.requests()
	last := lastMessage(seen[len(seen)-1])
	for _, want := range []string{"a person refused this call", "rejected by telegram:123", "not on a Friday"} {
		if !last.IsError || !strings.Contains(last.Content, want) {
			t.Errorf("the model read %q (error %v), want an error result with %q", last.Content, last.IsError, want)
		}
	}
	if ap := ev.Run.Approvals; len(ap) != 1 || ap[0].Verdict != "reject" || ap[0].Comment != "not on a Friday" {
		t.Errorf("event approvals = %+v, want the rejection with its comment", ap)
	}
}

// Two runs parked at once resume independently, each when its own
// approval is decided; an instance that stopped while they were parked
// leaves them parked for the next.
func TestGatedRunsParkedAtOnceResumeIndependently(t *testing.T) {
	t.Parallel()
	w := newGatedWorld(t)
	stop := w.start()
	one, two := bus.NewID(), bus.NewID()
	w.publish(one)
	w.publish(two)
	a1, a2 := w.parked(one), w.parked(two)
	if a1.ID == a2.ID {
		t.Fatalf("both runs park on approval %s", a1.ID)
	}
	stop() // abandoned while parked
	w.start()
	if _, err := w.svc.Decide(t.Context(), a2.ID, approval.Approve, "admin", ""); err != nil {
		t.Fatal(err)
	}
	if ev := w.runEvent(two); ev.Run.Outcome != bus.OutcomeDone || callList(ev.Run) != "append:ok" {
		t.Fatalf("second run: %s calls %s, want done append:ok", ev.Run.Outcome, callList(ev.Run))
	}
	if c := readClaim(t, w.b, one); c.State != "parked" {
		t.Fatalf("first run's claim = %s after the second's approval, want parked", c.State)
	}
	if _, err := w.svc.Decide(t.Context(), a1.ID, approval.Reject, "admin", ""); err != nil {
		t.Fatal(err)
	}
	if ev := w.runEvent(one); ev.Run.Outcome != bus.OutcomeDone || callList(ev.Run) != "append:refused" {
		t.Fatalf("first run: %s calls %s, want done append:refused", ev.Run.Outcome, callList(ev.Run))
	}
	if got := w.lines(); len(got) != 1 {
		t.Errorf("file lines = %v, want one (the approved run's)", got)
	}
}

// An instance that stops while the approved call runs: the next one goes
// on without making the call again (it may have taken effect), and the
// run finishes.
func TestGatedCallApprovedIsMadeAtMostOnceAcrossAStop(t *testing.T) {
	t.Parallel()
	w := newGatedWorld(t)
	stop := w.start()
	id := bus.NewID()
	w.publish(id)
	a := w.parked(id)
	w.mu.Lock()
	w.block = true
	w.mu.Unlock()
	if _, err := w.svc.Decide(t.Context(), a.ID, approval.Approve, "admin", ""); err != nil {
		t.Fatal(err)
	}
	// The call ran (its line is written) and hangs: stop the instance.
	select {
	case <-w.running:
	case <-time.After(waitTimeout):
		t.Fatal("the approved call never ran")
	}
	stop()
	w.mu.Lock()
	w.block = false
	w.mu.Unlock()
	w.start()
	ev := w.runEvent(id)
	if ev.Run.Outcome != bus.OutcomeDone || callList(ev.Run) != "append:interrupted" {
		t.Fatalf("event = %s (%s), calls %s; want done, append:interrupted", ev.Run.Outcome, ev.Run.Error, callList(ev.Run))
	}
	if got := w.lines(); len(got) != 1 {
		t.Errorf("file lines = %v, want one: the call is made at most once", got)
	}
}

// The question of a gated call never goes where the request said (a
// webhook's caller names its targets): whoever sent the request would be
// sent the means to approve its own call. It goes to the targets the
// operator set: here the source's policy default.
func TestGatedCallQuestionIgnoresTheRequestsTargets(t *testing.T) {
	t.Parallel()
	w := newGatedWorld(t)
	w.start()
	id := bus.NewID()
	if _, err := agentwork.Publish(t.Context(), w.b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "check the deploy",
		Deliver: agentwork.DeliverReply, Targets: []string{"phone:attacker"}}, agentwork.PublishOptions{EventID: id}); err != nil {
		t.Fatal(err)
	}
	a := w.parked(id)
	if len(a.Targets) != 1 || a.Targets[0] != "phone" {
		t.Fatalf("question asked of %v, want [phone] (the policy's targets, not the request's)", a.Targets)
	}
	for _, n := range w.phone.waitSent(t, 1) {
		if n.Target != "phone" {
			t.Errorf("question sent to %q, want phone", n.Target)
		}
	}
}
