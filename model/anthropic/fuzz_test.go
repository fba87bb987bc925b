package anthropic

import (
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeReply: any body gives a Reply or an error, never a panic, and a
// Reply's tool calls always have ids.
func FuzzDecodeReply(f *testing.F) {
	for _, seed := range []string{
		`{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":1}}`,
		`{"type":"message","content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_1","name":"notify_user","input":{"text":"hi"}}],"stop_reason":"tool_use"}`,
		`{"type":"message","content":[{"type":"tool_use","name":"f","input":"{\"a\":1}"},{"type":"tool_use","name":"g"}]}`,
		`{"type":"message","content":[{"type":"thinking","thinking":"x"},{"type":"redacted_thinking","data":"y"}]}`,
		`{"type":"message","content":[],"usage":{"input_tokens":1,"cache_read_input_tokens":2}}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		`{"type":"message","content":null}`,
		`{"type":"message","content":"text"}`,
		`{"type":"message","content":[{"type":"tool_use","input":[1,2]}]}`,
		`null`, `[]`, `"x"`, ``, `{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		reply, err := decodeReply(body)
		if err != nil {
			var se *serverError
			if !errors.Is(err, errMalformed) && !errors.As(err, &se) {
				t.Fatalf("decodeReply() error = %v, want errMalformed or *serverError", err)
			}
			return
		}
		for i, tc := range reply.ToolCalls {
			if tc.ID == "" {
				t.Fatalf("ToolCalls[%d].ID is empty", i)
			}
		}
		if utf8.ValidString(string(body)) && !utf8.ValidString(reply.Text) {
			t.Fatalf("Text %q is not valid UTF-8", reply.Text)
		}
	})
}
