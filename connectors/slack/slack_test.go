package slack_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/slack"
	"github.com/agentwork/agentwork/connectors/slack/slackfake"
)

// apiConfig is a bot_token connector's config for api, changed by mod.
func apiConfig(api *slackfake.Server, mod ...func(*slack.Config)) slack.Config {
	c := slack.Config{BotToken: api.Token(), Channel: "C0HOME0001", BaseURL: api.BaseURL()}
	for _, m := range mod {
		m(&c)
	}
	return c
}

// hookConfig is a webhook connector's config for api, changed by mod.
func hookConfig(api *slackfake.Server, mod ...func(*slack.Config)) slack.Config {
	c := slack.Config{WebhookURL: api.WebhookURL()}
	for _, m := range mod {
		m(&c)
	}
	return c
}

func newConnector(t *testing.T, c slack.Config) *slack.Connector {
	t.Helper()
	conn, err := slack.New(c, slack.Options{Client: connectortest.HTTPClient(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return conn
}

func TestConformance(t *testing.T) {
	t.Parallel()
	faults := connectortest.Features{
		Concurrent: true, MaxText: slack.MaxText,
		Outages: true, RateLimits: true, AuthErrors: true, BadRequests: true, Stalls: true,
	}
	t.Run("chat.postMessage", func(t *testing.T) {
		t.Parallel()
		f := faults
		f.MessageIDs, f.Destination = true, "#alerts"
		connectortest.Run(t, connectortest.Harness{
			New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
				api := slackfake.New(t)
				return newConnector(t, apiConfig(api)), api
			},
			Secret:   slackfake.DefaultToken,
			Features: f,
		})
	})
	t.Run("webhook", func(t *testing.T) {
		t.Parallel()
		connectortest.Run(t, connectortest.Harness{
			New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
				api := slackfake.New(t)
				return newConnector(t, hookConfig(api)), api
			},
			Secret:   slackfake.HookKey,
			Features: faults,
		})
	})
}

// send sends text with urgency through conn and returns the error.
func send(t *testing.T, conn *slack.Connector, text, urgency string) (connectors.Receipt, error) {
	t.Helper()
	n := connectortest.Notification(text)
	n.Urgency = urgency
	return conn.Send(t.Context(), n)
}

// TestAPIErrors: chat.postMessage answers HTTP 200 with ok false for most
// errors; each code is retried or not as Slack documents it.
func TestAPIErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code  string
		class connectortest.Class
		says  string
	}{
		{"ratelimited", connectortest.Retry(time.Second), "rate limited"},
		{"internal_error", connectortest.Retry(0), "retrying"},
		{"fatal_error", connectortest.Retry(0), "retrying"},
		{"service_unavailable", connectortest.Retry(0), "retrying"},
		{"request_timeout", connectortest.Retry(0), "retrying"},
		{"invalid_auth", connectortest.Permanent, "bot_token"},
		{"not_authed", connectortest.Permanent, "bot_token"},
		{"account_inactive", connectortest.Permanent, "bot_token"},
		{"token_revoked", connectortest.Permanent, "bot_token"},
		{"missing_scope", connectortest.Permanent, "chat:write"},
		{"channel_not_found", connectortest.Permanent, "check channel"},
		{"not_in_channel", connectortest.Permanent, "/invite"},
		{"is_archived", connectortest.Permanent, "archived"},
		{"msg_too_long", connectortest.Permanent, "too long"},
		{"no_text", connectortest.Permanent, "empty"},
		{"a_code_from_the_future", connectortest.Permanent, "rejected"},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			api := slackfake.New(t)
			conn := newConnector(t, apiConfig(api))
			api.ErrorNext(1, tc.code)
			_, err := send(t, conn, "hello", "info")
			connectortest.CheckClass(t, tc.code, err, tc.class)
			if err != nil && (!strings.Contains(err.Error(), tc.code) || !strings.Contains(err.Error(), tc.says)) {
				t.Errorf("Send answered %s = %q, want the code and %q in it", tc.code, err, tc.says)
			}
			if len(api.Posts()) != 0 {
				t.Errorf("the fake holds %d posts after %s, want 0", len(api.Posts()), tc.code)
			}
			// The next send goes through.
			if _, err := send(t, conn, "hello again", "info"); err != nil {
				t.Errorf("Send after the error = %v", err)
			}
		})
	}
}

