package discord_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/discord"
	"github.com/agentwork/agentwork/connectors/discord/discordfake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newConnector(t *testing.T, dc *discordfake.Server, mod ...func(*discord.Config)) *discord.Connector {
	t.Helper()
	c := discord.Config{WebhookURL: dc.WebhookURL()}
	for _, m := range mod {
		m(&c)
	}
	conn, err := discord.New(c, discord.Options{Client: connectortest.HTTPClient(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return conn
}

const thread = "1234567890123456789"

func TestConformance(t *testing.T) {
	t.Parallel()
	connectortest.Run(t, connectortest.Harness{
		New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
			dc := discordfake.New(t)
			return newConnector(t, dc), dc
		},
		Secret: discordfake.DefaultToken,
		Features: connectortest.Features{
			Concurrent: true, MaxText: discord.MaxText, Length: discord.Length,
			MessageIDs: true, Destination: thread,
			Outages: true, RateLimits: true, AuthErrors: true, BadRequests: true, Stalls: true,
		},
	})
}

func send(t *testing.T, conn *discord.Connector, text, urgency string) (connectors.Receipt, error) {
	t.Helper()
	n := connectortest.Notification(text)
	n.Urgency = urgency
	return conn.Send(t.Context(), n)
}

// TestErrors: Discord's answers and what Send makes of them.
func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		opts   discordfake.Options
		script func(*discordfake.Server)
		class  connectortest.Class
		says   string
	}{
		{"429 rounds retry_after up", discordfake.Options{}, func(s *discordfake.Server) { s.RateLimit(1, 1500*time.Millisecond) }, connectortest.Retry(2 * time.Second), "global false, scope user"},
		{"global 429", discordfake.Options{}, func(s *discordfake.Server) { s.RateLimitGlobal(1, 3*time.Second) }, connectortest.Retry(3 * time.Second), "global true, scope global"},
		{"429 in milliseconds", discordfake.Options{}, func(s *discordfake.Server) {
			s.Answer(1, 429, http.Header{"Retry-After": {"2"}}, `{"message":"You are being rate limited.","retry_after":1500,"global":false}`)
		}, connectortest.Retry(2 * time.Second), "rate limited"},
		{"429 without a body", discordfake.Options{}, func(s *discordfake.Server) {
			s.Answer(1, 429, http.Header{"Retry-After": {"4"}, "Content-Type": {"text/html"}}, `<html>error 1015</html>`)
		}, connectortest.Retry(4 * time.Second), "rate limited"},
		{"500", discordfake.Options{}, func(s *discordfake.Server) { s.FailNext(1, connectortest.Unavailable) }, connectortest.Retry(0), "500"},
		{"502 from the edge", discordfake.Options{}, func(s *discordfake.Server) {
			s.Answer(1, 502, http.Header{"Content-Type": {"text/html"}}, "<html>502 Bad Gateway</html>")
		}, connectortest.Retry(0), "502"},
		{"401", discordfake.Options{}, func(s *discordfake.Server) { s.FailNext(1, connectortest.Unauthorized) }, connectortest.Permanent, "check webhook_url"},
		{"token reset", discordfake.Options{}, func(s *discordfake.Server) { s.SetToken("another-token") }, connectortest.Permanent, "Invalid Webhook Token"},
		{"webhook deleted", discordfake.Options{}, func(s *discordfake.Server) { s.Delete() }, connectortest.Permanent, "Unknown Webhook"},
		{"unknown thread", discordfake.Options{}, func(s *discordfake.Server) {
			s.Answer(1, 404, nil, `{"message": "Unknown Channel", "code": 10003}`)
		}, connectortest.Permanent, "check thread_id"},
		{"missing permissions", discordfake.Options{}, func(s *discordfake.Server) {
			s.Answer(1, 403, nil, `{"message": "Missing Permissions", "code": 50013}`)
		}, connectortest.Permanent, "permissions"},
		{"invalid form body", discordfake.Options{}, func(s *discordfake.Server) { s.FailNext(1, connectortest.BadRequest) }, connectortest.Permanent, "content: Must be 2000 or fewer in length."},
		{"forum without a thread", discordfake.Options{Forum: true}, nil, connectortest.Permanent, "set thread_id"},
		{"automod", discordfake.Options{}, func(s *discordfake.Server) {
			s.Answer(1, 400, nil, `{"message": "Message was blocked by automatic moderation", "code": 200000}`)
		}, connectortest.Permanent, "moderation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dc := discordfake.New(t, tc.opts)
			conn := newConnector(t, dc)
			if tc.script != nil {
				tc.script(dc)
			}
			_, err := send(t, conn, "hello", "info")
			connectortest.CheckClass(t, tc.name, err, tc.class)
			if err != nil && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%s: Send = %q, want %q in it", tc.name, err, tc.says)
			}
			if got := dc.Requests(); got != 1 {
				t.Errorf("%s: the fake got %d requests, want 1 (no retry inside Send)", tc.name, got)
			}
		})
	}
}

