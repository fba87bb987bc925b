package slackfake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/connectors/slack/slackfake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// do posts body to url and returns the status and the reply.
func do(t *testing.T, url, contentType, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// TestWire: the fake answers as Slack does.
func TestWire(t *testing.T) {
	t.Parallel()
	s := slackfake.New(t, slackfake.Options{MaxText: 10})
	post := s.BaseURL() + "/chat.postMessage"
	const js = "application/json; charset=utf-8"
	bearer := "Bearer " + slackfake.DefaultToken
	for _, tc := range []struct {
		name, url, ct, auth, body string
		status                    int
		want                      string // a part of the reply
	}{
		{"not authed", post, js, "", `{"channel":"C1","text":"hi"}`, 200, `{"error":"not_authed","ok":false}`},
		{"wrong token", post, js, "Bearer xoxb-other", `{"channel":"C1","text":"hi"}`, 200, `"invalid_auth"`},
		{"bad json", post, js, bearer, `{"channel":`, 200, `"invalid_json"`},
		{"no channel", post, js, bearer, `{"text":"hi"}`, 200, `"channel_not_found"`},
		{"no text", post, js, bearer, `{"channel":"C1","text":" "}`, 200, `"no_text"`},
		{"too long", post, js, bearer, `{"channel":"C1","text":"12345678901"}`, 200, `"msg_too_long"`},
		{"escapes count once", post, js, bearer, `{"channel":"C1","text":"&lt;&lt;&lt;&lt;&lt;&lt;&lt;&lt;&lt;&lt;"}`, 200, `"ok":true`},
		{"unknown method", s.BaseURL() + "/chat.update", js, bearer, `{}`, 200, `"unknown_method"`},
		{"ok", post, js, bearer, `{"channel":"#ops","text":"hi"}`, 200, `"ok":true`},
		{"no charset", post, "application/json", bearer, `{"channel":"C1","text":"hi"}`, 200, `"warning":"missing_charset"`},
		{"webhook ok", s.WebhookURL(), "application/json", "", `{"text":"hi"}`, 200, "ok"},
		{"webhook bad json", s.WebhookURL(), "application/json", "", `{"text":`, 400, "invalid_payload"},
		{"webhook no text", s.WebhookURL(), "application/json", "", `{"text":""}`, 400, "no_text"},
		{"webhook too long", s.WebhookURL(), "application/json", "", `{"text":"12345678901"}`, 400, "invalid_payload"},
		{"webhook wrong key", s.URL + "/services/" + slackfake.Team + "/" + slackfake.Bot + "/nope", "application/json", "", `{"text":"hi"}`, 403, "invalid_token"},
		{"webhook unknown", s.URL + "/services/T1/B1/x", "application/json", "", `{"text":"hi"}`, 404, "no_service"},
	} {
		status, body := do(t, tc.url, tc.ct, tc.auth, tc.body)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d with %s", tc.name, status, body, tc.status, tc.want)
		}
	}
	// The success body of chat.postMessage.
	status, body := do(t, post, js, bearer, `{"channel":"#ops","text":"a &amp; b"}`)
	var r struct {
		OK      bool   `json:"ok"`
		Channel string `json:"channel"`
		TS      string `json:"ts"`
		Message struct {
			Text, TS, Type string
		} `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || status != 200 {
		t.Fatalf("chat.postMessage = %d %s (%v)", status, body, err)
	}
	if !r.OK || !strings.HasPrefix(r.Channel, "C") || r.TS == "" || r.Message.TS != r.TS || r.Message.Text != "a &amp; b" || r.Message.Type != "message" {
		t.Errorf("chat.postMessage = %s, want ok, a channel id, ts and the message", body)
	}
	posts := s.Posts()
	if last := posts[len(posts)-1]; last.Text != "a & b" || last.Channel != "#ops" || last.ChannelID != r.Channel {
		t.Errorf("last post = %+v", last)
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in       string
		mrkdwn   bool
		want     string
		mentions []string
	}{
		{"plain", false, "plain", nil},
		{"a &amp; b &lt;c&gt; &foo;", false, "a & b <c> &foo;", nil},
		{"<!channel> <!here> <!everyone>", false, "@channel @here @everyone", []string{"channel", "here", "everyone"}},
		{"<@U123> <@U123|ann> <!subteam^S1> <!subteam^S1|@ops>", false, "@U123 ann @S1 @ops", []string{"U123", "U123", "S1", "S1"}},
		{"<#C1> <#C1|general> <https://x.example|site> <https://y.example>", false, "#C1 #general site https://y.example", nil},
		{"<https://x.example?a=1&amp;b=2|a &amp; b>", false, "a & b", nil},
		{"a < b", false, "a < b", nil},
		{"*b* _i_ ~s~ `c`", true, "b i s c", nil},
		{"*b* _i_ ~s~ `c`", false, "*b* _i_ ~s~ `c`", nil},
	} {
		got, mentions := slackfake.Render(tc.in, tc.mrkdwn)
		if got != tc.want || !reflect.DeepEqual(mentions, tc.mentions) {
			t.Errorf("Render(%q, %v) = %q, %q; want %q, %q", tc.in, tc.mrkdwn, got, mentions, tc.want, tc.mentions)
		}
	}
}