// TestWebhookErrors: an incoming webhook answers with a status and a
// plain-text code.
func TestWebhookErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code  string
		class connectortest.Class
		says  string
	}{
		{"invalid_payload", connectortest.Permanent, "could not read"},
		{"action_prohibited", connectortest.Permanent, "restriction"},
		{"channel_not_found", connectortest.Permanent, "no longer exists"},
		{"channel_is_archived", connectortest.Permanent, "archived"},
		{"invalid_token", connectortest.Permanent, "check webhook_url"},
		{"no_service", connectortest.Permanent, "check webhook_url"},
		{"rollup_error", connectortest.Retry(0), "retrying"},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			api := slackfake.New(t)
			conn := newConnector(t, hookConfig(api))
			api.ErrorNext(1, tc.code)
			_, err := send(t, conn, "hello", "info")
			connectortest.CheckClass(t, tc.code, err, tc.class)
			if err != nil && (!strings.Contains(err.Error(), tc.code) || !strings.Contains(err.Error(), tc.says)) {
				t.Errorf("Send answered %s = %q, want the code and %q in it", tc.code, err, tc.says)
			}
		})
	}
	t.Run("429", func(t *testing.T) {
		t.Parallel()
		api := slackfake.New(t)
		conn := newConnector(t, hookConfig(api))
		api.RateLimit(2, 3*time.Second)
		for i := range 2 {
			_, err := send(t, conn, "hello", "info")
			connectortest.CheckClass(t, "429", err, connectortest.Retry(3*time.Second))
			if i == 0 && err != nil && !strings.Contains(err.Error(), "429") {
				t.Errorf("Send answered 429 = %q, want the status in it", err)
			}
		}
		if _, err := send(t, conn, "hello", "info"); err != nil {
			t.Errorf("Send after two 429 = %v, want nil", err)
		}
	})
}

// TestScripts: the fake's scripts for end-to-end tests fail for as long
// as they say.
func TestScripts(t *testing.T) {
	t.Parallel()
	api := slackfake.New(t)
	conn := newConnector(t, apiConfig(api))
	api.Fail(connectortest.Unavailable)
	for range 3 {
		_, err := send(t, conn, "down", "info")
		connectortest.CheckClass(t, "Fail(Unavailable)", err, connectortest.Retry(0))
	}
	api.Recover()
	if _, err := send(t, conn, "up", "info"); err != nil {
		t.Fatalf("Send after Recover = %v", err)
	}
	api.FailNext(1, connectortest.Unauthorized)
	_, err := send(t, conn, "bad token", "info")
	connectortest.CheckClass(t, "FailNext(Unauthorized)", err, connectortest.Permanent)
	api.SetToken("xoxb-another-token")
	_, err = send(t, conn, "revoked", "info")
	connectortest.CheckClass(t, "SetToken", err, connectortest.Permanent)
	if err != nil && !strings.Contains(err.Error(), "invalid_auth") {
		t.Errorf("Send with a token the server no longer takes = %v, want invalid_auth", err)
	}
	if got := len(api.Posts()); got != 1 {
		t.Errorf("the fake holds %d posts, want 1", got)
	}
}