// TestScripts: the fake's scripts for end-to-end tests.
func TestScripts(t *testing.T) {
	t.Parallel()
	dc := discordfake.New(t)
	conn := newConnector(t, dc)
	dc.Fail(connectortest.Unavailable)
	for range 3 {
		_, err := send(t, conn, "down", "info")
		connectortest.CheckClass(t, "Fail(Unavailable)", err, connectortest.Retry(0))
	}
	dc.Recover()
	if _, err := send(t, conn, "up", "info"); err != nil {
		t.Fatalf("Send after Recover = %v", err)
	}
	dc.RateLimit(2, time.Second)
	for range 2 {
		_, err := send(t, conn, "limited", "info")
		connectortest.CheckClass(t, "RateLimit", err, connectortest.Retry(time.Second))
	}
	if _, err := send(t, conn, "after the limit", "info"); err != nil {
		t.Fatalf("Send after RateLimit(2) = %v", err)
	}
	if got := len(dc.Posts()); got != 2 {
		t.Errorf("the fake holds %d posts, want 2", got)
	}
}

// TestWire: the request and what Send makes of the answer.
func TestWire(t *testing.T) {
	t.Parallel()
	dc := discordfake.New(t)
	conn := newConnector(t, dc, func(c *discord.Config) { c.Username = "agentwork" })
	rec, err := send(t, conn, "hello", "info")
	if err != nil {
		t.Fatal(err)
	}
	p := dc.Posts()[0]
	if ua := p.Header.Get("User-Agent"); !strings.HasPrefix(ua, "DiscordBot (") {
		t.Errorf("User-Agent = %q, want DiscordBot (url, version)", ua)
	}
	if p.Header.Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type = %q", p.Header.Get("Content-Type"))
	}
	if got := string(p.AllowedMentions); got != `{"parse":[]}` {
		t.Errorf("allowed_mentions = %s, want {\"parse\":[]}", got)
	}
	if p.Username != "agentwork" || p.ThreadID != "" || p.Flags != discord.FlagSuppressNotifications {
		t.Errorf("post = %+v, want username agentwork, no thread, flags SUPPRESS_NOTIFICATIONS", p)
	}
	if len(rec.MessageIDs) != 1 || rec.MessageIDs[0] != p.ID || rec.Parts != 1 {
		t.Errorf("Receipt = %+v, want the message id %s", rec, p.ID)
	}
}

// TestUrgency: info is silent unless notify_info; important starts with
// the mark and mentions (and notifies) only the configured role or user.
func TestUrgency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mention    string
		notifyInfo bool
		urgency    string
		content    string
		silent     bool
		notified   string
		allowed    string
	}{
		{"", false, "info", "disk full", true, "", `{"parse":[]}`},
		{"", true, "info", "disk full", false, "", `{"parse":[]}`},
		{"", false, "", "disk full", true, "", `{"parse":[]}`},
		{"", false, "important", discord.ImportantMark + "disk full", false, "", `{"parse":[]}`},
		{"<@&111>", false, "important", "<@&111> " + discord.ImportantMark + "disk full", false, "&111", `{"parse":[],"roles":["111"]}`},
		{"<@222>", false, "important", "<@222> " + discord.ImportantMark + "disk full", false, "222", `{"parse":[],"users":["222"]}`},
		{"<@!222>", false, "important", "<@!222> " + discord.ImportantMark + "disk full", false, "222", `{"parse":[],"users":["222"]}`},
		{"<@&111>", false, "info", "disk full", true, "", `{"parse":[]}`},
	} {
		t.Run(tc.mention+"/"+tc.urgency, func(t *testing.T) {
			t.Parallel()
			dc := discordfake.New(t)
			conn := newConnector(t, dc, func(c *discord.Config) { c.MentionOnImportant, c.NotifyInfo = tc.mention, tc.notifyInfo })
			if _, err := send(t, conn, "disk full", tc.urgency); err != nil {
				t.Fatal(err)
			}
			p := dc.Posts()[0]
			want := tc.urgency
			if want == "" {
				want = "info"
			}
			if p.Content != tc.content || p.Silent != tc.silent || p.Urgency != want || p.Text != "disk full" {
				t.Errorf("post %q silent %v, read as %s %q; want %q silent %v, %s", p.Content, p.Silent, p.Urgency, p.Text, tc.content, tc.silent, want)
			}
			if got := strings.Join(p.Mentions, ","); got != tc.notified {
				t.Errorf("notified %q, want %q", got, tc.notified)
			}
			if string(p.AllowedMentions) != tc.allowed {
				t.Errorf("allowed_mentions = %s, want %s", p.AllowedMentions, tc.allowed)
			}
		})
	}
}

