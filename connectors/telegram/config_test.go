package telegram_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/invopop/jsonschema"
	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/console"
	"github.com/agentwork/agentwork/connectors/telegram"
	"github.com/agentwork/agentwork/connectors/telegram/telegramfake"
)

// token is the bot token of the tests; the fake accepts it.
const token = telegramfake.DefaultToken

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := telegram.Config{BotToken: token, ChatID: "-1001234567890"}
	with := func(f func(*telegram.Config)) telegram.Config { c := ok; f(&c); return c }
	for _, tc := range []struct {
		name string
		c    telegram.Config
		want string // substring of the error; "" for valid
	}{
		{"minimal", ok, ""},
		{"channel", with(func(c *telegram.Config) { c.ChatID = "@agentwork_alerts" }), ""},
		{"person", with(func(c *telegram.Config) { c.ChatID = "123456789" }), ""},
		{"everything", with(func(c *telegram.Config) {
			c.MessageThreadID, c.ParseMode, c.LinkPreview, c.BaseURL = 42, "HTML", true, "http://127.0.0.1:8081/"
		}), ""},
		{"no token", with(func(c *telegram.Config) { c.BotToken = "" }), "bot_token: required (write ${TELEGRAM_BOT_TOKEN}"},
		{"token with a newline", with(func(c *telegram.Config) { c.BotToken = token + "\n" }), "bot_token: is not a bot token"},
		{"token without id", with(func(c *telegram.Config) { c.BotToken = "AAFakeTokenForAgentworkTests" }), "bot_token: is not a bot token"},
		{"no chat", with(func(c *telegram.Config) { c.ChatID = "" }), "chat_id: required"},
		{"chat name", with(func(c *telegram.Config) { c.ChatID = "ops" }), `chat_id: "ops": want a chat id`},
		{"chat zero", with(func(c *telegram.Config) { c.ChatID = "0" }), "chat_id:"},
		{"chat plus", with(func(c *telegram.Config) { c.ChatID = "+100" }), "chat_id:"},
		{"chat too long a username", with(func(c *telegram.Config) { c.ChatID = "@" + strings.Repeat("a", 33) }), "chat_id:"},
		{"chat bad username", with(func(c *telegram.Config) { c.ChatID = "@1abc" }), "@username"},
		{"negative thread", with(func(c *telegram.Config) { c.MessageThreadID = -1 }), "message_thread_id: -1"},
		{"markdown", with(func(c *telegram.Config) { c.ParseMode = "MarkdownV2" }), `parse_mode: "MarkdownV2" is not offered`},
		{"other mode", with(func(c *telegram.Config) { c.ParseMode = "xml" }), `parse_mode: "xml": want HTML`},
		{"base_url scheme", with(func(c *telegram.Config) { c.BaseURL = "api.telegram.org" }), "base_url:"},
		{"base_url with a query", with(func(c *telegram.Config) { c.BaseURL = "https://proxy.example/?key=s3cret" }), "without user info, query"},
	} {
		connectortest.CheckError(t, tc.name+": Validate()", tc.c.Validate(), tc.want, token, "AAFakeTokenForAgentworkTests", "s3cret")
	}
}

// The config never prints its token, whatever verb formats it.
func TestConfigString(t *testing.T) {
	t.Parallel()
	c := telegram.Config{BotToken: token, ChatID: "-1001234567890"}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		got := fmt.Sprintf(verb, c)
		if strings.Contains(got, "AAFakeToken") || !strings.Contains(got, "[redacted]") || !strings.Contains(got, "-1001234567890") {
			t.Errorf("Sprintf(%s, config) = %q, want the chat and [redacted] for the token", verb, got)
		}
	}
}

func TestCheckDestination(t *testing.T) {
	t.Parallel()
	var c telegram.Config
	for _, tc := range []struct {
		dest, want string // want: substring of the error; "" for valid
	}{
		{"-1001234567890", ""},
		{"-1001234567890/42", ""},
		{"@agentwork_alerts", ""},
		{"@agentwork_alerts/3", ""},
		{"/42", ""},
		{"123456789", ""},
		{"", "empty"},
		{"/", "positive number"},
		{"/0", "positive number"},
		{"/-4", "positive number"},
		{"/042", "positive number"},
		{"-100123/abc", "positive number"},
		{"-100123/4/5", "positive number"},
		{"ops", `destination "ops": want a chat id`},
		{"#alerts", "want a chat id"},
		{"-100123 ", "want a chat id"},
		{"99999999999999999999", "want a chat id"},
	} {
		err := c.CheckDestination(tc.dest)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckDestination(%q) = %v, want %q", tc.dest, err, tc.want)
		}
	}
	// The connectors package asks the type's config.
	if err := connectors.CheckDestination(c, "-100123/7"); err != nil {
		t.Errorf("connectors.CheckDestination(telegram, -100123/7) = %v", err)
	}
}

// TestType: the three lines a user writes (chat_id unquoted) become a
// connector that sends there.
func TestType(t *testing.T) {
	t.Parallel()
	api := telegramfake.New(t)
	types := connectors.Types{console.Type, telegram.Type}
	src := fmt.Sprintf("tg:\n  type: telegram\n  bot_token: %q\n  chat_id: -1001234567890\n  base_url: %s\n", token, api.URL)
	cs := connectortest.Decode(t, types, src)
	want := telegram.Config{BotToken: token, ChatID: "-1001234567890", BaseURL: api.URL}
	if cs["tg"] != want {
		t.Fatalf("Decode: tg = %v, want %v", cs["tg"], want)
	}
	c, err := types.Build("tg", cs["tg"], connectors.BuildDeps{})
	if err != nil {
		t.Fatalf("Build = %v", err)
	}
	t.Cleanup(c.(*telegram.Connector).CloseIdleConnections)
	if _, err := c.Send(t.Context(), connectortest.Notification("hello")); err != nil {
		t.Fatalf("Send = %v", err)
	}
	if got := api.Texts("-1001234567890"); len(got) != 1 || got[0] != "hello" {
		t.Fatalf("the chat holds %q, want hello", got)
	}

	// A key of no telegram config is an error with its line.
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("tg: {type: telegram, bot_token: x, chat: -1}\n"), &n); err != nil {
		t.Fatal(err)
	}
	if _, err := types.Decode(&n); err == nil || !strings.Contains(err.Error(), "connectors.tg.chat") {
		t.Errorf("Decode(chat:) = %v, want an error naming connectors.tg.chat", err)
	}
	// Build validates: the token is not in the error.
	_, err = types.Build("tg", telegram.Config{BotToken: "12:bad token", ChatID: "x"}, connectors.BuildDeps{})
	if err == nil || !strings.Contains(err.Error(), "connectors.tg.bot_token") || !strings.Contains(err.Error(), "connectors.tg.chat_id") || strings.Contains(err.Error(), "bad token") {
		t.Errorf("Build(bad config) = %v, want errors for bot_token and chat_id without the token", err)
	}
}

// The JSON Schema takes chat_id as a number or a string.
func TestSchema(t *testing.T) {
	t.Parallel()
	r := &jsonschema.Reflector{FieldNameTag: "yaml", RequiredFromJSONSchemaTags: true}
	raw, err := json.Marshal(connectors.Types{telegram.Type}.Schema(r))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	for _, want := range []string{`"bot_token"`, `"chat_id":{"oneOf":[{"type":"integer"`, `"message_thread_id"`, `"link_preview"`, `"HTML"`} {
		if !strings.Contains(s, want) {
			t.Errorf("schema lacks %s", want)
		}
	}
}
