package slack

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/internal/httpapi"
)

// DefaultBaseURL is the root of Slack's Web API.
const DefaultBaseURL = "https://slack.com/api"

// Config is a slack connector's entry in agentwork.yaml, in one of two
// modes. An incoming webhook posts to the one channel it was made for:
//
//	connectors:
//	  team: {type: slack, webhook_url: "${SLACK_WEBHOOK_URL}"}
//
// A bot token posts with chat.postMessage to a channel, and targets may
// name other channels (team:#alerts, team:C0123456789):
//
//	connectors:
//	  team: {type: slack, bot_token: "${SLACK_BOT_TOKEN}", channel: "#ops"}
type Config struct {
	// WebhookURL is an incoming webhook's URL,
	// https://hooks.slack.com/services/T…/B…/…. The URL is the credential:
	// write it as ${SLACK_WEBHOOK_URL}; agentwork never prints it. Set it or
	// BotToken, not both.
	WebhookURL string `yaml:"webhook_url,omitempty" json:"webhook_url,omitempty" jsonschema:"description=an incoming webhook URL (a secret: write ${SLACK_WEBHOOK_URL}); set it or bot_token"`
	// BotToken is a bot token (xoxb-…) with the chat:write scope, sent as
	// Authorization: Bearer to chat.postMessage. Write ${SLACK_BOT_TOKEN}.
	BotToken string `yaml:"bot_token,omitempty" json:"bot_token,omitempty" jsonschema:"description=a bot token xoxb-… with chat:write (a secret: write ${SLACK_BOT_TOKEN}); set it or webhook_url"`
	// Channel is where chat.postMessage posts unless a target names another:
	// a channel id (C0123456789; G… and D… work too) or #name. Required
	// with BotToken; not used with WebhookURL.
	Channel string `yaml:"channel,omitempty" json:"channel,omitempty" jsonschema:"description=with bot_token: a channel id such as C0123456789 or #name"`
	// BaseURL is the Web API root chat.postMessage is under. Default
	// https://slack.com/api; set it for a proxy or a fake. Only with
	// BotToken (a webhook URL is the whole endpoint).
	BaseURL string `yaml:"base_url,omitempty" json:"base_url,omitempty" jsonschema:"default=https://slack.com/api"`
	// MentionOnImportant is who an important notification mentions:
	// "channel" (@channel), "here" (@here), a user group id (S0123…) or a
	// user id (U0123…, W0123…). Default none: nobody is mentioned, and
	// text from the model cannot mention anyone either.
	MentionOnImportant string `yaml:"mention_on_important,omitempty" json:"mention_on_important,omitempty" jsonschema:"description=channel or here or a user group id S… or a user id U…; default none"`
}

// Validate checks c without I/O. Its errors never quote the webhook URL
// or the token.
func (c Config) Validate() error {
	var errs []error
	switch {
	case c.WebhookURL != "" && c.BotToken != "":
		errs = append(errs, errors.New("webhook_url, bot_token: set one, not both (webhook_url posts to the webhook's channel; bot_token and channel post with chat.postMessage)"))
	case c.WebhookURL == "" && c.BotToken == "":
		errs = append(errs, errors.New("webhook_url or bot_token: required (webhook_url: ${SLACK_WEBHOOK_URL} for an incoming webhook, or bot_token: ${SLACK_BOT_TOKEN} with channel for chat.postMessage)"))
	case c.WebhookURL != "":
		if err := checkWebhookURL(c.WebhookURL); err != nil {
			errs = append(errs, err)
		}
		if c.Channel != "" {
			errs = append(errs, errors.New("channel: only with bot_token; an incoming webhook posts to the channel it was created for (leave channel out, or use bot_token)"))
		}
		if c.BaseURL != "" && c.BaseURL != DefaultBaseURL {
			errs = append(errs, errors.New("base_url: only with bot_token; with webhook_url the webhook URL is the whole endpoint"))
		}
	default:
		if err := checkToken(c.BotToken); err != nil {
			errs = append(errs, err)
		}
		if c.Channel == "" {
			errs = append(errs, errors.New(`channel: required with bot_token (a channel id such as C0123456789, or "#name", quoted: in YAML a bare # starts a comment)`))
		} else if err := checkChannel(c.Channel); err != nil {
			errs = append(errs, fmt.Errorf("channel: %w", err))
		}
		if err := httpapi.CheckBaseURL(c.BaseURL, DefaultBaseURL, "bot_token"); err != nil {
			errs = append(errs, fmt.Errorf("base_url: %w", err))
		}
	}
	if _, err := mention(c.MentionOnImportant); err != nil {
		errs = append(errs, fmt.Errorf("mention_on_important: %w", err))
	}
	return errors.Join(errs...)
}