// TestEscaping: the model's text shows as written: no formatting, no
// mention, no masked link; URLs stay links.
func TestEscaping(t *testing.T) {
	t.Parallel()
	dc := discordfake.New(t)
	conn := newConnector(t, dc, func(c *discord.Config) { c.MentionOnImportant = "<@&111>" })
	text := "# Title\n> quote\n- item\n**bold** __u__ ~~s~~ `c` ||spoiler|| <@111> <@&111> @everyone @here [your bank](https://evil.example) C:\\path https://ex.example/a_b-c*d"
	if _, err := send(t, conn, text, "important"); err != nil {
		t.Fatal(err)
	}
	p := dc.Posts()[0]
	if p.Text != text {
		t.Errorf("reader sees %q, want %q", p.Text, text)
	}
	if strings.Join(p.Mentions, ",") != "&111" {
		t.Errorf("notified %q, want only the configured role &111", p.Mentions)
	}
	for _, s := range []string{`\# Title`, `\> quote`, `\- item`, `\*\*bold\*\*`, `\_\_u\_\_`, `\~\~s\~\~`, "\\`c\\`", `\|\|spoiler\|\|`, `\<@111\>`, `\[your bank\](https://evil.example)`, `C:\\path`, " https://ex.example/a_b-c*d"} {
		if !strings.Contains(p.Content, s) {
			t.Errorf("content %q lacks %q", p.Content, s)
		}
	}
}

// TestSplit: the limit counts the escapes and the prefix.
func TestSplit(t *testing.T) {
	t.Parallel()
	dc := discordfake.New(t)
	conn := newConnector(t, dc, func(c *discord.Config) { c.MentionOnImportant = "<@&111>" })
	text := strings.Repeat("a-b_c *d* ", 600) + "end."
	rec, err := send(t, conn, text, "important")
	if err != nil {
		t.Fatal(err)
	}
	posts := dc.Posts()
	if len(posts) < 4 || rec.Parts != len(posts) || len(rec.MessageIDs) != len(posts) {
		t.Fatalf("%d posts, receipt %+v; want 4 or more, an id each", len(posts), rec)
	}
	var parts []string
	for i, p := range posts {
		if n := utf8.RuneCountInString(p.Content); n > discord.MaxText {
			t.Errorf("part %d has %d characters, want at most %d", i, n, discord.MaxText)
		}
		if (i == 0) != (p.Urgency == "important") || (i == 0) != (len(p.Mentions) == 1) {
			t.Errorf("part %d: %s, mentions %q; want the mark and mention on the first part only", i, p.Urgency, p.Mentions)
		}
		parts = append(parts, p.Text)
	}
	if strings.Join(strings.Fields(strings.Join(parts, " ")), " ") != strings.Join(strings.Fields(text), " ") {
		t.Error("the parts do not hold the text")
	}
}

