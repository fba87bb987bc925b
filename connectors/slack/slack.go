// Package slack is the connector that posts notifications to Slack, with
// an incoming webhook (the URL is the credential; it posts to one channel)
// or with a bot token and the Web API's chat.postMessage (any channel the
// app is in; targets may name one: team:#alerts).
//
// The model's text is sent as plain text: & < > are escaped, so it cannot
// mention anyone (<!channel>, <@U0123>) or make links, and mrkdwn is off,
// so *stars* and _underscores_ stay as they are. An important notification
// starts with ⚠️, and with a mention when mention_on_important says whom.
// Texts longer than MaxText are split into several messages.
//
// Slack has no idempotency key for chat.postMessage or incoming webhooks:
// a notification sent again (after a crash between Slack's answer and the
// dispatcher's record of it) shows twice.
package slack

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/internal/httpapi"
	"github.com/agentwork/agentwork/internal/retryafter"
	"github.com/agentwork/agentwork/internal/secret"
)

// MaxText is the longest text, in characters (Unicode code points) as the
// reader sees it, sent as one message; longer texts are split. Slack
// truncates a message's text above 40,000 characters and recommends at
// most 4,000
// (https://api.slack.com/methods/chat.postMessage, "Truncating content").
const MaxText = 4000

// ImportantMark starts the text of an important notification, after the
// mention if there is one.
const ImportantMark = "⚠️ "

// TruncatedMark ends the text of a notification the model's token limit
// cut short.
const TruncatedMark = " [cut short by the model's token limit]"

// Options are what a Connector takes beside its Config.
type Options struct {
	// Client sends the requests; it is used with redirects off (a
	// redirect is reported, not followed, so the token goes nowhere else).
	// Default: a client with a transport of its own.
	Client *http.Client
}

// Connector posts notifications to Slack. Safe for concurrent use; Slack
// allows about one message per second per channel, and answers more with
// 429 and Retry-After, which Send returns as a *connectors.RetryableError.
type Connector struct {
	api     *httpapi.Client
	webhook string // the webhook URL, or "" with a bot token
	host    string // where requests go, safe to show
	post    string // chat.postMessage's URL
	token   string
	channel string
	mention string
}

var _ connectors.Connector = (*Connector)(nil)

// New returns a Connector for c, which must be valid. It does no I/O.
func New(c Config, o Options) (*Connector, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("slack: %w", err)
	}
	conn := &Connector{token: c.BotToken, channel: c.Channel}
	conn.mention, _ = mention(c.MentionOnImportant)
	secrets := []string{c.BotToken}
	if c.WebhookURL != "" {
		u, _ := url.Parse(c.WebhookURL)
		conn.webhook, conn.host = c.WebhookURL, u.Host
		// The URL, its path and its last segment (the key) are secret.
		segs := strings.Split(strings.Trim(u.Path, "/"), "/")
		secrets = []string{c.WebhookURL, u.Path, u.EscapedPath()}
		if key := segs[len(segs)-1]; len(key) >= secret.Min {
			secrets = append(secrets, key)
		}
	} else {
		u, _ := url.Parse(strings.TrimRight(cmp.Or(c.BaseURL, DefaultBaseURL), "/"))
		conn.post, conn.host = u.String()+"/chat.postMessage", u.Host
	}
	conn.api = httpapi.New(o.Client, secrets...)
	return conn, nil
}

// CloseIdleConnections closes the connections the connector keeps open
// for its next sends.
func (c *Connector) CloseIdleConnections() { c.api.CloseIdleConnections() }

// Send posts n: to the webhook's channel, or with chat.postMessage to the
// configured channel or the one n's target names. A text longer than
// MaxText goes as several messages, in order, after the n.SentParts sent
// before. The receipt's MessageIDs are the messages' ts (chat.postMessage;
// a webhook returns none).
//
// Errors: 429 and ratelimited are *connectors.RetryableError with the
// Retry-After Slack sent; 5xx, network failures and internal_error,
// fatal_error, service_unavailable and request_timeout are retryable;
// a revoked webhook or token, an unknown or archived channel, an app not
// in the channel and a rejected message are *connectors.PermanentError.
func (c *Connector) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return connectors.Receipt{}, fmt.Errorf("slack: %w", err)
	}
	channel := c.channel
	if d := n.Destination(); d != "" {
		if c.webhook != "" {
			return connectors.Receipt{}, connectors.Permanent(fmt.Errorf("slack: target %s names channel %q, but this connector posts with an incoming webhook, to its channel only: name the connector alone, or use bot_token and channel", n.Target, d))
		}
		if err := checkChannel(d); err != nil {
			return connectors.Receipt{}, connectors.Permanent(fmt.Errorf("slack: target %s: %w", n.Target, err))
		}
		channel = d
	}
	text := n.Text
	if n.Truncated {
		text += TruncatedMark
	}
	prefix := c.prefix(n.Urgency)
	parts := connectors.Split(text, MaxText-utf8.RuneCountInString(prefix), connectors.Runes)
	return connectors.SendParts(ctx, parts, n.SentParts, func(i int, part string) (string, error) {
		body := Escape(part)
		if i == 0 {
			body = prefix + body
		}
		if c.webhook != "" {
			return "", c.postWebhook(ctx, body)
		}
		return c.postMessage(ctx, channel, body)
	})
}

// prefix is what starts an urgency's first message: for important, the
// mention (if configured) and ImportantMark.
func (c *Connector) prefix(urgency string) string {
	if urgency != "important" {
		return ""
	}
	if c.mention != "" {
		return c.mention + " " + ImportantMark
	}
	return ImportantMark
}

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Escape escapes the three characters Slack's message text gives a
// meaning (https://api.slack.com/reference/surfaces/formatting#escaping):
// & < >, so <!channel>, <@U0123> and <https://…|links> in s show as
// written instead of mentioning or linking.
func Escape(s string) string { return escaper.Replace(s) }

