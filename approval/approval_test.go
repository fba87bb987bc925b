package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
)

// wait bounds every wait for something to happen.
const wait = 20 * time.Second

var linkKey = []byte("0123456789abcdef0123456789abcdef")

func newService(t *testing.T, b *bus.Bus, opts ...approval.Option) *approval.Service {
	t.Helper()
	return approval.New(b, approval.Config{PublicURL: "https://aw.example.com", LinkKey: linkKey, Connectors: []string{"phone", "mail"}}, opts...)
}

// run runs s's timer consumer until the test ends or stop is called.
func run(t *testing.T, s *approval.Service) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(wait):
				t.Error("Run did not return after its ctx ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func request(id string) approval.Request {
	return approval.Request{
		ID: id, Kind: approval.KindWorkflowStep, Run: "run1", Step: "ask", Source: "workflow", Name: "revert",
		Question: "Revert abc123 (confidence 0.9)?", Targets: []string{"phone", "mail:ops@example.com"},
		Timeout: time.Hour,
	}
}

// resumeTo makes r publish its decision as a workflow command (a subject
// AGENTWORK_WORKFLOWS stores).
func resumeTo(b *bus.Bus, r approval.Request) approval.Request {
	r.Resume = &approval.Resume{Subject: b.Subjects.Workflow("approval", "run1"), Data: json.RawMessage(`{"run":"run1","step":"ask"}`)}
	return r
}

// msgs returns the messages of stream on subject filter, in order.
func msgs(t *testing.T, b *bus.Bus, stream, filter string) []jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := b.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.RawStreamMsg
	for subj, n := range info.State.Subjects {
		_ = n
		seq := uint64(0)
		for {
			m, err := st.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(subj))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, *m)
			seq = m.Sequence
		}
	}
	return out
}

// events returns the approval events of outcome for approval id.
func events(t *testing.T, b *bus.Bus, id, outcome string) []bus.Event {
	t.Helper()
	var out []bus.Event
	for _, m := range msgs(t, b, bus.StreamEvents, b.Subjects.Event(approval.Source, outcome)) {
		ev, err := bus.DecodeEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Subject == id {
			out = append(out, ev)
		}
	}
	return out
}

// queued returns the notifications queued for approval id.
func queued(t *testing.T, b *bus.Bus, id string) []connectors.Notification {
	t.Helper()
	var out []connectors.Notification
	for _, m := range msgs(t, b, bus.StreamDeliveries, b.Subjects.Deliveries()) {
		ev, err := bus.DecodeEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		var n connectors.Notification
		if err := ev.DecodeData(&n); err != nil {
			t.Fatal(err)
		}
		if n.Metadata["approval"] == id {
			out = append(out, n)
		}
	}
	return out
}

