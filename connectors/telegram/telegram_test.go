package telegram_test

import (
	"cmp"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/telegram"
	"github.com/agentwork/agentwork/connectors/telegram/telegramfake"
)

// chat is the configured chat of the tests.
const chat = "-1001234567890"

// newPair starts a fake Bot API and a connector named tg sending to it
// with c (its token, chat and base_url filled in when empty).
func newPair(t *testing.T, c telegram.Config) (*telegram.Connector, *telegramfake.Server) {
	t.Helper()
	api := telegramfake.New(t)
	c.BotToken = cmp.Or(c.BotToken, api.Token)
	c.ChatID = cmp.Or(c.ChatID, chat)
	c.BaseURL = cmp.Or(c.BaseURL, api.URL)
	conn, err := telegram.New("tg", c, telegram.Options{})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(conn.CloseIdleConnections)
	return conn, api
}

func harness(c telegram.Config) connectortest.Harness {
	return connectortest.Harness{
		New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
			return newPair(t, c)
		},
		Secret: token,
		Features: connectortest.Features{
			Concurrent: true, MaxText: telegram.MaxText, Length: connectors.UTF16, MessageIDs: true,
			Destination: "-1009876543210/7",
			Outages:     true, RateLimits: true, AuthErrors: true, BadRequests: true, Stalls: true,
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	connectortest.Run(t, harness(telegram.Config{}))
}

// In HTML mode the model's markup still arrives literally: the fake parses
// the HTML as Telegram does.
func TestConformanceHTML(t *testing.T) {
	t.Parallel()
	connectortest.Run(t, harness(telegram.Config{ParseMode: telegram.ParseModeHTML}))
}

// send sends n and fails t on an error.
func send(t *testing.T, c *telegram.Connector, n connectors.Notification) connectors.Receipt {
	t.Helper()
	rec, err := c.Send(t.Context(), n)
	if err != nil {
		t.Fatalf("Send(%.40q) = %v, want nil", n.Text, err)
	}
	return rec
}

// The acceptance criterion of the issue: a 5,000-character text with an
// emoji astride the 4,096 boundary arrives as two messages, in order, with
// every non-white-space character of the original and the emoji whole.
func TestSplitEmojiAstrideLimit(t *testing.T) {
	t.Parallel()
	const emoji = "👍🏽" // U+1F44D U+1F3FD: four UTF-16 units, one grapheme
	for _, tc := range []struct {
		name string
		word string // the text before the emoji repeats it
	}{
		{"words", "alert "},
		{"no spaces", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			for connectors.UTF16(b.String())+len(tc.word) <= telegram.MaxText-2 {
				b.WriteString(tc.word)
			}
			for connectors.UTF16(b.String()) < telegram.MaxText-2 {
				b.WriteString("x")
			}
			b.WriteString(emoji) // UTF-16 units 4095-4098 (1-based)
			if at := connectors.UTF16(b.String()); at <= telegram.MaxText || at-4 >= telegram.MaxText {
				t.Fatalf("the emoji spans UTF-16 units %d-%d, want astride %d", at-4, at, telegram.MaxText)
			}
			for i := 0; len([]rune(b.String())) < 4999; i++ {
				b.WriteString("tail ")
			}
			text := strings.TrimSpace(b.String()) + "."
			if n := len([]rune(text)); n < 4990 || n > 5005 {
				t.Fatalf("the text has %d characters, want about 5,000", n)
			}

			c, api := newPair(t, telegram.Config{})
			rec := send(t, c, connectortest.Notification(text))
			got := api.Texts(chat)
			if len(got) != 2 || rec.Parts != 2 || len(rec.MessageIDs) != 2 {
				t.Fatalf("the chat holds %d messages (receipt: %d parts, ids %q), want 2", len(got), rec.Parts, rec.MessageIDs)
			}
			if want := []string{chat + ":1", chat + ":2"}; !slices.Equal(rec.MessageIDs, want) {
				t.Errorf("Receipt.MessageIDs = %q, want %q", rec.MessageIDs, want)
			}
			for i, m := range got {
				if n := connectors.UTF16(m); n > telegram.MaxText {
					t.Errorf("message %d has %d UTF-16 units, want at most %d", i, n, telegram.MaxText)
				}
			}
			if dropSpace(got[0]+got[1]) != dropSpace(text) {
				t.Fatalf("the two messages in order hold other characters than the text (white space aside)")
			}
			if strings.Count(got[0]+"\n"+got[1], emoji) != 1 {
				t.Fatalf("the emoji %s did not arrive whole in one message: it ends message 1 as %q and starts message 2 as %q",
					emoji, tail(got[0]), head(got[1]))
			}
		})
	}
}