// postWebhook posts text to the incoming webhook. Slack answers 200 "ok",
// or a status with a plain-text code
// (https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks).
func (c *Connector) postWebhook(ctx context.Context, text string) error {
	r, err := c.do(ctx, c.webhook, map[string]any{"text": text, "mrkdwn": false}, "")
	switch {
	case r.OK():
		return nil // posted, even if the "ok" body was cut short: a retry would post it twice
	case err != nil:
		return err
	}
	code := c.api.Snippet(string(r.Body))
	hint := "check webhook_url"
	switch {
	case r.StatusCode == http.StatusTooManyRequests:
		hint = "rate limited (Slack takes about one message per second)"
	case httpapi.Retryable(r.StatusCode):
		hint = "a fault at Slack; retrying"
	case r.StatusCode/100 == 3:
		hint = "a redirect, not followed: check webhook_url"
	case code == "invalid_payload":
		hint = "Slack could not read the message"
	case code == "no_text":
		hint = "the message was empty"
	case code == "action_prohibited":
		hint = "the workspace does not let this webhook post here (an admin restriction)"
	case code == "channel_not_found":
		hint = "the webhook's channel no longer exists: create a webhook for another channel and update webhook_url"
	case code == "channel_is_archived":
		hint = "the webhook's channel is archived: unarchive it, or create a webhook for another channel and update webhook_url"
	case code == "invalid_token", code == "no_service", code == "no_team", code == "team_disabled":
		hint = "the webhook was removed or its URL is wrong: check webhook_url"
	}
	err = fmt.Errorf("slack: the webhook at %s answered %d %q: %s", c.host, r.StatusCode, code, hint)
	after, _ := retryafter.Header(r.Header, time.Now())
	return httpapi.Classify(err, r.StatusCode, after)
}

// reply is chat.postMessage's answer
// (https://api.slack.com/methods/chat.postMessage).
type reply struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error"`
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// postMessage posts text to channel with chat.postMessage and returns the
// message's ts.
func (c *Connector) postMessage(ctx context.Context, channel, text string) (string, error) {
	r, err := c.do(ctx, c.post, map[string]any{"channel": channel, "text": text, "mrkdwn": false}, c.token)
	if err != nil {
		return "", err
	}
	var rep reply
	jsonErr := json.Unmarshal(r.Body, &rep)
	what := fmt.Sprintf("slack: chat.postMessage to %s at %s", channel, c.host)
	after, _ := retryafter.Header(r.Header, time.Now())
	if jsonErr != nil || (!rep.OK && rep.Error == "") {
		err := fmt.Errorf("%s answered %d and no Slack reply (%q)", what, r.StatusCode, c.api.Snippet(string(r.Body)))
		if !httpapi.Retryable(r.StatusCode) {
			err = fmt.Errorf("%w: check base_url", err)
		}
		return "", httpapi.Classify(err, r.StatusCode, after)
	}
	if rep.OK {
		if !r.OK() {
			return "", connectors.Permanent(fmt.Errorf("%s answered %d with ok true: check base_url", what, r.StatusCode))
		}
		return rep.TS, nil
	}
	code := c.api.Snippet(rep.Error)
	fail := func(hint string) error { return fmt.Errorf("%s: %s: %s", what, code, hint) }
	switch code {
	case "ratelimited", "rate_limited":
		return "", connectors.RateLimit(fail("rate limited (Slack takes about one message per second per channel)"), after)
	case "internal_error", "fatal_error", "service_unavailable", "request_timeout", "team_added_to_org":
		return "", connectors.Retry(fail("a fault at Slack; retrying"), after)
	case "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "no_permission", "not_allowed_token_type":
		return "", connectors.Permanent(fail("Slack rejected bot_token: check it (the Bot User OAuth Token, xoxb-…, of an app installed in the workspace)"))
	case "missing_scope":
		return "", connectors.Permanent(fail("the app lacks the chat:write scope: add it under OAuth & Permissions and reinstall the app"))
	case "channel_not_found":
		return "", connectors.Permanent(fail("no such channel, or a private one the app is not in: check channel or the target's channel"))
	case "not_in_channel":
		return "", connectors.Permanent(fail("the app is not in the channel: invite it (/invite @your-app) or add the chat:write.public scope"))
	case "is_archived":
		return "", connectors.Permanent(fail("the channel is archived: unarchive it or post elsewhere"))
	case "msg_too_long":
		return "", connectors.Permanent(fail("Slack found the text too long"))
	case "no_text":
		return "", connectors.Permanent(fail("the message was empty"))
	}
	hint := "Slack rejected the message"
	if httpapi.Retryable(r.StatusCode) {
		hint = "a fault at Slack; retrying"
	}
	return "", httpapi.Classify(fail(hint), r.StatusCode, after)
}

// do posts payload as JSON to endpoint (with token as a bearer token, if
// any) and returns the reply. Its errors never show the endpoint's path or
// the token.
func (c *Connector) do(ctx context.Context, endpoint string, payload any, token string) (httpapi.Reply, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return httpapi.Reply{}, connectors.Permanent(fmt.Errorf("slack: encode the message: %w", err))
	}
	h := http.Header{"Content-Type": {"application/json; charset=utf-8"}, "User-Agent": {"agentwork"}}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	r, err := c.api.Post(ctx, endpoint, h, raw)
	if err != nil {
		return r, fmt.Errorf("slack: POST %s: %w", c.host, err)
	}
	return r, nil
}
