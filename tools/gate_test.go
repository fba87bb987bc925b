package tools_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// lastState keeps the last State a Loop saved.
type lastState struct {
	st    tools.State
	saves int
}

func (j *lastState) Save(_ context.Context, s tools.State) error {
	j.st, j.saves = s, j.saves+1
	return nil
}

// gate holds the calls of append, answering with next; it records the
// indexes it was asked about.
type gate struct {
	next  tools.Decision
	asked []int
}

func (g *gate) Gates(name string) bool { return name == "append" }

func (g *gate) Check(_ context.Context, _ model.ToolCall, index int) (tools.Decision, error) {
	g.asked = append(g.asked, index)
	return g.next, nil
}

// A gated call waits: the Loop ends with ErrWaiting, the call not made and
// held in the saved State; From that State, once decided, the call runs
// (approved) or the model reads the refusal (refused), and is asked about
// with the same index.
func TestLoopGateHoldsACallUntilDecided(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		decision tools.Decision
		appended int32
		outcome  string
	}{
		{"approved: runs once", tools.Decision{}, 1, tools.OutcomeOK},
		{"refused: never runs, the model is told", tools.Decision{Refused: "a person refused this call"}, 0, tools.OutcomeRefused},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSideEffects(t)
			j := &lastState{}
			g := &gate{next: tools.Decision{Wait: true}}
			p := &scripted{replies: []model.Reply{calls(notifyCall("n", "hi"), appendCall("a", "x"))}}
			_, err := tools.Loop(t.Context(), p, s.reg, model.Request{Messages: prompt}, tools.Limits{}, tools.WithJournal(j), tools.WithGate(g))
			if !errors.Is(err, tools.ErrWaiting) {
				t.Fatalf("Loop = %v, want ErrWaiting", err)
			}
			if n := s.append.Load(); n != 0 {
				t.Fatalf("append ran %d times while waiting, want 0", n)
			}
			if j.st.Held != "a" || len(j.st.Calls) != 1 {
				t.Fatalf("saved state: held %q, %d calls; want held \"a\" after notify_user's call", j.st.Held, len(j.st.Calls))
			}
			// Still undecided: waits again, nothing run.
			_, err = tools.Loop(t.Context(), p, s.reg, model.Request{Messages: prompt}, tools.Limits{}, tools.WithJournal(j), tools.WithGate(g), tools.From(j.st))
			if !errors.Is(err, tools.ErrWaiting) || s.append.Load() != 0 {
				t.Fatalf("Loop From the held state, undecided = %v (append ran %d), want ErrWaiting, nothing run", err, s.append.Load())
			}
			g.next = tt.decision
			p.replies = []model.Reply{{Text: "done"}}
			res, err := tools.Loop(t.Context(), p, s.reg, model.Request{Messages: prompt}, tools.Limits{}, tools.WithJournal(j), tools.WithGate(g), tools.From(j.st))
			if err != nil {
				t.Fatal(err)
			}
			if n := s.append.Load(); n != tt.appended {
				t.Errorf("append ran %d times, want %d", n, tt.appended)
			}
			if got := res.Calls[len(res.Calls)-1].Outcome; got != tt.outcome {
				t.Errorf("the held call's outcome = %s, want %s", got, tt.outcome)
			}
			if tt.decision.Refused != "" {
				last := p.seen[len(p.seen)-1].Messages
				if m := last[len(last)-1]; !m.IsError || !strings.Contains(m.Content, tt.decision.Refused) {
					t.Errorf("the model read %q, want the refusal", m.Content)
				}
			}
			if len(g.asked) != 3 || g.asked[0] != 1 || g.asked[1] != 1 || g.asked[2] != 1 {
				t.Errorf("asked about indexes %v, want [1 1 1]", g.asked)
			}
			if j.st.Held != "" {
				t.Errorf("held %q after the decision, want none", j.st.Held)
			}
		})
	}
}

// A held call that was approved is saved as no longer held before it
// runs: a Loop cut short while it runs takes it for the call in flight
// and does not make it again.
func TestLoopGateApprovedCallIsInFlightOnceUnheld(t *testing.T) {
	t.Parallel()
	s := newSideEffects(t)
	j := &journalOf{}
	g := &gate{next: tools.Decision{Wait: true}}
	p := &scripted{replies: []model.Reply{calls(appendCall("a", "x"))}}
	if _, err := tools.Loop(t.Context(), p, s.reg, model.Request{Messages: prompt}, tools.Limits{}, tools.WithJournal(j), tools.WithGate(g)); !errors.Is(err, tools.ErrWaiting) {
		t.Fatalf("Loop = %v, want ErrWaiting", err)
	}
	held := j.states[len(j.states)-1]
	g.next = tools.Decision{}
	j.states = nil
	p.replies = []model.Reply{{Text: "done"}}
	if _, err := tools.Loop(t.Context(), p, s.reg, model.Request{Messages: prompt}, tools.Limits{}, tools.WithJournal(j), tools.WithGate(g), tools.From(held)); err != nil {
		t.Fatal(err)
	}
	// The first state saved after the decision: the call unheld, no result
	// yet. A Loop From it (a crash while append ran) must not run append.
	unheld := j.states[0]
	if unheld.Held != "" || len(unheld.Calls) != 0 {
		t.Fatalf("first save after approval: held %q, %d calls; want unheld, no result", unheld.Held, len(unheld.Calls))
	}
	p.replies = []model.Reply{{Text: "done"}}
	res, err := tools.Loop(t.Context(), p, s.reg, model.Request{Messages: prompt}, tools.Limits{}, tools.WithJournal(&journalOf{}), tools.WithGate(g), tools.From(unheld))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.append.Load(); n != 1 {
		t.Errorf("append ran %d times, want 1", n)
	}
	if got := res.Calls[0].Outcome; got != tools.OutcomeInterrupted {
		t.Errorf("outcome after a crash while it ran = %s, want interrupted", got)
	}
}

// journalOf keeps every State saved.
type journalOf struct{ states []tools.State }

func (j *journalOf) Save(_ context.Context, s tools.State) error {
	j.states = append(j.states, s)
	return nil
}