func dropSpace(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
}

func tail(s string) string { r := []rune(s); return string(r[max(0, len(r)-4):]) }
func head(s string) string { r := []rune(s); return string(r[:min(4, len(r))]) }

// The fake holds Telegram's limit: one UTF-16 unit more is "message is too
// long", and that is permanent.
func TestTooLongIsRejected(t *testing.T) {
	t.Parallel()
	api := telegramfake.New(t)
	for _, tc := range []struct {
		text string
		want int
	}{
		{strings.Repeat("a", telegramfake.MaxText), http.StatusOK},
		{strings.Repeat("a", telegramfake.MaxText+1), http.StatusBadRequest},
		{strings.Repeat("😀", telegramfake.MaxText/2), http.StatusOK},
		{strings.Repeat("😀", telegramfake.MaxText/2) + "a", http.StatusBadRequest},
	} {
		resp, err := http.Post(api.URL+"/bot"+api.Token+"/sendMessage", "application/json",
			strings.NewReader(`{"chat_id":-100123,"text":"`+tc.text+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("a text of %d UTF-16 units: status %d, want %d", connectors.UTF16(tc.text), resp.StatusCode, tc.want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	reqs := api.Requests()
	if d := reqs[1].Description; d != "Bad Request: message is too long" {
		t.Errorf("description = %q, want Telegram's", d)
	}
}

// The errors the Bot API answers with, and what Send makes of them.
func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		script    func(api *telegramfake.Server)
		config    telegram.Config
		permanent bool
		after     time.Duration // the retry delay asked for
		code      int           // the *telegram.Error's Code
		says      string        // in the error
	}{
		{"rate limited", func(api *telegramfake.Server) { api.RateLimit(1, 3*time.Second) }, telegram.Config{},
			false, 3 * time.Second, 429, "Too Many Requests: retry after 3"},
		{"internal error", func(api *telegramfake.Server) { api.FailStatus(-1, http.StatusInternalServerError) }, telegram.Config{},
			false, 0, 500, "500 Internal Server Error"},
		{"bad gateway page", func(api *telegramfake.Server) { api.Fail(connectortest.Unavailable) }, telegram.Config{},
			false, 0, 502, "502 Bad Gateway"},
		{"chat not found", func(api *telegramfake.Server) { api.ChatNotFound(chat) }, telegram.Config{},
			true, 0, 400, "Bad Request: chat not found (check chat_id"},
		{"blocked", func(api *telegramfake.Server) { api.Block("42") }, telegram.Config{ChatID: "42"},
			true, 0, 403, "Forbidden: bot was blocked by the user (the user blocked the bot"},
		{"unauthorized", func(*telegramfake.Server) {}, telegram.Config{BotToken: "987654321:AAOtherTokenNotTheFakes"},
			true, 0, 401, "401 Unauthorized (Telegram does not know bot_token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, api := newPair(t, tc.config)
			tc.script(api)
			_, err := c.Send(t.Context(), connectortest.Notification("hello"))
			var te *telegram.Error
			if !errors.As(err, &te) || te.Code != tc.code {
				t.Fatalf("Send = %v, want a *telegram.Error with code %d", err, tc.code)
			}
			if got := connectors.IsPermanent(err); got != tc.permanent {
				t.Errorf("Send = %v: permanent %v, want %v", err, got, tc.permanent)
			}
			if got := connectors.RetryAfter(err); got != tc.after {
				t.Errorf("RetryAfter(%v) = %s, want %s", err, got, tc.after)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Send = %q, want %q in it", err, tc.says)
			}
			for _, secret := range []string{api.Token, tc.config.BotToken} {
				if secret != "" && strings.Contains(err.Error(), secret) {
					t.Errorf("Send = %q holds the token", err)
				}
			}
			if got := api.Texts(cmp.Or(tc.config.ChatID, chat)); len(got) != 0 {
				t.Errorf("the chat holds %q after a failed send", got)
			}
		})
	}
}

// A 500 or 502 for ever is retried for ever; once the API recovers, the
// same notification goes through once.
func TestOutageThenRecover(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	api.Fail(connectortest.Unavailable)
	n := connectortest.Notification("after the outage")
	for range 3 {
		if _, err := c.Send(t.Context(), n); err == nil || connectors.IsPermanent(err) {
			t.Fatalf("Send during an outage = %v, want a retryable error", err)
		}
	}
	api.Recover()
	send(t, c, n)
	if got := api.Texts(chat); !slices.Equal(got, []string{"after the outage"}) {
		t.Fatalf("the chat holds %q, want the notification once", got)
	}
	if got := len(api.Requests()); got != 4 {
		t.Errorf("the API got %d requests, want 4 (3 failed, 1 sent)", got)
	}
}

// A group that became a supergroup: the part is sent to the new id at
// once, the receipt says to update the config, and later sends go to the
// new id straight away.
func TestMigrateToSupergroup(t *testing.T) {
	t.Parallel()
	const group, super = "-4012345678", "-1004012345678"
	c, api := newPair(t, telegram.Config{ChatID: group})
	api.Migrate(group, super)

	rec := send(t, c, connectortest.Notification("first"))
	if want := []string{super + ":1"}; !slices.Equal(rec.MessageIDs, want) {
		t.Errorf("Receipt.MessageIDs = %q, want %q", rec.MessageIDs, want)
	}
	wantNote := "chat -4012345678 became supergroup -1004012345678: sent there; update chat_id in agentwork.yaml"
	if len(rec.Notes) != 1 || !strings.HasPrefix(rec.Notes[0], wantNote) {
		t.Errorf("Receipt.Notes = %q, want one starting %q", rec.Notes, wantNote)
	}
	rec = send(t, c, connectortest.Notification("second"))
	if len(rec.Notes) != 1 || !strings.HasPrefix(rec.Notes[0], wantNote) {
		t.Errorf("Receipt.Notes of a later send = %q, want the note again (the config still names the group)", rec.Notes)
	}
	if got := api.Texts(super); !slices.Equal(got, []string{"first", "second"}) {
		t.Errorf("the supergroup holds %q, want first, second", got)
	}
	var toGroup int
	for _, r := range api.Requests() {
		if r.ChatID == group {
			toGroup++
		}
	}
	if toGroup != 1 {
		t.Errorf("%d requests went to the old group, want 1 (later sends go to the supergroup)", toGroup)
	}
}

// A target's chat that migrates: the note names the target to write.
func TestMigrateTargetChat(t *testing.T) {
	t.Parallel()
	const group, super = "-4011111111", "-1004011111111"
	c, api := newPair(t, telegram.Config{})
	api.Migrate(group, super)
	n := connectortest.Notification("to the team")
	n.Target = "tg:" + group
	rec := send(t, c, n)
	want := "chat -4011111111 became supergroup -1004011111111: sent there; update the targets that name it (tg:-4011111111 → tg:-1004011111111)"
	if !slices.Equal(rec.Notes, []string{want}) {
		t.Errorf("Receipt.Notes = %q, want %q", rec.Notes, want)
	}
	if got := api.Texts(super); !slices.Equal(got, []string{"to the team"}) {
		t.Errorf("the supergroup holds %q", got)
	}
	// The configured chat is not affected.
	send(t, c, connectortest.Notification("home"))
	if got := api.Texts(chat); !slices.Equal(got, []string{"home"}) {
		t.Errorf("the configured chat holds %q, want home", got)
	}
}

// A split text whose group migrates on the first part: every part arrives
// in the supergroup, in order; the old group was asked once.
func TestMigrateDuringSplit(t *testing.T) {
	t.Parallel()
	const group, super = "-4022222222", "-1004022222222"
	c, api := newPair(t, telegram.Config{ChatID: group})
	api.Migrate(group, super)
	text := connectortest.SplitText(telegram.MaxText, connectors.UTF16)
	want := telegram.Parts(connectortest.Notification(text))
	rec := send(t, c, connectortest.Notification(text))
	if got := api.Texts(super); !slices.Equal(got, want) {
		t.Fatalf("the supergroup holds %d messages, want the %d parts in order", len(got), len(want))
	}
	if len(rec.Notes) != 1 || rec.Parts != len(want) {
		t.Errorf("receipt = %d parts, notes %q; want %d parts and one note", rec.Parts, rec.Notes, len(want))
	}
	if got := len(api.Requests()); got != len(want)+1 {
		t.Errorf("the API got %d requests, want %d (one answered with the migration)", got, len(want)+1)
	}
}

// When Telegram cannot parse a part's entities, that part is sent again as
// plain text: it arrives as the model wrote it.
func TestEntityParseFallsBackToPlainText(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{ParseMode: telegram.ParseModeHTML})
	api.FailEntities(1)
	text := "load <b>5</b> & rising"
	rec := send(t, c, connectortest.Notification(text))
	if got := api.Texts(chat); !slices.Equal(got, []string{text}) {
		t.Fatalf("the chat holds %q, want %q", got, text)
	}
	reqs := api.Requests()
	if len(reqs) != 2 || reqs[0].ParseMode != "HTML" || reqs[0].Text != "load &lt;b&gt;5&lt;/b&gt; &amp; rising" ||
		reqs[1].ParseMode != "" || reqs[1].Text != text {
		t.Fatalf("requests = %+v, want the escaped HTML, then the plain text", reqs)
	}
	if len(rec.Notes) != 1 || !strings.Contains(rec.Notes[0], "part 1 of 1 was sent as plain text") {
		t.Errorf("Receipt.Notes = %q, want a note on the plain-text part", rec.Notes)
	}
	// Plain text is never sent with a parse_mode, so never fails to parse.
	c2, api2 := newPair(t, telegram.Config{})
	api2.FailEntities(1)
	send(t, c2, connectortest.Notification(text))
	if reqs := api2.Requests(); len(reqs) != 1 || reqs[0].ParseMode != "" {
		t.Errorf("plain-text requests = %+v, want one without parse_mode", reqs)
	}
}

