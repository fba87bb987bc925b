package telegramfake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/telegram/telegramfake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// post sends body to path and returns the status and the decoded reply.
func post(t *testing.T, api *telegramfake.Server, path, body string) (int, map[string]any) {
	t.Helper()
	client := &http.Client{}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Post(api.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("reply %q: %v", raw, err)
		}
	} else {
		out = map[string]any{"page": string(raw)}
	}
	return resp.StatusCode, out
}

func send(t *testing.T, api *telegramfake.Server, body string) (int, map[string]any) {
	t.Helper()
	return post(t, api, "/bot"+api.Token+"/sendMessage", body)
}

// The replies are the Bot API's, field for field.
func TestReplies(t *testing.T) {
	t.Parallel()
	api := telegramfake.New(t)
	api.Block("42")
	api.Migrate("-4000000001", "-1004000000001")

	status, got := send(t, api, `{"chat_id":-1001234567890,"text":"hi","message_thread_id":7,"disable_notification":true}`)
	res, _ := got["result"].(map[string]any)
	chat, _ := res["chat"].(map[string]any)
	if status != 200 || got["ok"] != true || res["message_id"] != 1.0 || res["text"] != "hi" || res["message_thread_id"] != 7.0 ||
		chat["id"] != -1001234567890.0 || chat["type"] != "supergroup" || res["date"] == nil {
		t.Errorf("success = %d %v", status, got)
	}
	for _, tc := range []struct {
		name, path, body string
		status           int
		desc             string
		params           map[string]any
	}{
		{"wrong token", "/bot1:nope/sendMessage", `{"chat_id":1,"text":"x"}`, 401, "Unauthorized", nil},
		{"no token", "/sendMessage", `{}`, 404, "Not Found", nil},
		{"blocked", "", `{"chat_id":42,"text":"x"}`, 403, "Forbidden: bot was blocked by the user", nil},
		{"migrated", "", `{"chat_id":"-4000000001","text":"x"}`, 400, "Bad Request: group chat was upgraded to a supergroup chat",
			map[string]any{"migrate_to_chat_id": -1004000000001.0}},
		{"empty", "", `{"chat_id":1,"text":"  "}`, 400, "Bad Request: message text is empty", nil},
		{"no chat", "", `{"text":"x"}`, 400, "Bad Request: chat_id is empty", nil},
		{"too long", "", `{"chat_id":1,"text":"` + strings.Repeat("é", 4097) + `"}`, 400, "Bad Request: message is too long", nil},
		{"bad html", "", `{"chat_id":1,"text":"<x>","parse_mode":"HTML"}`, 400, `Bad Request: can't parse entities: Unsupported start tag "x" at byte offset 0`, nil},
	} {
		path := tc.path
		if path == "" {
			path = "/bot" + api.Token + "/sendMessage"
		}
		status, got := post(t, api, path, tc.body)
		if status != tc.status || got["ok"] != false || got["error_code"] != float64(tc.status) || got["description"] != tc.desc {
			t.Errorf("%s: %d %v, want %d %q", tc.name, status, got, tc.status, tc.desc)
		}
		if p, _ := got["parameters"].(map[string]any); tc.params != nil && (p == nil || p["migrate_to_chat_id"] != tc.params["migrate_to_chat_id"]) {
			t.Errorf("%s: parameters %v, want %v", tc.name, got["parameters"], tc.params)
		}
	}
	if got := api.Texts("-1001234567890"); len(got) != 1 || got[0] != "hi" {
		t.Errorf("Texts = %q, want hi", got)
	}
	msgs, _ := api.Messages(t.Context(), 0)
	if len(msgs) != 1 || msgs[0] != (connectortest.Message{Text: "hi", Urgency: "info", Destination: "-1001234567890/7"}) {
		t.Errorf("Messages = %+v", msgs)
	}
}