// TestWire: what goes over the wire in each mode.
func TestWire(t *testing.T) {
	t.Parallel()
	t.Run("chat.postMessage", func(t *testing.T) {
		t.Parallel()
		api := slackfake.New(t)
		conn := newConnector(t, apiConfig(api))
		rec, err := send(t, conn, "hello", "info")
		if err != nil {
			t.Fatal(err)
		}
		p := api.Posts()[0]
		if p.Header.Get("Authorization") != "Bearer "+slackfake.DefaultToken {
			t.Errorf("Authorization = %q, want the bot token as Bearer", p.Header.Get("Authorization"))
		}
		if ct := p.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
			t.Errorf("Content-Type = %q, want JSON with the charset (else Slack warns missing_charset)", ct)
		}
		if p.Channel != "C0HOME0001" || p.Mrkdwn || p.Text != "hello" {
			t.Errorf("post = %+v, want channel C0HOME0001, mrkdwn false, text hello", p)
		}
		if len(rec.MessageIDs) != 1 || rec.MessageIDs[0] != p.TS {
			t.Errorf("Receipt.MessageIDs = %q, want the ts %q", rec.MessageIDs, p.TS)
		}
	})
	t.Run("webhook", func(t *testing.T) {
		t.Parallel()
		api := slackfake.New(t)
		conn := newConnector(t, hookConfig(api))
		rec, err := send(t, conn, "hello", "info")
		if err != nil {
			t.Fatal(err)
		}
		p := api.Posts()[0]
		if p.Header.Get("Authorization") != "" || p.Mrkdwn || p.Channel != "" {
			t.Errorf("webhook post = %+v, want no Authorization, mrkdwn false, no channel", p)
		}
		if rec.Parts != 1 || len(rec.MessageIDs) != 0 {
			t.Errorf("Receipt = %+v, want 1 part and no ids (a webhook gives none)", rec)
		}
	})
}

// TestEscaping: the model's text cannot mention, link or format.
func TestEscaping(t *testing.T) {
	t.Parallel()
	api := slackfake.New(t)
	conn := newConnector(t, apiConfig(api))
	text := "<!channel> <!here|here> <@U0123ABC> <!subteam^S0123> <https://evil.example|your bank> &lt; *bold* _it_ ~s~ `c`"
	if _, err := send(t, conn, text, "important"); err != nil {
		t.Fatal(err)
	}
	p := api.Posts()[0]
	if len(p.Mentions) != 0 {
		t.Errorf("the model's text notified %q, want nobody", p.Mentions)
	}
	if p.Text != text {
		t.Errorf("reader sees %q, want %q", p.Text, text)
	}
	wantRaw := slack.ImportantMark + "&lt;!channel&gt; &lt;!here|here&gt; &lt;@U0123ABC&gt; &lt;!subteam^S0123&gt; &lt;https://evil.example|your bank&gt; &amp;lt; *bold* _it_ ~s~ `c`"
	if p.Raw != wantRaw {
		t.Errorf("sent %q, want %q", p.Raw, wantRaw)
	}
	if got := slack.Escape("a & b < c > d"); got != "a &amp; b &lt; c &gt; d" {
		t.Errorf("Escape = %q", got)
	}
}

// TestUrgency: important starts with the mark, and with the configured
// mention; info never mentions.
func TestUrgency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mention, urgency string
		raw              string
		mentions         string
	}{
		{"", "important", slack.ImportantMark + "disk full", ""},
		{"", "info", "disk full", ""},
		{"channel", "important", "<!channel> " + slack.ImportantMark + "disk full", "channel"},
		{"channel", "info", "disk full", ""},
		{"here", "important", "<!here> " + slack.ImportantMark + "disk full", "here"},
		{"S0123ABC", "important", "<!subteam^S0123ABC> " + slack.ImportantMark + "disk full", "S0123ABC"},
		{"U0123ABC", "important", "<@U0123ABC> " + slack.ImportantMark + "disk full", "U0123ABC"},
		{"U0123ABC", "", "disk full", ""},
	} {
		t.Run(tc.mention+"/"+tc.urgency, func(t *testing.T) {
			t.Parallel()
			api := slackfake.New(t)
			conn := newConnector(t, hookConfig(api, func(c *slack.Config) { c.MentionOnImportant = tc.mention }))
			if _, err := send(t, conn, "disk full", tc.urgency); err != nil {
				t.Fatal(err)
			}
			p := api.Posts()[0]
			if p.Raw != tc.raw {
				t.Errorf("sent %q, want %q", p.Raw, tc.raw)
			}
			if got := strings.Join(p.Mentions, ","); got != tc.mentions {
				t.Errorf("notified %q, want %q", got, tc.mentions)
			}
			want := tc.urgency
			if want == "" {
				want = "info"
			}
			if p.Urgency != want || p.Text != "disk full" {
				t.Errorf("read back as %s %q, want %s %q", p.Urgency, p.Text, want, "disk full")
			}
		})
	}
}

