// Package connectors delivers notifications to the places people read them.
// The runner queues each notification on AGENTWORK_DELIVERIES under
// <prefix>.delivery.<connector>; a Dispatcher runs one durable consumer per
// connector, calls its Send, retries what the chat API says to retry, and
// reports every notification as delivered or failed on the events stream.
// A failing connector never blocks another.
//
// Each connector type is a package of its own that owns its config
// (connectors/console, connectors/nats) and exports a Type made by Define;
// a build lists the types it offers in a Types value, which decodes the
// connectors section of agentwork.yaml, describes it in the JSON Schema
// and builds the connectors. Every connector passes one conformance suite,
// connectors/connectortest.
package connectors

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Notification is one message for one connector.
type Notification struct {
	// ID is unique per notification and target; it is the delivery's Nats-Msg-Id.
	ID string `json:"id"`
	// RunID and RequestID tie the notification to the run that made it.
	RunID     string `json:"run_id"`
	RequestID string `json:"request_id,omitempty"`
	// Source and Name say which work produced it: "heartbeat"/"default", "cron"/<job>.
	Source string `json:"source"`
	Name   string `json:"name"`
	// Text is what the user reads.
	Text string `json:"text"`
	// Urgency is "info" or "important".
	Urgency string `json:"urgency,omitempty"`
	// Truncated: Text is a reply the model's token limit cut short; a
	// connector should say so where the user reads it.
	Truncated bool `json:"truncated,omitempty"`
	// Target is the target it is queued for: the connector's name, and
	// after a colon the destination, if the target names one (see
	// SplitTarget). Connector and Destination return the two.
	Target string `json:"target"`
	// Targets are all targets the run's notification went to.
	Targets []string `json:"targets,omitempty"`
	// SentParts is how many parts of a text split over several messages
	// the destination confirmed in earlier attempts: Send sends the rest.
	// Set by the dispatcher.
	SentParts int `json:"sent_parts,omitempty"`
	// Retry counts the times a user sent it again after it failed for good
	// (DeadLetters.Retry); 0 for the first delivery.
	Retry int       `json:"retry,omitempty"`
	Time  time.Time `json:"time"`
	// DedupKey is the agentwork_dedup key that held this text back from being
	// sent again, if any. When no connector delivers the notification, the key
	// is released so the next identical notification is not suppressed.
	DedupKey string            `json:"dedup_key,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Approval, if set, makes the notification a question a person
	// answers: a connector that can show buttons (Telegram) shows one per
	// action; the others show the actions' links after the text.
	Approval *Prompt `json:"approval,omitempty"`
}

// Prompt is the question of an approval, as a notification carries it.
//
// The links convention: the approval package (the only maker of prompts)
// ends the notification's Text with Links(), the actions' signed links,
// so that every connector shows them with no code of its own. A connector
// that shows buttons instead (Telegram) cuts them off the text,
// strings.TrimSuffix(n.Text, n.Approval.Links()), and shows one button
// per action, carrying the approval's ID and the action's Verb only.
type Prompt struct {
	// ID is the approval's id.
	ID string `json:"id"`
	// Actions are the answers, in order (approve, reject).
	Actions []Action `json:"actions"`
}

// Action is one answer to an approval: its verb ("approve", "reject"), the
// label a button shows, and the signed link that answers it in a browser.
type Action struct {
	Verb  string `json:"verb"`
	Label string `json:"label"`
	URL   string `json:"url,omitempty"`
}

// Links is the text of the prompt's links as the approval package ends a
// notification's Text with it: a blank line, then one line per action
// with a URL, "<Label>: <URL>". "" when no action has one.
func (p *Prompt) Links() string {
	if p == nil {
		return ""
	}
	var b strings.Builder
	for _, a := range p.Actions {
		if a.URL == "" {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n")
		}
		b.WriteString("\n" + a.Label + ": " + a.URL)
	}
	return b.String()
}

// Connector returns the name of the connector n is queued for.
func (n Notification) Connector() string { name, _ := SplitTarget(n.Target); return name }

// Destination returns the destination n's target names, or "" for the
// connector's configured one.
func (n Notification) Destination() string { _, dest := SplitTarget(n.Target); return dest }

// Receipt is what the destination confirmed of a Send.
type Receipt struct {
	// MessageIDs are the ids the platform gave the messages, in order: one
	// per part of a split text (a Telegram message_id, a Slack ts, an SMTP
	// Message-ID).
	MessageIDs []string `json:"message_ids,omitempty"`
	// Parts is how many parts of the text the destination holds now,
	// counting n.SentParts; with an error, those confirmed before it.
	Parts int `json:"parts,omitempty"`
	// Notes say what the connector did beyond the plain send that the user
	// should know, such as "the group became supergroup -100123; sent there:
	// update the target".
	Notes []string `json:"notes,omitempty"`
}

// Connector sends notifications to one destination.
//
// Send blocks until the destination confirmed the message, ctx is done, or
// sending failed, and returns what the destination confirmed. A text
// longer than the platform takes is split (Split) and sent in order,
// skipping the n.SentParts parts sent before; when part k fails, the
// receipt counts the parts before it, so a retry sends from part k.
// SendParts does that, and records each part in the dispatcher's send
// claim as it is confirmed (through ctx), so that an instance taking over
// the send of one that died does not send those parts again: a connector
// that splits texts should send them with it. It is called from one goroutine per connector at
// a time unless the connector implements Concurrent. Return *RetryableError (with
// the server's retry-after; RateLimit when the destination asked to slow
// down) for what may succeed later, *PermanentError for
// what never will (bad token, unknown chat); other errors are retried with
// backoff. On ctx cancel it returns promptly with ctx's error.
//
// The Dispatcher sends each notification once across instances and
// redeliveries, except when the destination accepted it but the dispatcher
// could not record that: an instance died between the two, a shutdown
// cancelled a send after its grace, or an instance lost the server for
// longer than AckWait in the middle of a send. Then Send is called again
// with the same n.ID, which is stable across attempts, instances and
// redeliveries. A connector whose API takes an idempotency key should send
// n.ID as that key (an Idempotency-Key header, a client message id), so the
// API drops the repeat. NATS sends it as Nats-Msg-Id, which a stream
// capturing its subject deduplicates; Console has nowhere to send it, and
// prints a repeat again.
type Connector interface {
	Send(ctx context.Context, n Notification) (Receipt, error)
}

// Concurrent is an optional capability: a connector whose Send may be called
// from up to N goroutines at once.
type Concurrent interface {
	Concurrency() int
}

// RetryableError asks for another attempt after After (0: use backoff).
type RetryableError struct {
	After time.Duration
	// RateLimited: the destination asked to wait After before the next
	// message (a 429 naming its retry-after; see RateLimit). The wait
	// spends no delivery attempt; DispatcherConfig.Horizon bounds it.
	RateLimited bool
	Err         error
}

func (e *RetryableError) Error() string {
	switch {
	case e.RateLimited:
		return fmt.Sprintf("rate limited (retry after %s): %v", e.After, e.Err)
	case e.After > 0:
		return fmt.Sprintf("retryable (after %s): %v", e.After, e.Err)
	}
	return fmt.Sprintf("retryable: %v", e.Err)
}
func (e *RetryableError) Unwrap() error { return e.Err }

// PermanentError means the notification can never be delivered as is.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return fmt.Sprintf("permanent: %v", e.Err) }
func (e *PermanentError) Unwrap() error { return e.Err }

// Retry wraps err as retryable after d.
func Retry(err error, d time.Duration) error { return &RetryableError{After: d, Err: err} }

// RateLimit wraps err, the destination's answer that it takes no more
// for now (a 429 with a retry-after), as retryable after d without
// spending an attempt (RetryableError.RateLimited). A d <= 0 names no wait:
// then it is Retry(err, 0), an attempt like any other failure.
func RateLimit(err error, d time.Duration) error {
	if d <= 0 {
		return Retry(err, 0)
	}
	return &RetryableError{After: d, RateLimited: true, Err: err}
}

// Permanent wraps err as permanent.
func Permanent(err error) error { return &PermanentError{Err: err} }

// IsPermanent reports whether err is a *PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// RetryAfter returns the delay a *RetryableError asks for, or 0.
func RetryAfter(err error) time.Duration {
	var r *RetryableError
	if errors.As(err, &r) {
		return r.After
	}
	return 0
}

// Registry maps connector names (the targets in config) to connectors.
type Registry map[string]Connector

// Names returns the registered names.
func (r Registry) Names() []string {
	out := make([]string, 0, len(r))
	for n := range r {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
