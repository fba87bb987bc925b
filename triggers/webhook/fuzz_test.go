package webhook_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers/webhook"
)

// FuzzTaskBody: ParseTask never panics, explains every refusal, and what it
// accepts is a valid request whose re-encoding parses to the same task.
func FuzzTaskBody(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"x"}`,
		`{"prompt":"summarise","name":"daily","source":"ops","targets":["slack","telegram"],"deliver":"notify","metadata":{"a":"b"}}`,
		`{"prompt":" "}`, `{"prompt":null}`, `{"prompt":"x","targets":null}`, `{"prompt":"x","metadata":{"":"v"}}`,
		`{"prompt":"x"} {}`, `[]`, `null`, `"x"`, `{"prompt":"\u0000"}`, `{"prompt":"x","prompt":"y"}`,
		`{"prompt":"x","name":"A"}`, `{"prompt":"x","targets":["a","a"]}`, `{"prompt":"\xff"}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		task, errs := webhook.ParseTask(body, nil)
		if len(errs) > 0 {
			for _, e := range errs {
				if e.Detail == "" {
					t.Fatalf("ParseTask(%q): error for field %q without detail", body, e.Field)
				}
			}
			return
		}
		if strings.TrimSpace(task.Prompt) == "" {
			t.Fatalf("ParseTask(%q) accepted a blank prompt", body)
		}
		if !bus.ValidToken(task.Source) || !bus.ValidToken(task.Name) {
			t.Fatalf("ParseTask(%q) accepted source %q name %q", body, task.Source, task.Name)
		}
		req := task.Request()
		if err := req.Validate(); err != nil {
			t.Fatalf("ParseTask(%q) accepted a task whose request is invalid: %v", body, err)
		}
		again, _ := json.Marshal(task)
		task2, errs2 := webhook.ParseTask(again, nil)
		if len(errs2) > 0 || task2.Hash() != task.Hash() {
			t.Fatalf("re-parse of %s = %+v, %v; want the same task", again, task2, errs2)
		}
	})
}