// The 4096 limit is measured after entity parsing: a text of 4096 '<' is
// one message in HTML mode, though it is 16384 bytes on the wire.
func TestHTMLLimitAfterParsing(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{ParseMode: telegram.ParseModeHTML})
	text := strings.Repeat("<", telegram.MaxText)
	rec := send(t, c, connectortest.Notification(text))
	if got := api.Texts(chat); rec.Parts != 1 || len(got) != 1 || got[0] != text {
		t.Fatalf("receipt %d parts, chat holds %d messages; want the text as one message", rec.Parts, len(got))
	}
}

// What a request carries: urgency as disable_notification (and ⚠️ for
// important), the topic, link previews off unless asked for.
func TestRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		config  telegram.Config
		urgency string
		target  string
		want    telegramfake.Request
		text    string // as the reader sees it
	}{
		{"info is silent", telegram.Config{}, "info", "tg",
			telegramfake.Request{ChatID: chat, DisableNotification: true, LinkPreviewDisabled: true}, "see https://example.com"},
		{"no urgency is silent", telegram.Config{}, "", "tg",
			telegramfake.Request{ChatID: chat, DisableNotification: true, LinkPreviewDisabled: true}, "see https://example.com"},
		{"important notifies", telegram.Config{}, "important", "tg",
			telegramfake.Request{ChatID: chat, LinkPreviewDisabled: true}, "⚠️ see https://example.com"},
		{"link preview", telegram.Config{LinkPreview: true}, "info", "tg",
			telegramfake.Request{ChatID: chat, DisableNotification: true}, "see https://example.com"},
		{"configured topic", telegram.Config{MessageThreadID: 42}, "info", "tg",
			telegramfake.Request{ChatID: chat, MessageThreadID: 42, DisableNotification: true, LinkPreviewDisabled: true}, "see https://example.com"},
		{"target topic of the configured chat", telegram.Config{MessageThreadID: 42}, "info", "tg:/7",
			telegramfake.Request{ChatID: chat, MessageThreadID: 7, DisableNotification: true, LinkPreviewDisabled: true}, "see https://example.com"},
		{"target chat without topic", telegram.Config{MessageThreadID: 42}, "info", "tg:-1009999999999",
			telegramfake.Request{ChatID: "-1009999999999", DisableNotification: true, LinkPreviewDisabled: true}, "see https://example.com"},
		{"target chat and topic", telegram.Config{}, "info", "tg:@agentwork_alerts/3",
			telegramfake.Request{ChatID: "@agentwork_alerts", MessageThreadID: 3, DisableNotification: true, LinkPreviewDisabled: true}, "see https://example.com"},
		{"html", telegram.Config{ParseMode: "HTML"}, "info", "tg",
			telegramfake.Request{ChatID: chat, ParseMode: "HTML", DisableNotification: true, LinkPreviewDisabled: true}, "see https://example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, api := newPair(t, tc.config)
			n := connectortest.Notification("see https://example.com")
			n.Urgency, n.Target = tc.urgency, tc.target
			send(t, c, n)
			reqs := api.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			got := reqs[0]
			got.Text, got.Status, got.MessageID = "", 0, 0
			if got != tc.want {
				t.Errorf("request = %+v, want %+v", got, tc.want)
			}
			msgs, _ := api.Messages(t.Context(), 1)
			if msgs[0].Text != tc.text {
				t.Errorf("the reader sees %q, want %q", msgs[0].Text, tc.text)
			}
		})
	}
}

