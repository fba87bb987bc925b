package discord

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors"
)

// Config is a discord connector's entry in agentwork.yaml:
//
//	connectors:
//	  dc: {type: discord, webhook_url: "${DISCORD_WEBHOOK_URL}", mention_on_important: "<@&123456789012345678>"}
//
// A target may name a thread of the webhook's channel (dc:1234567890123456789).
type Config struct {
	// WebhookURL is the webhook's URL,
	// https://discord.com/api/webhooks/{id}/{token}. Its token is the
	// credential: write it as ${DISCORD_WEBHOOK_URL}; agentwork never prints
	// it. Required. It is the whole endpoint (a proxy or a fake takes its
	// place here).
	WebhookURL string `yaml:"webhook_url,omitempty" json:"webhook_url,omitempty" jsonschema:"description=the webhook URL https://discord.com/api/webhooks/{id}/{token} (a secret: write ${DISCORD_WEBHOOK_URL})"`
	// Username overrides the webhook's name on its messages. Default: the
	// name given the webhook in Discord.
	Username string `yaml:"username,omitempty" json:"username,omitempty"`
	// ThreadID is the thread messages go to unless a target names another.
	// A webhook of a forum channel needs one. Default: the webhook's
	// channel.
	ThreadID string `yaml:"thread_id,omitempty" json:"thread_id,omitempty" jsonschema:"pattern=^[0-9]+$"`
	// MentionOnImportant is whom an important notification mentions (and
	// notifies): a role, <@&role id>, or a user, <@user id>. Default
	// none. Nobody else is ever mentioned: allowed_mentions lets through
	// this one only, so @everyone or <@id> in the model's text notify no
	// one.
	MentionOnImportant string `yaml:"mention_on_important,omitempty" json:"mention_on_important,omitempty" jsonschema:"description=<@&role id> or <@user id>; default none"`
	// NotifyInfo sends info notifications as ordinary messages. Default
	// false: they are sent silently (SUPPRESS_NOTIFICATIONS: they show in
	// the channel but push no notification); important ones always notify.
	NotifyInfo bool `yaml:"notify_info,omitempty" json:"notify_info,omitempty"`
}

// webhookPath matches the end of a webhook URL's path: /webhooks/{id}/{token}.
var webhookPath = regexp.MustCompile(`/webhooks/([0-9]{1,20})/([A-Za-z0-9_-]+)/?$`)

// snowflake is a Discord id.
var snowflake = regexp.MustCompile(`^[0-9]{1,20}$`)

// mentionSyntax is a role or user mention.
var mentionSyntax = regexp.MustCompile(`^<@(&|!)?([0-9]{1,20})>$`)

// Validate checks c without I/O. Its errors never quote the webhook URL.
func (c Config) Validate() error {
	var errs []error
	if err := checkWebhookURL(c.WebhookURL); err != nil {
		errs = append(errs, err)
	}
	if err := checkUsername(c.Username); err != nil {
		errs = append(errs, fmt.Errorf("username: %w", err))
	}
	if c.ThreadID != "" && !snowflake.MatchString(c.ThreadID) {
		errs = append(errs, fmt.Errorf("thread_id: %q: want a thread id, digits only (Developer Mode → right-click the thread → Copy Thread ID)", c.ThreadID))
	}
	if c.MentionOnImportant != "" && !mentionSyntax.MatchString(c.MentionOnImportant) {
		errs = append(errs, fmt.Errorf("mention_on_important: %q: want a role <@&role id> or a user <@user id>, e.g. <@&123456789012345678>", c.MentionOnImportant))
	}
	return errors.Join(errs...)
}

// CheckDestination checks a target's destination: a thread id of the
// webhook's channel (dc:1234567890123456789).
func (c Config) CheckDestination(dest string) error {
	if !snowflake.MatchString(dest) {
		return fmt.Errorf("destination: %q: want a thread id of the webhook's channel, digits only", dest)
	}
	return nil
}

// checkWebhookURL wants an http(s) URL ending in /webhooks/{id}/{token}.
// The value holds the credential: errors never show it.
func checkWebhookURL(s string) error {
	const want = "want https://discord.com/api/webhooks/{id}/{token}, the URL Copy Webhook URL gives; the value is not shown here, it holds the credential"
	if s == "" {
		return errors.New("webhook_url: required (write ${DISCORD_WEBHOOK_URL}; in Discord: channel settings → Integrations → Webhooks → New Webhook → Copy Webhook URL)")
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return fmt.Errorf("webhook_url: not an http(s) URL (%s)", want)
	case strings.HasSuffix(u.Path, "/slack") || strings.HasSuffix(u.Path, "/github"):
		return fmt.Errorf("webhook_url: ends in /slack or /github, Discord's endpoints for those formats: leave the suffix out (%s)", want)
	case !webhookPath.MatchString(u.Path):
		return fmt.Errorf("webhook_url: the path does not end in /webhooks/{id}/{token} (%s)", want)
	}
	return nil
}

// checkUsername applies Discord's rules for a webhook's name: 1-80
// characters, without "discord", "clyde", @, #, : or ```, and not
// "everyone" or "here"
// (https://discord.com/developers/docs/resources/webhook#create-webhook,
// https://discord.com/developers/docs/resources/user#usernames-and-nicknames).
func checkUsername(s string) error {
	if s == "" {
		return nil
	}
	lower := strings.ToLower(s)
	switch n := utf8.RuneCountInString(s); {
	case n > 80 || strings.TrimSpace(s) == "":
		return fmt.Errorf("%q: want 1-80 characters", s)
	case strings.Contains(lower, "discord") || strings.Contains(lower, "clyde"):
		return fmt.Errorf("%q: Discord refuses names containing discord or clyde", s)
	case strings.ContainsAny(s, "@#:") || strings.Contains(s, "```"):
		return fmt.Errorf("%q: Discord refuses names containing @, #, : or ```", s)
	case lower == "everyone" || lower == "here":
		return fmt.Errorf("%q: Discord refuses this name", s)
	}
	return nil
}

// Type is the discord connector type, for the connectors.Types of a build.
var Type = connectors.Define(connectors.Spec[Config]{
	Name: "discord",
	New: func(_ string, c Config, _ connectors.BuildDeps) (connectors.Connector, error) {
		return New(c, Options{})
	},
})
