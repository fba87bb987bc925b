package telegram

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/internal/httpapi"
)

// DefaultBaseURL is the Bot API's root.
const DefaultBaseURL = "https://api.telegram.org"

// ParseModeHTML is the one parse_mode the connector offers besides plain
// text. Markdown and MarkdownV2 are refused: a model's text breaks them
// with any unescaped _ * [ ] ( ) ~ ` > # + - = | { } . !
const ParseModeHTML = "HTML"

// Config is a telegram connector's entry in agentwork.yaml:
//
//	connectors:
//	  telegram:
//	    type: telegram
//	    bot_token: ${TELEGRAM_BOT_TOKEN}
//	    chat_id: "-1001234567890"
//
// A target may name another chat of the same bot, and a topic: see
// CheckDestination.
type Config struct {
	// BotToken is the bot's token from @BotFather (123456789:AA...).
	// Required; write it as an ${ENV} reference, never literally. It is
	// never printed: errors, receipts and logs show [redacted].
	BotToken string `yaml:"bot_token,omitempty" json:"bot_token,omitempty"`
	// ChatID is where messages go: a chat id (-1001234567890 for a
	// supergroup or channel, -123456789 for a basic group, 123456789 for a
	// person who started the bot) or a public channel's @username.
	// Required.
	ChatID string `yaml:"chat_id,omitempty" json:"chat_id,omitempty"`
	// MessageThreadID is the topic of a forum supergroup the messages go
	// to. Default 0: the chat itself (the General topic of a forum).
	MessageThreadID int64 `yaml:"message_thread_id,omitempty" json:"message_thread_id,omitempty" jsonschema:"minimum=0"`
	// ParseMode is "" (default): the text is shown exactly as the model
	// wrote it; or "HTML": sent with parse_mode HTML, the model's & < >
	// escaped, so its text still shows literally (nothing it writes
	// becomes a link or markup).
	ParseMode string `yaml:"parse_mode,omitempty" json:"parse_mode,omitempty" jsonschema:"enum=,enum=HTML"`
	// LinkPreview lets Telegram show a preview of the first link in a
	// message. Default false: no previews (a model's link must not put
	// someone's page, title and picture under every alert).
	LinkPreview bool `yaml:"link_preview,omitempty" json:"link_preview,omitempty"`
	// BaseURL is the Bot API root. Default https://api.telegram.org; set
	// it for a self-hosted Bot API server, a proxy or a test fake.
	BaseURL string `yaml:"base_url,omitempty" json:"base_url,omitempty"`
}

var (
	_ connectors.DestinationChecker = Config{}
	_ connectors.AnswersConfig      = Config{}
)

// AnswersAs returns "telegram": the connector receives the presses of its
// buttons, decided as telegram:<user id> (connectors.AnswersConfig).
func (Config) AnswersAs() string { return "telegram" }

// tokenRE is the shape of a bot token: the bot's id, a colon, the secret.
var tokenRE = regexp.MustCompile(`^[0-9]{1,20}:[A-Za-z0-9_-]{1,200}$`)

// Validate checks c without I/O. Its errors never quote the token.
func (c Config) Validate() error {
	var errs []error
	switch {
	case c.BotToken == "":
		errs = append(errs, errors.New("bot_token: required (write ${TELEGRAM_BOT_TOKEN} and set that variable; @BotFather gives the token when you create the bot with /newbot)"))
	case !tokenRE.MatchString(c.BotToken):
		errs = append(errs, errors.New("bot_token: is not a bot token (want <bot id>:<secret> as @BotFather gives it, e.g. 123456789:AAH...; check the variable the ${...} reference reads for quotes, spaces or a newline)"))
	}
	if c.ChatID == "" {
		errs = append(errs, errors.New(`chat_id: required (a chat id such as "-1001234567890" or a channel's @username; docs/connectors/telegram.md says how to find it)`))
	} else if err := checkChat(c.ChatID); err != nil {
		errs = append(errs, fmt.Errorf("chat_id: %w", err))
	}
	if c.MessageThreadID < 0 {
		errs = append(errs, fmt.Errorf("message_thread_id: %d: want the topic's id, a positive number (or leave it out for the chat itself)", c.MessageThreadID))
	}
	switch c.ParseMode {
	case "", ParseModeHTML:
	case "Markdown", "MarkdownV2", "markdown", "markdownv2":
		errs = append(errs, fmt.Errorf("parse_mode: %q is not offered: a model's text breaks Markdown (any unescaped _ * . - ( ) fails the message); leave parse_mode out for plain text, or write HTML", c.ParseMode))
	default:
		errs = append(errs, fmt.Errorf("parse_mode: %q: want HTML, or leave it out for plain text", c.ParseMode))
	}
	if err := httpapi.CheckBaseURL(c.BaseURL, DefaultBaseURL, "bot_token"); err != nil {
		errs = append(errs, fmt.Errorf("base_url: %w", err))
	}
	return errors.Join(errs...)
}

