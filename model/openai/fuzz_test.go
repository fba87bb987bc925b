package openai

import (
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeReply: any body gives a Reply or an error, never a panic, and a
// Reply's tool calls always have ids.
func FuzzDecodeReply(f *testing.F) {
	for _, seed := range []string{
		`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`,
		`{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"notify_user","arguments":"{\"text\":\"hi\"}"}}]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"message":{"content":null,"tool_calls":[{"function":{"name":"f","arguments":{"a":[1,{"b":null}]}}}]},"finish_reason":"stop"}]}`,
		`{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"refusal"}]}}]}`,
		`{"choices":[{"message":{"function_call":{"name":"f","arguments":"{}"}}}]}`,
		`{"choices":[{"message":{"content":null,"refusal":"no"}}]}`,
		`{"error":{"message":"x","code":429}}`,
		`{"choices":[]}`,
		`{"choices":[{}]}`,
		`{"choices":[{"message":{"content":12}}]}`,
		`{"choices":[{"message":{"tool_calls":[{"function":{"arguments":"\u0000"}}]}}]}`,
		`null`, `[]`, `"x"`, ``, `{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		reply, err := decodeReply(body)
		if err != nil {
			var se *serverError
			if !errors.Is(err, errMalformed) && !errors.Is(err, errNoChoices) && !errors.As(err, &se) {
				t.Fatalf("decodeReply() error = %v, want errMalformed, errNoChoices or *serverError", err)
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