// Scripted failures hit the sends they are meant for and end as told.
func TestScripts(t *testing.T) {
	t.Parallel()
	api := telegramfake.New(t)
	const ok = `{"chat_id":1,"text":"x","parse_mode":"HTML"}`
	statuses := func(n int) []int {
		var out []int
		for range n {
			s, _ := send(t, api, ok)
			out = append(out, s)
		}
		return out
	}
	api.RateLimit(2, 1500*time.Millisecond)
	status, got := send(t, api, ok)
	if p, _ := got["parameters"].(map[string]any); status != 429 || got["description"] != "Too Many Requests: retry after 2" || p["retry_after"] != 2.0 {
		t.Errorf("rate limited: %d %v", status, got)
	}
	if got := statuses(2); got[0] != 429 || got[1] != 200 {
		t.Errorf("after RateLimit(2): %v, want 429 then 200", got)
	}

	api.Fail(connectortest.Unavailable)
	status, got = send(t, api, ok)
	if status != 502 || !strings.Contains(got["page"].(string), "<center>nginx") {
		t.Errorf("Fail(Unavailable): %d %v, want nginx's 502 page", status, got)
	}
	if got := statuses(2); got[0] != 502 || got[1] != 502 {
		t.Errorf("Fail(Unavailable) for ever: %v", got)
	}
	api.Recover()
	api.FailStatus(1, 500)
	if got := statuses(2); got[0] != 500 || got[1] != 200 {
		t.Errorf("FailStatus(1, 500): %v, want 500 then 200", got)
	}

	api.FailEntities(1)
	if s, _ := send(t, api, `{"chat_id":1,"text":"plain"}`); s != 200 {
		t.Errorf("FailEntities spares plain text: %d", s)
	}
	if got := statuses(2); got[0] != 400 || got[1] != 200 {
		t.Errorf("FailEntities(1): %v, want 400 then 200", got)
	}

	api.Inject(connectortest.Fault{Kind: connectortest.Unauthorized, After: 2})
	if got := statuses(4); got[0] != 200 || got[1] != 200 || got[2] != 401 || got[3] != 200 {
		t.Errorf("Inject(Unauthorized, After 2): %v, want 200 200 401 200", got)
	}
	reqs := api.Requests()
	if last := reqs[len(reqs)-1]; last.ParseMode != "HTML" || last.ChatID != "1" || last.Status != 200 || last.MessageID == 0 {
		t.Errorf("last request = %+v", last)
	}
}