// CheckDestination checks a target's destination: a channel to post to
// instead of Channel (team:#alerts, team:C0123456789). Only a bot_token
// connector takes one.
func (c Config) CheckDestination(dest string) error {
	if c.WebhookURL != "" {
		return errors.New("a slack connector with webhook_url posts to its webhook's channel only; name the connector alone, or use bot_token and channel to post to other channels")
	}
	if err := checkChannel(dest); err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	return nil
}

// checkWebhookURL wants an http(s) URL with a host and a path. The value is
// the credential: errors never show it.
func checkWebhookURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return errors.New("webhook_url: not an http(s) URL with a path (want https://hooks.slack.com/services/T…/B…/…, the URL Slack shows for the webhook; the value is not shown here, it is the credential)")
	}
	return nil
}

// checkToken wants a Slack token: xox…, of letters, digits and dashes.
func checkToken(s string) error {
	if !strings.HasPrefix(s, "xox") || strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)))
	}) >= 0 {
		return errors.New("bot_token: not a Slack token (want xoxb-…, the Bot User OAuth Token under OAuth & Permissions of your Slack app; write ${SLACK_BOT_TOKEN})")
	}
	return nil
}

var channelID = regexp.MustCompile(`^[CDG][A-Z0-9]{2,}$`)

// checkChannel wants a channel id (C…, G…, D…) or #name.
func checkChannel(s string) error {
	if channelID.MatchString(s) {
		return nil
	}
	name, ok := strings.CutPrefix(s, "#")
	if !ok {
		return fmt.Errorf("%q: want a channel id such as C0123456789, or #name", s)
	}
	if name == "" || utf8.RuneCountInString(name) > 80 {
		return fmt.Errorf("%q: a channel name has 1-80 characters after the #", s)
	}
	for _, r := range name {
		if !(unicode.IsLetter(r) && !unicode.IsUpper(r) || unicode.IsDigit(r) || r == '-' || r == '_') {
			return fmt.Errorf("%q: a channel name has lowercase letters, digits, - and _ only", s)
		}
	}
	return nil
}

var mentionID = regexp.MustCompile(`^[SUW][A-Z0-9]{2,}$`)

// mention returns the mrkdwn of who an important notification mentions.
func mention(s string) (string, error) {
	switch {
	case s == "":
		return "", nil
	case s == "channel" || s == "here":
		return "<!" + s + ">", nil
	case mentionID.MatchString(s) && s[0] == 'S':
		return "<!subteam^" + s + ">", nil
	case mentionID.MatchString(s):
		return "<@" + s + ">", nil
	}
	return "", fmt.Errorf("%q: want channel, here, a user group id (S0123ABC) or a user id (U0123ABC)", s)
}

// Type is the slack connector type, for the connectors.Types of a build.
var Type = connectors.Define(connectors.Spec[Config]{
	Name:     "slack",
	Defaults: Config{BaseURL: DefaultBaseURL},
	New: func(_ string, c Config, _ connectors.BuildDeps) (connectors.Connector, error) {
		return New(c, Options{})
	},
})
