package discordfake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/connectors/discord/discordfake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// do posts body to url and returns the status, header and reply.
func do(t *testing.T, url, contentType, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}

// TestWire: the fake answers as Discord does.
func TestWire(t *testing.T) {
	t.Parallel()
	s := discordfake.New(t, discordfake.Options{MaxText: 40})
	hook := s.WebhookURL() + "?wait=true"
	const js = "application/json"
	for _, tc := range []struct {
		name, url, ct, body string
		status              int
		want                string // a part of the reply
	}{
		{"unknown webhook", s.URL + "/api/webhooks/1/" + discordfake.DefaultToken, js, `{"content":"hi"}`, 404, `"code":10015`},
		{"wrong token", s.URL + "/api/webhooks/" + discordfake.WebhookID + "/nope", js, `{"content":"hi"}`, 401, `"message":"Invalid Webhook Token"`},
		{"no route", s.URL + "/api/channels/1", js, `{}`, 404, `"404: Not Found"`},
		{"bad json", hook, js, `{"content":`, 400, `"code":50109`},
		{"empty", hook, js, `{"content":" "}`, 400, `"code":50006`},
		{"too long", hook, js, `{"content":"` + strings.Repeat("x", 41) + `"}`, 400, `{"code":50035,"errors":{"content":{"_errors":[{"code":"BASE_TYPE_MAX_LENGTH","message":"Must be 40 or fewer in length."}]}},"message":"Invalid Form Body"}`},
		{"bad thread", s.WebhookURL() + "?thread_id=abc", js, `{"content":"hi"}`, 400, `"thread_id"`},
		{"bad flags", hook, js, `{"content":"hi","flags":64}`, 400, `"flags"`},
		{"exclusive mentions", hook, js, `{"content":"hi","allowed_mentions":{"parse":["users"],"users":["1"]}}`, 400, "mutually exclusive"},
		{"no wait", s.WebhookURL(), js, `{"content":"hi"}`, 204, ""},
		{"ok", hook, js, `{"content":"hi"}`, 200, `"content":"hi"`},
		{"v10 route", s.URL + "/api/v10/webhooks/" + discordfake.WebhookID + "/" + discordfake.DefaultToken + "?wait=1", js, `{"content":"hi"}`, 200, `"webhook_id":"223704706495545344"`},
	} {
		status, _, body := do(t, tc.url, tc.ct, tc.body)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d with %s", tc.name, status, body, tc.status, tc.want)
		}
	}
	status, _, body := do(t, hook+"&thread_id=77", js, `{"content":"<@1> <@&2> @everyone","allowed_mentions":{"parse":["everyone"],"roles":["2"]}}`)
	var m struct {
		ID              string   `json:"id"`
		ChannelID       string   `json:"channel_id"`
		Content         string   `json:"content"`
		MentionRoles    []string `json:"mention_roles"`
		MentionEveryone bool     `json:"mention_everyone"`
		Mentions        []any    `json:"mentions"`
	}
	if err := json.Unmarshal([]byte(body), &m); err != nil || status != 200 {
		t.Fatalf("execute = %d %s (%v)", status, body, err)
	}
	if m.ID == "" || m.ChannelID != "77" || !reflect.DeepEqual(m.MentionRoles, []string{"2"}) || !m.MentionEveryone || len(m.Mentions) != 0 {
		t.Errorf("message = %s, want an id, channel 77, role 2 and everyone mentioned, user 1 not", body)
	}
	posts := s.Posts()
	if last := posts[len(posts)-1]; last.ID != m.ID || !reflect.DeepEqual(last.Mentions, []string{"&2", "everyone"}) {
		t.Errorf("last post = %+v", last)
	}
}

// TestBucket: the rate-limit headers, and a real 429 over the limit.
func TestBucket(t *testing.T) {
	t.Parallel()
	s := discordfake.New(t, discordfake.Options{Bucket: 1, Window: time.Minute})
	hook := s.WebhookURL() + "?wait=true"
	status, h, _ := do(t, hook, "application/json", `{"content":"one"}`)
	if status != 200 || h.Get("X-RateLimit-Limit") != "1" || h.Get("X-RateLimit-Remaining") != "0" || h.Get("X-RateLimit-Reset-After") == "" {
		t.Errorf("first post: %d %v, want 200 with an empty bucket's headers", status, h)
	}
	status, h, body := do(t, hook, "application/json", `{"content":"two"}`)
	var rl struct {
		Message    string  `json:"message"`
		RetryAfter float64 `json:"retry_after"`
		Global     *bool   `json:"global"`
	}
	_ = json.Unmarshal([]byte(body), &rl)
	if status != 429 || rl.Message != "You are being rate limited." || rl.RetryAfter <= 0 || rl.Global == nil || *rl.Global || h.Get("Retry-After") == "" {
		t.Errorf("second post: %d %s %v, want Discord's 429", status, body, h)
	}
	if s.RateLimited() != 1 || len(s.Posts()) != 1 {
		t.Errorf("RateLimited() = %d, posts %d; want 1, 1", s.RateLimited(), len(s.Posts()))
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		mentions []string
	}{
		{"plain", "plain", nil},
		{`\*a\* \\ \< \: x\y`, `*a* \ < : x\y`, nil},
		{"**bold** __u__ ~~s~~ `c` ||sp||", "bold u s c sp", nil},
		{"# h\n## h2\n> q\n>>> qq\n- l\n* l2\n-# small", "h\nh2\nq\nqq\nl\nl2\nsmall", nil},
		{"[label](https://x.example) https://y.example/a_b*c", "label https://y.example/a_b*c", nil},
		{"<@1> <@!2> <@&3> <#4> <t:5:R> <:e:6> @everyone @here", "@1 @2 @&3 #4 [time 5] :e: @everyone @here", []string{"1", "2", "&3", "everyone", "everyone"}},
		{"a < b", "a < b", nil},
	} {
		got, mentions := discordfake.Render(tc.in)
		if got != tc.want || !reflect.DeepEqual(mentions, tc.mentions) {
			t.Errorf("Render(%q) = %q, %q; want %q, %q", tc.in, got, mentions, tc.want, tc.mentions)
		}
	}
}