// TestSplitImportant: the mention and mark count against the limit, and
// go on the first part only.
func TestSplitImportant(t *testing.T) {
	t.Parallel()
	api := slackfake.New(t)
	conn := newConnector(t, apiConfig(api, func(c *slack.Config) { c.MentionOnImportant = "channel" }))
	text := connectortest.SplitText(slack.MaxText, connectors.Runes)
	rec, err := send(t, conn, text, "important")
	if err != nil {
		t.Fatal(err)
	}
	posts := api.Posts()
	if len(posts) < 3 || rec.Parts != len(posts) || len(rec.MessageIDs) != len(posts) {
		t.Fatalf("%d posts, receipt %d parts %d ids; want 3 or more, one id each", len(posts), rec.Parts, len(rec.MessageIDs))
	}
	var parts []string
	for i, p := range posts {
		if n := utf8.RuneCountInString(p.Raw); n > slack.MaxText {
			t.Errorf("part %d has %d characters on the wire, want at most %d", i, n, slack.MaxText)
		}
		if wantMention := i == 0; (len(p.Mentions) == 1) != wantMention || (p.Urgency == "important") != wantMention {
			t.Errorf("part %d: mentions %q, urgency %s; want the mention and mark on the first part only", i, p.Mentions, p.Urgency)
		}
		parts = append(parts, p.Text)
	}
	if got := strings.Join(strings.Fields(strings.Join(parts, " ")), " "); got != strings.Join(strings.Fields(text), " ") {
		t.Errorf("the parts do not hold the text")
	}
}