// A reply the model's token limit cut short says so.
func TestTruncated(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	n := connectortest.Notification("The sales report for week 47 shows")
	n.Truncated = true
	send(t, c, n)
	if got := api.Texts(chat); len(got) != 1 || got[0] != n.Text+telegram.TruncatedMarker {
		t.Fatalf("the chat holds %q, want the text and the marker", got)
	}
}

// An empty text is not sent, and never will be.
func TestEmptyText(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	for _, text := range []string{"", " \n\t"} {
		_, err := c.Send(t.Context(), connectortest.Notification(text))
		if !connectors.IsPermanent(err) {
			t.Errorf("Send(%q) = %v, want a permanent error", text, err)
		}
	}
	if got := api.Requests(); len(got) != 0 {
		t.Errorf("%d requests for empty texts, want 0", len(got))
	}
}

// A target whose destination this connector does not take fails for good
// (config validation normally catches it first).
func TestBadDestination(t *testing.T) {
	t.Parallel()
	c, _ := newPair(t, telegram.Config{})
	n := connectortest.Notification("x")
	n.Target = "tg:#alerts"
	if _, err := c.Send(t.Context(), n); !connectors.IsPermanent(err) || !strings.Contains(err.Error(), "tg:#alerts") {
		t.Fatalf("Send to tg:#alerts = %v, want a permanent error naming the target", err)
	}
}

