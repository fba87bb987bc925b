package script_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentwork/agentwork/model/modeltest"
	"github.com/agentwork/agentwork/model/script"
)

// TestConformance runs the provider suite against the script provider. What
// a script cannot be made to do is declared missing, and those cases skip:
//   - Usage: it counts words, it does not report scripted token counts;
//   - ToolCallIDs: it names its calls itself (call_notify, call_<i>);
//   - Requests: there is no backend that could show what it received;
//   - ToolResultErrors: nothing is sent anywhere;
//   - StatusErrors: an injected Fault carries the class it is given, it
//     does not classify an HTTP status (and so it has no message to check);
//   - RawBodies, Disconnect: there is no wire;
//   - Timeout: it has no model.timeout of its own (its Delay honours ctx,
//     which is Hang).
func TestConformance(t *testing.T) {
	t.Parallel()
	modeltest.Run(t, modeltest.Harness{
		Features: modeltest.Features{Hang: true},
		New: func(t *testing.T, s modeltest.Setup) modeltest.Backend {
			p, err := script.New(script.Config{Default: scriptReply(t, s.Turns)})
			if err != nil {
				t.Fatalf("script.New() error = %v", err)
			}
			return modeltest.Backend{Provider: p}
		},
	})
}

// scriptReply is the one reply that plays every turn. A script answers by
// rule, not by call number, so it can play a sequence only when every turn
// is the same.
func scriptReply(t *testing.T, turns []modeltest.Turn) *script.Reply {
	t.Helper()
	if len(turns) == 0 {
		return &script.Reply{}
	}
	for i, turn := range turns[1:] {
		if !reflect.DeepEqual(turn, turns[0]) {
			t.Fatalf("script harness: turn %d differs from turn 0; a script cannot play different turns in sequence (declare the case's feature missing)", i+1)
		}
	}
	turn := turns[0]
	switch {
	case turn.Hang:
		// Delay honours ctx: the call ends at the ctx deadline, as a hung
		// server's does.
		return &script.Reply{Delay: time.Hour}
	case turn.Fail != nil, turn.Body != "", turn.Disconnect:
		t.Fatal("script harness: a script has no wire; this case needs a feature the harness does not declare")
	}
	r := &script.Reply{Text: turn.Reply.Text}
	for _, tc := range turn.Reply.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, script.Call{Name: tc.Name, RawArguments: tc.Arguments})
	}
	return r
}