func TestTruncated(t *testing.T) {
	t.Parallel()
	api := slackfake.New(t)
	conn := newConnector(t, apiConfig(api))
	n := connectortest.Notification("Sales fell because the")
	n.Truncated = true
	if _, err := conn.Send(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if got, want := api.Posts()[0].Text, "Sales fell because the"+slack.TruncatedMark; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
}

// TestDestination: a bot_token connector posts where the target says; a
// webhook refuses a destination.
func TestDestination(t *testing.T) {
	t.Parallel()
	api := slackfake.New(t)
	conn := newConnector(t, apiConfig(api))
	n := connectortest.Notification("to C0TEAM0001")
	n.Target = "team:C0TEAM0001"
	if _, err := conn.Send(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if p := api.Posts()[0]; p.Channel != "C0TEAM0001" || p.ChannelID != "C0TEAM0001" {
		t.Errorf("posted to %s (%s), want C0TEAM0001", p.Channel, p.ChannelID)
	}
	n.Target = "team:#Not-Valid"
	_, err := conn.Send(t.Context(), n)
	connectortest.CheckClass(t, "invalid destination", err, connectortest.Permanent)

	hook := newConnector(t, hookConfig(api))
	n.Target = "team:#alerts"
	_, err = hook.Send(t.Context(), n)
	connectortest.CheckClass(t, "webhook with a destination", err, connectortest.Permanent)
	if err != nil && !strings.Contains(err.Error(), "bot_token") {
		t.Errorf("webhook with a destination = %v, want it to say bot_token names channels", err)
	}
	if got := api.Requests(); got != 1 {
		t.Errorf("the fake got %d requests, want 1 (refused destinations are not sent)", got)
	}
}

// TestSecrets: no error shows the webhook URL's key or the token, even
// when the server echoes them or cannot be reached.
func TestSecrets(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	const token = "xoxb-111-222-SECRETtoken"
	const key = "HOOKsecretKEY0123456789"
	api := slackfake.New(t)
	for _, tc := range []struct {
		name   string
		c      slack.Config
		script func()
	}{
		{"webhook unreachable", slack.Config{WebhookURL: closed.URL + "/services/T1/B1/" + key}, nil},
		{"api unreachable", slack.Config{BotToken: token, Channel: "#ops", BaseURL: closed.URL + "/api"}, nil},
		{"api echoes token", apiConfig(api, func(c *slack.Config) { c.BotToken = token }), func() { api.SetToken(token); api.ErrorNext(1, "bad_"+token) }},
	} {
		if tc.script != nil {
			tc.script()
		}
		conn := newConnector(t, tc.c)
		_, err := send(t, conn, "hello", "info")
		if err == nil {
			t.Fatalf("%s: Send = nil, want an error", tc.name)
		}
		for _, s := range []string{token, key, "/services/T1/B1"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: Send = %q, shows %q", tc.name, err, s)
			}
		}
	}
}

// TestRedirect: a redirect is an error, and the token is not sent on.
func TestRedirect(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("Authorization") }))
	defer other.Close()
	redirect := httptest.NewServer(http.RedirectHandler(other.URL, http.StatusTemporaryRedirect))
	defer redirect.Close()
	conn := newConnector(t, slack.Config{BotToken: "xoxb-1-2-3", Channel: "#ops", BaseURL: redirect.URL})
	_, err := send(t, conn, "hello", "info")
	connectortest.CheckClass(t, "redirect", err, connectortest.Permanent)
	select {
	case a := <-got:
		t.Errorf("the redirect was followed (Authorization %q)", a)
	default:
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	const hook = "https://hooks.slack.com/services/T0/B0/SECRETKEY123"
	for _, tc := range []struct {
		name string
		c    slack.Config
		want string // "" for valid, else a part of the error
	}{
		{"webhook", slack.Config{WebhookURL: hook}, ""},
		{"webhook with default base_url", slack.Config{WebhookURL: hook, BaseURL: slack.DefaultBaseURL}, ""},
		{"bot token", slack.Config{BotToken: "xoxb-1-2-abc", Channel: "C0123"}, ""},
		{"bot token, #name", slack.Config{BotToken: "xoxb-1-2-abc", Channel: "#ops-alerts_2"}, ""},
		{"bot token, unicode name", slack.Config{BotToken: "xoxb-1-2-abc", Channel: "#größe"}, ""},
		{"mention channel", slack.Config{WebhookURL: hook, MentionOnImportant: "channel"}, ""},
		{"mention group", slack.Config{WebhookURL: hook, MentionOnImportant: "S0123ABC"}, ""},
		{"mention user", slack.Config{WebhookURL: hook, MentionOnImportant: "W0123ABC"}, ""},
		{"none", slack.Config{}, "webhook_url or bot_token: required"},
		{"both", slack.Config{WebhookURL: hook, BotToken: "xoxb-1"}, "set one, not both"},
		{"webhook not a URL", slack.Config{WebhookURL: "hooks.slack.com/SECRETKEY123"}, "webhook_url: not an http(s) URL"},
		{"webhook without path", slack.Config{WebhookURL: "https://hooks.slack.com/"}, "webhook_url: not an http(s) URL"},
		{"webhook with channel", slack.Config{WebhookURL: hook, Channel: "#ops"}, "channel: only with bot_token"},
		{"webhook with base_url", slack.Config{WebhookURL: hook, BaseURL: "http://127.0.0.1:1/api"}, "base_url: only with bot_token"},
		{"not a token", slack.Config{BotToken: "1234SECRET", Channel: "C0123"}, "bot_token: not a Slack token"},
		{"token with space", slack.Config{BotToken: "xoxb-1 2", Channel: "C0123"}, "bot_token: not a Slack token"},
		{"no channel", slack.Config{BotToken: "xoxb-1"}, "channel: required"},
		{"bare name", slack.Config{BotToken: "xoxb-1", Channel: "ops"}, `channel: "ops": want a channel id`},
		{"upper-case name", slack.Config{BotToken: "xoxb-1", Channel: "#Ops"}, "lowercase"},
		{"long name", slack.Config{BotToken: "xoxb-1", Channel: "#" + strings.Repeat("a", 81)}, "1-80"},
		{"bad base_url", slack.Config{BotToken: "xoxb-1", Channel: "C0123", BaseURL: "ftp://x"}, "base_url:"},
		{"bad mention", slack.Config{WebhookURL: hook, MentionOnImportant: "@everyone"}, "mention_on_important:"},
	} {
		connectortest.CheckError(t, tc.name+": Validate()", tc.c.Validate(), tc.want, "SECRET")
	}
}