// resumes returns the resume messages of approval id.
func resumes(t *testing.T, b *bus.Bus) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	for _, m := range msgs(t, b, bus.StreamWorkflows, b.Subjects.Workflow("approval", ">")) {
		ev, err := bus.DecodeEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]json.RawMessage
		if err := ev.DecodeData(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func outcome(t *testing.T, d map[string]json.RawMessage) approval.Outcome {
	t.Helper()
	var o approval.Outcome
	if err := json.Unmarshal(d["approval"], &o); err != nil {
		t.Fatalf("resume data %s: %v", d["approval"], err)
	}
	return o
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recorder is a connector that notes what it is sent and whether the
// approval's record was there (pending) when it was.
type recorder struct {
	s    *approval.Service
	mu   sync.Mutex
	sent []connectors.Notification
	seen []approval.State
}

func (r *recorder) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	var st approval.State
	if n.Approval != nil {
		a, err := r.s.Get(ctx, n.Approval.ID)
		if err == nil {
			st = a.State
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent, r.seen = append(r.sent, n), append(r.seen, st)
	return connectors.Receipt{MessageIDs: []string{fmt.Sprint(len(r.sent))}}, nil
}

func (r *recorder) got() ([]connectors.Notification, []approval.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]connectors.Notification(nil), r.sent...), append([]approval.State(nil), r.seen...)
}

func TestAskRecordsThenAsks(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	rec := &recorder{s: s}
	d := connectors.NewDispatcher(b, connectors.Registry{"phone": rec, "mail": rec}, connectors.DispatcherConfig{}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	id := approval.WorkflowStepID("run1", "ask", 1)
	a, created, err := s.Ask(t.Context(), request(id))
	if err != nil || !created {
		t.Fatalf("Ask = %v, created %v; want created", err, created)
	}
	if a.State != approval.Pending || !a.Asked || a.OnTimeout != approval.Reject {
		t.Errorf("Ask = %+v, want pending, asked, on_timeout reject", a)
	}
	eventually(t, "the question at both targets", func() bool { sent, _ := rec.got(); return len(sent) == 2 })
	sent, seen := rec.got()
	for i, n := range sent {
		if seen[i] != approval.Pending {
			t.Errorf("when %s got the question, the record was %q, want pending (written first)", n.Target, seen[i])
		}
		if n.Approval == nil || n.Approval.ID != id || len(n.Approval.Actions) != 2 {
			t.Fatalf("notification's prompt = %+v, want the approval's two actions", n.Approval)
		}
		for _, act := range n.Approval.Actions {
			if !strings.HasPrefix(act.URL, "https://aw.example.com/approvals/"+id+"/"+act.Verb+"?") {
				t.Errorf("action %s URL = %q, want a signed link", act.Verb, act.URL)
			}
			if !strings.Contains(n.Text, act.Label+": "+act.URL) {
				t.Errorf("text lacks the link of %s:\n%s", act.Verb, n.Text)
			}
		}
		if !strings.HasSuffix(n.Text, n.Approval.Links()) || !strings.HasPrefix(n.Text, "Revert abc123") {
			t.Errorf("text = %q, want the question then the links", n.Text)
		}
	}
	// Asked again (a redelivered step): the same approval, asked once.
	again, created, err := s.Ask(t.Context(), request(id))
	if err != nil || created || again.ID != id || !again.CreatedAt.Equal(a.CreatedAt) {
		t.Fatalf("Ask again = %+v, %v, created %v; want the same approval", again, err, created)
	}
	if n := len(queued(t, b, id)); n != 2 {
		t.Errorf("%d notifications queued after two Asks, want 2", n)
	}
	if n := len(events(t, b, id, "requested")); n != 1 {
		t.Errorf("%d requested events, want 1", n)
	}
}

func TestAskCompletesWhatACrashLeft(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	crash := true
	approval.SetHook(s, func(point, id string) error {
		if crash && point == "ask.recorded" {
			return errors.New("crash")
		}
		return nil
	})
	id := approval.WorkflowStepID("run1", "ask", 1)
	if _, _, err := s.Ask(t.Context(), request(id)); err == nil {
		t.Fatal("Ask with a crash after the record: no error")
	}
	if a, err := s.Get(t.Context(), id); err != nil || a.State != approval.Pending || a.Asked {
		t.Fatalf("after the crash: %+v, %v; want the record, pending, not asked", a, err)
	}
	if n := len(queued(t, b, id)); n != 0 {
		t.Fatalf("%d notifications queued before the crash, want 0 (the record comes first)", n)
	}
	crash = false
	a, created, err := s.Ask(t.Context(), request(id))
	if err != nil || created || !a.Asked {
		t.Fatalf("Ask again = %+v, %v, created %v; want the approval asked", a, err, created)
	}
	if n := len(queued(t, b, id)); n != 2 {
		t.Errorf("%d notifications queued, want 2", n)
	}
	if _, err := bus.NewTimers(b).Pending(t.Context(), "approval."+id); err != nil {
		t.Errorf("the deadline timer: %v", err)
	}
}

func TestAskRefusesBadRequests(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	id := approval.ToolCallID("run1", 0)
	cases := []struct {
		name string
		mod  func(*approval.Request)
		want string
	}{
		{"no question", func(r *approval.Request) { r.Question = " " }, "question is empty"},
		{"no targets", func(r *approval.Request) { r.Targets = nil }, "no targets"},
		{"unknown connector", func(r *approval.Request) { r.Targets = []string{"pager"} }, `no connector named "pager"`},
		{"bad approver", func(r *approval.Request) { r.Approvers = []string{"123"} }, "approvers[0]"},
		{"bad on_timeout", func(r *approval.Request) { r.OnTimeout = "maybe" }, "on_timeout"},
		{"reminder too late", func(r *approval.Request) { r.Reminder = 2 * time.Hour }, "reminder"},
		{"bad id", func(r *approval.Request) { r.ID = "A B" }, "id"},
		{"resume without subject", func(r *approval.Request) { r.Resume = &approval.Resume{} }, "resume.subject"},
	}
	for _, tc := range cases {
		r := request(id)
		tc.mod(&r)
		_, _, err := s.Ask(t.Context(), r)
		if !errors.Is(err, approval.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Ask = %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
}

func TestDecideRace(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	run(t, s)
	id := approval.WorkflowStepID("run1", "ask", 1)
	if _, _, err := s.Ask(t.Context(), resumeTo(b, request(id))); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		v   approval.Verdict
		by  string
		a   approval.Approval
		err error
	}
	answers := make([]answer, 20)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		v := approval.Approve
		if i%2 == 1 {
			v = approval.Reject
		}
		by := fmt.Sprintf("telegram:%d", i)
		wg.Go(func() {
			<-start
			a, err := s.Decide(context.Background(), id, v, by, "")
			answers[i] = answer{v, by, a, err}
		})
	}
	close(start)
	wg.Wait()
	final, err := s.Get(t.Context(), id)
	if err != nil || final.Decision == nil {
		t.Fatalf("Get = %+v, %v", final, err)
	}
	winners := 0
	for _, an := range answers {
		var ce *approval.ConflictError
		switch {
		case an.v == final.Decision.Verdict:
			if an.err != nil || an.a.Decision == nil || *an.a.Decision != *final.Decision {
				t.Errorf("%s %s (the winning verdict) = %+v, %v; want the recorded decision", an.by, an.v, an.a.Decision, an.err)
			}
			if an.by == final.Decision.By {
				winners++
			}
		case errors.As(an.err, &ce):
			if ce.Decision.By != final.Decision.By || !strings.Contains(ce.Error(), final.Decision.By) {
				t.Errorf("%s: conflict %v, want it to name %s", an.by, ce, final.Decision.By)
			}
		default:
			t.Errorf("%s %s = %v; want a *ConflictError", an.by, an.v, an.err)
		}
	}
	if winners != 1 {
		t.Errorf("%d answers are the recorded decider, want 1", winners)
	}
	// Let the timers set by the losers fire: still one resume, one event.
	eventually(t, "the approval finished", func() bool { a, _ := s.Get(t.Context(), id); return a.Finished })
	if _, err := bus.NewTimers(b).Pending(t.Context(), "approval."+id); !errors.Is(err, bus.ErrNoTimer) {
		eventually(t, "no pending timer", func() bool {
			_, err := bus.NewTimers(b).Pending(t.Context(), "approval."+id)
			return errors.Is(err, bus.ErrNoTimer)
		})
	}
	rs := resumes(t, b)
	if len(rs) != 1 {
		t.Fatalf("%d resumes published, want 1", len(rs))
	}
	if o := outcome(t, rs[0]); o.Verdict != final.Decision.Verdict || o.By != final.Decision.By || string(rs[0]["run"]) != `"run1"` {
		t.Errorf("resume = %v, want the asker's data and the decision %+v", rs[0], final.Decision)
	}
	state := string(final.State)
	if n := len(events(t, b, id, state)); n != 1 {
		t.Errorf("%d %s events, want 1", n, state)
	}
}

func TestDecideNotAllowed(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	id := approval.ToolCallID("run2", 3)
	r := request(id)
	r.Kind, r.Tool, r.Args = approval.KindToolCall, "exec", `{"cmd":"rm -rf build"}`
	r.Approvers = []string{"telegram:123456789"}
	a, _, err := s.Ask(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range queued(t, b, id) {
		if n.Approval.Actions[0].URL != "" || strings.Contains(n.Text, "https://") {
			t.Errorf("links offered although the approvers leave links out: %+v", n)
		}
		if !strings.Contains(n.Text, "Tool: exec") || !strings.Contains(n.Text, "rm -rf build") {
			t.Errorf("question text lacks the tool call:\n%s", n.Text)
		}
	}
	for _, by := range []string{"telegram:42", approval.ByLink} {
		if _, err := s.Decide(t.Context(), id, approval.Approve, by, ""); !errors.Is(err, approval.ErrNotAllowed) {
			t.Errorf("Decide by %s = %v, want ErrNotAllowed", by, err)
		}
	}
	if a, _ := s.Get(t.Context(), id); a.State != approval.Pending {
		t.Fatalf("after refused answers: %s, want pending", a.State)
	}
	a, err = s.Decide(t.Context(), id, approval.Reject, "telegram:123456789", "not now")
	if err != nil || a.State != approval.Rejected || a.Decision.Comment != "not now" {
		t.Fatalf("Decide by the approver = %+v, %v", a, err)
	}
	if _, err := s.Decide(t.Context(), "0123456789abcdef0123456789abcdef", approval.Approve, approval.ByAdmin, ""); !errors.Is(err, approval.ErrNoApproval) {
		t.Errorf("Decide of an unknown id = %v, want ErrNoApproval", err)
	}
	if _, err := s.Decide(t.Context(), id, "maybe", approval.ByAdmin, ""); !errors.Is(err, approval.ErrInvalid) {
		t.Errorf("Decide maybe = %v, want ErrInvalid", err)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	id := approval.WorkflowStepID("run3", "ask", 1)
	if _, _, err := s.Ask(t.Context(), resumeTo(b, request(id))); err != nil {
		t.Fatal(err)
	}
	a, err := s.Cancel(t.Context(), id, "the run was cancelled")
	if err != nil || a.State != approval.Cancelled || !a.Finished {
		t.Fatalf("Cancel = %+v, %v", a, err)
	}
	if _, err := s.Decide(t.Context(), id, approval.Approve, approval.ByAdmin, ""); !errors.Is(err, approval.ErrCancelled) {
		t.Errorf("Decide after Cancel = %v, want ErrCancelled", err)
	}
	if n := len(events(t, b, id, "cancelled")); n != 1 {
		t.Errorf("%d cancelled events, want 1", n)
	}
	if n := len(resumes(t, b)); n != 0 {
		t.Errorf("%d resumes after a cancel, want 0", n)
	}
	list, err := s.List(t.Context(), approval.Filter{State: approval.Cancelled})
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Errorf("List(cancelled) = %v, %v", list, err)
	}
	if list, _ := s.List(t.Context(), approval.Filter{State: approval.Pending}); len(list) != 0 {
		t.Errorf("List(pending) = %v, want none", list)
	}
}

// Nobody approves their own request: the credential whose work asked
// may not decide, even where anyone else may (no approvers named); the
// admin and another credential may.
func TestRequesterMayNotDecide(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	id := approval.ToolCallID("run-own", 1)
	r := request(id)
	r.Kind, r.Tool, r.Args = approval.KindToolCall, "exec", `{"argv":["deploy"]}`
	r.Requester = "ci"
	if _, _, err := s.Ask(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decide(t.Context(), id, approval.Approve, approval.ByCredential("ci"), ""); !errors.Is(err, approval.ErrNotAllowed) {
		t.Fatalf("Decide by the requesting credential = %v, want ErrNotAllowed", err)
	}
	if a, _ := s.Get(t.Context(), id); a.State != approval.Pending || a.Requester != "ci" {
		t.Fatalf("after the requester's answer: %s (requester %q), want pending, ci", a.State, a.Requester)
	}
	a, err := s.Decide(t.Context(), id, approval.Approve, approval.ByCredential("ops"), "")
	if err != nil || a.State != approval.Approved {
		t.Fatalf("Decide by another credential = %+v, %v", a, err)
	}
}