// Nothing listens at base_url, it points at the wrong path, or it
// redirects: errors say so without the token.
func TestBaseURLProblems(t *testing.T) {
	t.Parallel()
	gone := telegramfake.NewServer(token)
	gone.Close()
	redirect := httptestRedirect(t)
	api := telegramfake.New(t)
	for _, tc := range []struct {
		name, base string
		permanent  bool
		says       string
	}{
		{"nothing listens", gone.URL, false, "POST " + gone.URL + "/bot[redacted]/sendMessage"},
		{"wrong path", api.URL + "/nothere", true, "404 Not Found (check base_url"},
		{"redirect", redirect, true, "base_url redirects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := telegram.New("tg", telegram.Config{BotToken: token, ChatID: chat, BaseURL: tc.base}, telegram.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.CloseIdleConnections)
			_, err = c.Send(t.Context(), connectortest.Notification("x"))
			if err == nil || connectors.IsPermanent(err) != tc.permanent || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Send = %v, want a permanent=%v error saying %q", err, tc.permanent, tc.says)
			}
			if strings.Contains(err.Error(), "AAFakeToken") {
				t.Fatalf("Send = %q holds the token", err)
			}
		})
	}
}

// httptestRedirect starts a server that redirects every request to a URL
// holding the token, and returns its URL.
func httptestRedirect(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://elsewhere.example"+r.URL.Path, http.StatusMovedPermanently)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A split text resumed after its first part: the receipt counts both parts
// and holds the id of the second only.
func TestResumeReceipt(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	text := connectortest.SplitText(telegram.MaxText, connectors.UTF16)
	n := connectortest.Notification(text)
	parts := telegram.Parts(n)
	api.Inject(connectortest.Fault{Kind: connectortest.RateLimited, RetryAfter: 2 * time.Second, After: 1})
	rec, err := c.Send(t.Context(), n)
	if connectors.RetryAfter(err) != 2*time.Second || rec.Parts != 1 || !slices.Equal(rec.MessageIDs, []string{chat + ":1"}) {
		t.Fatalf("Send with part 2 rate limited = %+v, %v; want part 1 confirmed and a retry after 2s", rec, err)
	}
	n.SentParts = rec.Parts
	rec = send(t, c, n)
	if rec.Parts != len(parts) || !slices.Equal(rec.MessageIDs, []string{chat + ":2", chat + ":3"}) {
		t.Fatalf("resumed receipt = %+v, want %d parts and the ids of parts 2 and 3", rec, len(parts))
	}
	if got := api.Texts(chat); !slices.Equal(got, parts) {
		t.Fatalf("the chat holds %d messages, want the %d parts once each", len(got), len(parts))
	}
}

// In HTML mode the model's markup is escaped: nothing it writes becomes
// bold, a link or a mention, and it arrives in one request.
func TestHTMLEscaped(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{ParseMode: telegram.ParseModeHTML})
	text := `<b>not bold</b> &amp; <a href="https://evil.example">click</a> 1 < 2 > 0`
	send(t, c, connectortest.Notification(text))
	reqs := api.Requests()
	if len(reqs) != 1 || reqs[0].ParseMode != "HTML" || reqs[0].Status != http.StatusOK {
		t.Fatalf("requests = %+v, want one HTML request answered 200", reqs)
	}
	if want := `&lt;b&gt;not bold&lt;/b&gt; &amp;amp; &lt;a href="https://evil.example"&gt;click&lt;/a&gt; 1 &lt; 2 &gt; 0`; reqs[0].Text != want {
		t.Errorf("sent %q, want %q", reqs[0].Text, want)
	}
	if got := api.Texts(chat); !slices.Equal(got, []string{text}) {
		t.Errorf("the reader sees %q, want %q", got, text)
	}
}