func TestTruncated(t *testing.T) {
	t.Parallel()
	dc := discordfake.New(t)
	conn := newConnector(t, dc)
	n := connectortest.Notification("Sales fell because the")
	n.Truncated = true
	if _, err := conn.Send(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if got, want := dc.Posts()[0].Text, "Sales fell because the"+discord.TruncatedMark; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
}

// TestThreads: thread_id from the config or the target; a forum needs one.
func TestThreads(t *testing.T) {
	t.Parallel()
	dc := discordfake.New(t, discordfake.Options{Forum: true})
	conn := newConnector(t, dc, func(c *discord.Config) { c.ThreadID = "42" })
	n := connectortest.Notification("to the configured thread")
	if _, err := conn.Send(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	n.Target = "dc:" + thread
	if _, err := conn.Send(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	posts := dc.Posts()
	if posts[0].ThreadID != "42" || posts[1].ThreadID != thread {
		t.Errorf("threads %q, %q; want 42, %s", posts[0].ThreadID, posts[1].ThreadID, thread)
	}
	n.Target = "dc:general"
	_, err := conn.Send(t.Context(), n)
	connectortest.CheckClass(t, "a thread that is no id", err, connectortest.Permanent)
	if got := dc.Requests(); got != 2 {
		t.Errorf("the fake got %d requests, want 2", got)
	}
}

// TestBucket: an empty rate-limit bucket is waited for, not hit.
func TestBucket(t *testing.T) {
	t.Parallel()
	const window = 300 * time.Millisecond
	dc := discordfake.New(t, discordfake.Options{Bucket: 2, Window: window})
	conn := newConnector(t, dc)
	start := time.Now()
	for i := range 5 {
		if _, err := send(t, conn, "message", "info"); err != nil {
			t.Fatalf("Send %d = %v", i, err)
		}
	}
	if got := dc.RateLimited(); got != 0 {
		t.Errorf("the bucket answered %d requests with 429, want 0", got)
	}
	if d := time.Since(start); d < 2*window-50*time.Millisecond {
		t.Errorf("5 posts at 2 per %s took %s, want at least two windows", window, d)
	}

	// A wait beyond ctx's deadline is not waited: Send returns a retry.
	dc2 := discordfake.New(t, discordfake.Options{Bucket: 1, Window: 3 * time.Second})
	conn2 := newConnector(t, dc2)
	if _, err := send(t, conn2, "first", "info"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := conn2.Send(ctx, connectortest.Notification("second"))
	if d := connectors.RetryAfter(err); d < 2*time.Second || d > 3*time.Second || connectors.IsPermanent(err) {
		t.Errorf("Send on an empty bucket with 200ms left = %v, want a retry after about 3s", err)
	}
	if got := dc2.Requests(); got != 1 {
		t.Errorf("the fake got %d requests, want 1 (the second is not sent)", got)
	}
}

// TestSecrets: no error shows the webhook's token.
func TestSecrets(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	const token = "SECRET-webhook-token_123"
	unreachable, err := discord.New(discord.Config{WebhookURL: closed.URL + "/api/webhooks/1/" + token}, discord.Options{Client: connectortest.HTTPClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = send(t, unreachable, "hello", "info")
	if err == nil || strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "webhooks/1/") {
		t.Errorf("Send to a closed port = %v, want an error without the token", err)
	}
	dc := discordfake.New(t)
	conn := newConnector(t, dc)
	dc.Answer(1, 400, nil, `{"message": "bad token `+discordfake.DefaultToken+`", "code": 50035, "errors": {"content": {"_errors": [{"code": "X", "message": "`+discordfake.DefaultToken+`"}]}}}`)
	_, err = send(t, conn, "hello", "info")
	if err == nil || strings.Contains(err.Error(), discordfake.DefaultToken) {
		t.Errorf("Send answered with the token = %v, want it redacted", err)
	}
}

// TestRedirect: a redirect is an error, not followed.
func TestRedirect(t *testing.T) {
	t.Parallel()
	got := make(chan struct{}, 1)
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got <- struct{}{} }))
	defer other.Close()
	redirect := httptest.NewServer(http.RedirectHandler(other.URL, http.StatusPermanentRedirect))
	defer redirect.Close()
	conn, err := discord.New(discord.Config{WebhookURL: redirect.URL + "/api/webhooks/1/tok"}, discord.Options{Client: connectortest.HTTPClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = send(t, conn, "hello", "info")
	connectortest.CheckClass(t, "redirect", err, connectortest.Permanent)
	select {
	case <-got:
		t.Error("the redirect was followed")
	default:
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	const hook = "https://discord.com/api/webhooks/223704706495545344/SECRETtok-en_1"
	for _, tc := range []struct {
		name string
		c    discord.Config
		want string // "" for valid, else a part of the error
	}{
		{"minimal", discord.Config{WebhookURL: hook}, ""},
		{"versioned", discord.Config{WebhookURL: "https://discord.com/api/v10/webhooks/1/SECRETtok"}, ""},
		{"everything", discord.Config{WebhookURL: hook, Username: "Agent Work", ThreadID: "42", MentionOnImportant: "<@&123>", NotifyInfo: true}, ""},
		{"user mention", discord.Config{WebhookURL: hook, MentionOnImportant: "<@123>"}, ""},
		{"none", discord.Config{}, "webhook_url: required"},
		{"not a URL", discord.Config{WebhookURL: "discord.com/api/webhooks/1/SECRETtok"}, "webhook_url: not an http(s) URL"},
		{"not a webhook", discord.Config{WebhookURL: "https://discord.com/channels/1/SECRETtok"}, "does not end in /webhooks/{id}/{token}"},
		{"slack suffix", discord.Config{WebhookURL: hook + "/slack"}, "/slack"},
		{"thread", discord.Config{WebhookURL: hook, ThreadID: "abc"}, "thread_id:"},
		{"mention everyone", discord.Config{WebhookURL: hook, MentionOnImportant: "@everyone"}, "mention_on_important:"},
		{"mention bare id", discord.Config{WebhookURL: hook, MentionOnImportant: "123"}, "mention_on_important:"},
		{"username discord", discord.Config{WebhookURL: hook, Username: "My Discord Bot"}, "username:"},
		{"username long", discord.Config{WebhookURL: hook, Username: strings.Repeat("a", 81)}, "username:"},
		{"username colon", discord.Config{WebhookURL: hook, Username: "a:b"}, "username:"},
		{"username here", discord.Config{WebhookURL: hook, Username: "here"}, "username:"},
	} {
		connectortest.CheckError(t, tc.name+": Validate()", tc.c.Validate(), tc.want, "SECRET")
	}
	c := discord.Config{WebhookURL: hook}
	for dest, ok := range map[string]bool{thread: true, "42": true, "#general": false, "12a": false, strings.Repeat("1", 21): false} {
		if err := c.CheckDestination(dest); (err == nil) != ok {
			t.Errorf("CheckDestination(%q) = %v, want ok %v", dest, err, ok)
		}
	}
}

// TestType: an entry of agentwork.yaml becomes a working connector.
func TestType(t *testing.T) {
	t.Parallel()
	dc := discordfake.New(t)
	types := connectors.Types{discord.Type}
	src := "dc: {type: discord, webhook_url: '" + dc.WebhookURL() + "', mention_on_important: '<@&111>', notify_info: true}"
	cs := connectortest.Decode(t, types, src)
	if err := connectors.CheckDestination(cs["dc"], thread); err != nil {
		t.Errorf("CheckDestination = %v", err)
	}
	conn, err := types.Build("dc", cs["dc"], connectors.BuildDeps{})
	if err != nil {
		t.Fatalf("Build = %v", err)
	}
	defer conn.(*discord.Connector).CloseIdleConnections()
	if _, err := conn.Send(t.Context(), connectortest.Notification("from the config")); err != nil {
		t.Fatalf("Send = %v", err)
	}
	if p := dc.Posts()[0]; p.Silent {
		t.Errorf("notify_info: true sent a silent message")
	}
}

// urlBeforeAngle is a URL directly followed by <, which Escape cannot
// keep apart: Discord's links run up to the <, backslash included.
var urlBeforeAngle = regexp.MustCompile(`https?://[^\s<]*<`)

// FuzzEscape: escaped text reads back as written, and Length bounds it.
func FuzzEscape(f *testing.F) {
	for _, s := range connectortest.Texts() {
		f.Add(s)
	}
	f.Add(`\*not\* \\ \`)
	f.Add("- a\n# b\n> c\n-# d\n1. e")
	f.Add("[x](https://a.example/b_c) https://a.example/*x*")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || urlBeforeAngle.MatchString(s) {
			return
		}
		e := discord.Escape(s)
		if got, _ := discordfake.Render(e); got != s {
			t.Errorf("Render(Escape(%q)) = %q", s, got)
		}
		if n := utf8.RuneCountInString(e); n > discord.Length(s) {
			t.Errorf("Escape(%q) has %d characters, Length says %d", s, n, discord.Length(s))
		}
	})
}