func TestParseHTML(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want, err string }{
		{"a &lt;b&gt; &amp; &quot;c&quot; &#33;&#x21;", `a <b> & "c" !!`, ""},
		{"<b>bold</b> <a href=\"http://x\">l</a> & &nbsp;", "bold l & &nbsp;", ""},
		{"<b>x</i>", "", `Unmatched end tag at byte offset 4, expected "</b>", found "</i>"`},
		{"<b>x", "", `Can't find end tag corresponding to start tag "b"`},
		{"x</b>", "", "Unexpected end tag at byte offset 1"},
		{"1 < 2", "", "Unclosed start tag at byte offset 2"},
		{"<!channel>", "", `Unsupported start tag "!channel" at byte offset 0`},
	} {
		got, err := telegramfake.ParseHTML(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("ParseHTML(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// A bot's view of buttons: a keyboard is checked as the API checks it, a
// press arrives by getUpdates (a long poll wakes for it), an offset
// confirms it for good, a query is answered once, an edit that changes
// nothing is refused, and a webhook excludes getUpdates.
func TestButtonsAndUpdates(t *testing.T) {
	t.Parallel()
	api := telegramfake.New(t)
	long := strings.Repeat("x", telegramfake.MaxButtonData+1)
	status, got := send(t, api, `{"chat_id":-100123,"text":"q?","reply_markup":{"inline_keyboard":[[{"text":"Approve","callback_data":"`+long+`"}]]}}`)
	if status != 400 || got["description"] != telegramfake.DescButtonData {
		t.Errorf("65-byte callback_data = %d %v, want 400 %q", status, got, telegramfake.DescButtonData)
	}
	status, got = send(t, api, `{"chat_id":-100123,"text":"q?","reply_markup":{"inline_keyboard":[[{"text":"Approve","callback_data":"ap:a:1"},{"text":"Reject","callback_data":"ap:r:1"}]]}}`)
	res, _ := got["result"].(map[string]any)
	if status != 200 || res["reply_markup"] == nil {
		t.Fatalf("send with a keyboard = %d %v", status, got)
	}
	call := func(method, body string) (int, map[string]any) {
		return post(t, api, "/bot"+api.Token+"/"+method, body)
	}

	// A long poll waits, and wakes for the press.
	type reply struct {
		status int
		body   map[string]any
	}
	polled := make(chan reply, 1)
	go func() {
		s, b := call("getUpdates", `{"timeout":30,"allowed_updates":["callback_query"]}`)
		polled <- reply{s, b}
	}()
	if err := api.WaitPolls(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	qid, err := api.PressButton(telegramfake.User{ID: 42, FirstName: "Ana"}, "-100123", 1, "Reject")
	if err != nil {
		t.Fatal(err)
	}
	r := <-polled
	ups, _ := r.body["result"].([]any)
	if r.status != 200 || len(ups) != 1 {
		t.Fatalf("getUpdates = %d %v, want the press", r.status, r.body)
	}
	up := ups[0].(map[string]any)
	cq := up["callback_query"].(map[string]any)
	if cq["id"] != qid || cq["data"] != "ap:r:1" || cq["from"].(map[string]any)["id"] != 42.0 ||
		cq["message"].(map[string]any)["message_id"] != 1.0 {
		t.Errorf("callback_query = %v", cq)
	}
	// Not confirmed yet: returned again; then confirmed by the offset.
	if _, b := call("getUpdates", `{}`); len(b["result"].([]any)) != 1 {
		t.Errorf("unconfirmed update not returned again: %v", b)
	}
	next := int64(up["update_id"].(float64)) + 1
	if _, b := call("getUpdates", `{"offset":`+strconv.FormatInt(next, 10)+`}`); len(b["result"].([]any)) != 0 || api.Pending() != 0 {
		t.Errorf("confirmed update returned again: %v (pending %d)", b, api.Pending())
	}

	if s, b := call("answerCallbackQuery", `{"callback_query_id":"`+qid+`","text":"Rejected"}`); s != 200 || b["result"] != true {
		t.Errorf("answerCallbackQuery = %d %v", s, b)
	}
	if s, b := call("answerCallbackQuery", `{"callback_query_id":"`+qid+`"}`); s != 400 || b["description"] != telegramfake.DescQueryTooOld {
		t.Errorf("second answerCallbackQuery = %d %v, want 400 %q", s, b, telegramfake.DescQueryTooOld)
	}
	if a := api.Answers(); len(a) != 1 || a[0].Text != "Rejected" || a[0].From != 42 {
		t.Errorf("Answers = %+v", a)
	}

	if s, b := call("editMessageText", `{"chat_id":-100123,"message_id":1,"text":"q?\n\n❌ Rejected by Ana"}`); s != 200 {
		t.Errorf("editMessageText = %d %v", s, b)
	}
	if m, _ := api.Message("-100123", 1); m.Text != "q?\n\n❌ Rejected by Ana" || len(m.Buttons) != 0 || !m.Edited {
		t.Errorf("after the edit the message is %+v, want the new text without buttons", m)
	}
	if s, b := call("editMessageReplyMarkup", `{"chat_id":-100123,"message_id":1}`); s != 400 || b["description"] != telegramfake.DescNotModified {
		t.Errorf("an edit that changes nothing = %d %v, want 400 %q", s, b, telegramfake.DescNotModified)
	}
	if s, b := call("editMessageText", `{"chat_id":-100123,"message_id":9,"text":"x"}`); s != 400 || b["description"] != telegramfake.DescEditNotFound {
		t.Errorf("edit of an unknown message = %d %v", s, b)
	}

	api.SetWebhook("https://example.com/hook")
	if s, b := call("getUpdates", `{}`); s != 409 || b["description"] != telegramfake.DescWebhookActive {
		t.Errorf("getUpdates with a webhook = %d %v, want 409 %q", s, b, telegramfake.DescWebhookActive)
	}
}