// EscapeHTML is undone by Telegram's HTML parsing (as the fake does it):
// whatever the model writes, the reader sees it.
func FuzzEscapeHTML(f *testing.F) {
	for _, s := range connectortest.Texts() {
		f.Add(s)
	}
	f.Add("&lt; &#60; &#x3c; &quot; <tg-spoiler>x</tg-spoiler> <")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			t.Skip()
		}
		got, err := telegramfake.ParseHTML(telegram.EscapeHTML(s))
		if err != nil || got != s {
			t.Fatalf("ParseHTML(EscapeHTML(%q)) = %q, %v; want it back", s, got, err)
		}
	})
}

// A destination CheckDestination accepts is a valid target's, and one it
// rejects is not sent to.
func FuzzCheckDestination(f *testing.F) {
	for _, s := range []string{"-1001234567890", "-100123/42", "@chan_nel/3", "/7", "", "/", "ops", "-0", "@a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dest string) {
		var c telegram.Config
		if err := c.CheckDestination(dest); err != nil {
			return
		}
		if err := connectors.CheckTarget("targets[0]", "tg:"+dest); err != nil {
			t.Fatalf("CheckDestination(%q) = nil but CheckTarget = %v", dest, err)
		}
		chat, topic, _ := strings.Cut(dest, "/")
		if chat == "" && topic == "" {
			t.Fatalf("CheckDestination(%q) = nil for a destination naming nothing", dest)
		}
	})
}