func TestCheckDestination(t *testing.T) {
	t.Parallel()
	bot := slack.Config{BotToken: "xoxb-1", Channel: "C0123"}
	for dest, ok := range map[string]bool{"#alerts": true, "C0TEAM": true, "G0PRIV": true, "alerts": false, "#A": false, "U0123": false} {
		if err := bot.CheckDestination(dest); (err == nil) != ok {
			t.Errorf("CheckDestination(%q) = %v, want ok %v", dest, err, ok)
		}
	}
	hook := slack.Config{WebhookURL: "https://hooks.slack.com/services/T/B/K"}
	if err := hook.CheckDestination("#alerts"); err == nil || !strings.Contains(err.Error(), "webhook") {
		t.Errorf("webhook CheckDestination = %v, want an error naming the webhook", err)
	}
}

// TestType: an entry of agentwork.yaml becomes a working connector.
func TestType(t *testing.T) {
	t.Parallel()
	api := slackfake.New(t)
	types := connectors.Types{slack.Type}
	src := "team: {type: slack, bot_token: " + api.Token() + ", channel: '#ops', base_url: " + api.BaseURL() + ", mention_on_important: here}"
	cs := connectortest.Decode(t, types, src)
	if err := connectors.CheckDestination(cs["team"], "#alerts"); err != nil {
		t.Errorf("CheckDestination(#alerts) = %v", err)
	}
	conn, err := types.Build("team", cs["team"], connectors.BuildDeps{})
	if err != nil {
		t.Fatalf("Build = %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), connectortest.Wait)
	defer cancel()
	n := connectortest.Notification("from the config")
	n.Urgency = "important"
	if _, err := conn.Send(ctx, n); err != nil {
		t.Fatalf("Send = %v", err)
	}
	if p := api.Posts()[0]; p.Channel != "#ops" || strings.Join(p.Mentions, ",") != "here" {
		t.Errorf("post = %+v, want #ops mentioning here", p)
	}
	if got := slack.Type.Default().(slack.Config).BaseURL; got != slack.DefaultBaseURL {
		t.Errorf("default base_url = %q", got)
	}
	// The built connector has a transport of its own: close its connection.
	conn.(*slack.Connector).CloseIdleConnections()
}

// FuzzEscape: escaped text reads back as written and mentions nobody.
func FuzzEscape(f *testing.F) {
	for _, s := range connectortest.Texts() {
		f.Add(s)
	}
	f.Add("&amp;lt; <!channel|x> <@U1> &")
	f.Fuzz(func(t *testing.T, s string) {
		got, mentions := slackfake.Render(slack.Escape(s), false)
		if got != s || len(mentions) != 0 {
			t.Errorf("Render(Escape(%q)) = %q, mentions %q", s, got, mentions)
		}
	})
}

// TestWebhookOKCutShort: a 200 whose "ok" body was cut short is posted
// (Slack answers 200 only once it has the message): a retry would post it
// twice, so Send reports it delivered.
func TestWebhookOKCutShort(t *testing.T) {
	t.Parallel()
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts++
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("o")) // then the connection ends
	}))
	t.Cleanup(srv.Close)
	conn := newConnector(t, slack.Config{WebhookURL: srv.URL + "/services/T0/B0/secretkey0123456789"})
	if _, err := conn.Send(t.Context(), connectortest.Notification("posted once")); err != nil {
		t.Fatalf("Send answered by a cut-short 200 = %v, want delivered", err)
	}
	if posts != 1 {
		t.Fatalf("the webhook got %d posts, want 1", posts)
	}
}