// String shows c with the token redacted, so a config printed with %v
// keeps it secret.
func (c Config) String() string {
	if c.BotToken != "" {
		c.BotToken = "[redacted]"
	}
	type plain Config // without this method
	return fmt.Sprintf("%+v", plain(c))
}

// GoString is String, for %#v.
func (c Config) GoString() string { return "telegram.Config" + c.String() }

// JSONSchemaExtend lets chat_id be written as a number or a string (YAML
// reads -1001234567890 unquoted as a number; the config takes both).
func (Config) JSONSchemaExtend(s *jsonschema.Schema) {
	if s.Properties == nil {
		return
	}
	if p, ok := s.Properties.Get("chat_id"); ok {
		p.Type = ""
		p.OneOf = []*jsonschema.Schema{
			{Type: "integer", Description: "a chat id, e.g. -1001234567890"},
			{Type: "string", Pattern: `^(-?[1-9][0-9]{0,18}|@[A-Za-z][A-Za-z0-9_]{3,31})$`, Description: "a chat id or a channel's @username"},
		}
	}
}

// CheckDestination checks a target's destination (no I/O): another chat,
// a topic, or both, as <chat>, <chat>/<topic> or /<topic>:
//
//	ops:-1001234567890      the chat -1001234567890
//	ops:-1001234567890/42   topic 42 of that forum supergroup
//	ops:@mychannel          the public channel @mychannel
//	ops:/42                 topic 42 of the configured chat_id
func (c Config) CheckDestination(dest string) error {
	_, err := parseDestination(dest)
	return err
}

// route is where one notification goes.
type route struct {
	chat   string // a chat id or @username; "" for the configured chat
	thread int64  // 0 for none
}

// parseDestination parses a target's destination (see CheckDestination).
func parseDestination(dest string) (route, error) {
	chat, topic, hasTopic := strings.Cut(dest, "/")
	var r route
	if chat == "" && !hasTopic {
		return r, errors.New(`destination: empty; want a chat id, an @channel, <chat>/<topic> or /<topic> (e.g. -1001234567890/42)`)
	}
	if chat != "" {
		if checkChat(chat) != nil {
			return r, fmt.Errorf("destination %q: want a chat id (e.g. -1001234567890), a channel's @username, <chat>/<topic> or /<topic> for a topic of a forum group", dest)
		}
		r.chat = chat
	}
	if hasTopic {
		id, err := strconv.ParseInt(topic, 10, 64)
		if err != nil || id <= 0 || strconv.FormatInt(id, 10) != topic {
			return r, fmt.Errorf("destination %q: the topic after '/' must be a topic's message_thread_id, a positive number (e.g. -1001234567890/42)", dest)
		}
		r.thread = id
	}
	return r, nil
}

// usernameRE is a public chat's @username: 4-32 characters of a-z, 0-9 and
// _, starting with a letter.
var usernameRE = regexp.MustCompile(`^@[A-Za-z][A-Za-z0-9_]{3,31}$`)

// checkChat checks a chat id or @username.
func checkChat(s string) error {
	if strings.HasPrefix(s, "@") {
		if !usernameRE.MatchString(s) {
			return fmt.Errorf("%q: want a channel's @username (4-32 letters, digits and _, starting with a letter)", s)
		}
		return nil
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id == 0 || strconv.FormatInt(id, 10) != s {
		return fmt.Errorf("%q: want a chat id, a number such as -1001234567890, or a channel's @username", s)
	}
	return nil
}

// Type is the telegram connector type, for the connectors.Types of a
// build.
var Type = connectors.Define(connectors.Spec[Config]{
	Name: "telegram",
	New: func(name string, c Config, deps connectors.BuildDeps) (connectors.Connector, error) {
		return New(name, c, Options{Logger: deps.Logger})
	},
})
