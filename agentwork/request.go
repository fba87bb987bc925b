package agentwork

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// Delivery modes of a request: what the runner sends after the model answered.
const (
	// DeliverAuto sends what the model passed to notify_user when it called
	// it, else its final text: what a user expects of a task or a cron job
	// (the default of both).
	DeliverAuto = "auto"
	// DeliverReply sends the model's final text (blank text skips "empty").
	DeliverReply = "reply"
	// DeliverNotify sends only what the model passed to notify_user
	// (fail-closed: no call skips "ack").
	DeliverNotify = "notify"
	// DeliverNone sends nothing; the done event still carries the reply.
	DeliverNone = "none"
)

// Request is one piece of work. It is the data of the CloudEvents envelope
// published on <prefix>.request.<source>.<name>.
type Request struct {
	// ID is the envelope id (set by Publish; read from the envelope on receipt).
	ID string `json:"-"`
	// Source and Name also form the subject; they are filled from it on receipt.
	Source string `json:"source"`
	Name   string `json:"name"`
	// Prompt is the user turn given to the model.
	Prompt string `json:"prompt"`
	// System, if set, replaces the source's system prompt.
	System string `json:"system,omitempty"`
	// Targets are connector names; empty means the source's default targets.
	Targets []string `json:"targets,omitempty"`
	// Deliver is auto, reply, notify or none; empty means the source's default.
	Deliver string `json:"deliver,omitempty"`
	// DedupWindow, a duration such as "1h", holds back a notification that
	// this source and name already sent, with the same text to the same
	// targets, within it ("duplicate"). Empty: the source's default.
	DedupWindow string `json:"dedup_window,omitempty"`
	// ScheduledAt is the tick a cron or heartbeat request was fired for.
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
	// Manual marks a request made by "run now" / "wake".
	Manual bool `json:"manual,omitempty"`
	// Metadata is passed through to events and notifications.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Credential is the webhook credential the work is done for: the one
	// that sent the task, or the one whose task created the cron job that
	// fired it. Empty for the operator's own work (config, the admin
	// token, the CLI). Jobs a run creates remember it, and their targets
	// are checked against its grant at every fire.
	Credential string `json:"credential,omitempty"`
	// Resumes, on the request an approval publishes once decided (see
	// runner.approval), is the id of the request whose run waits for it,
	// parked; Approval is the decision. The runner goes on with that run
	// from its checkpoint, with the request as the run asked for it (kept
	// in the approval): only which approval was decided is read from here.
	Resumes  string            `json:"resumes,omitempty"`
	Approval *approval.Outcome `json:"approval,omitempty"`
}

// Validate checks what the runner needs.
func (r *Request) Validate() error {
	var errs []error
	if err := bus.CheckToken("source", r.Source); err != nil {
		errs = append(errs, err)
	}
	if err := bus.CheckToken("name", r.Name); err != nil {
		errs = append(errs, err)
	}
	switch r.Deliver {
	case "", DeliverAuto, DeliverReply, DeliverNotify, DeliverNone:
	default:
		errs = append(errs, fmt.Errorf("deliver: %q: want auto, reply, notify or none", r.Deliver))
	}
	if _, err := ParseDedupWindow(r.DedupWindow); err != nil {
		errs = append(errs, err)
	}
	for _, t := range r.Targets {
		if err := connectors.CheckTarget("targets", t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// MaxDedupWindow is the longest dedup window.
const MaxDedupWindow = 30 * 24 * time.Hour

// ParseDedupWindow parses a request's dedup_window ("" is 0: the source's
// default).
func ParseDedupWindow(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > MaxDedupWindow {
		return 0, fmt.Errorf("dedup_window: %q: want a duration such as 30m or 24h, at most 720h", s)
	}
	return d, nil
}

// PublishOptions adjust Publish.
type PublishOptions struct {
	// MsgID is the Nats-Msg-Id; a repeat within 24h is stored once. Default:
	// the new event's id. Cron uses <job>:<tick>, webhooks the webhook-id.
	MsgID string
	// EventID, if set, is used as the envelope id (so a caller can know the
	// request id before publishing).
	EventID string
	// Producer is the CloudEvents source attribute. Default "agentwork/<source>".
	Producer string
	// Now is the event time. Default time.Now().
	Now time.Time
}

// Published is what Publish stored.
type Published struct {
	// ID is the request id (the envelope id of the stored message; on a
	// duplicate publish, the id the caller sent).
	ID        string
	Sequence  uint64
	Duplicate bool
}

// Publish validates req and publishes it, returning once JetStream stored it.
func Publish(ctx context.Context, b *bus.Bus, req Request, o PublishOptions) (Published, error) {
	if err := req.Validate(); err != nil {
		return Published{}, fmt.Errorf("agentwork: request: %w", err)
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Producer == "" {
		o.Producer = "agentwork/" + req.Source
	}
	ev, err := bus.NewEvent(o.Producer, bus.TypeOf(req.Source, "requested"), req.Name, o.Now, req)
	if err != nil {
		return Published{}, err
	}
	if o.EventID != "" {
		ev.ID = o.EventID
	}
	ack, err := b.Publish(ctx, b.Subjects.Request(req.Source, req.Name), ev, o.MsgID)
	if err != nil {
		return Published{}, err
	}
	return Published{ID: ev.ID, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// DecodeRequest reads a request envelope received on subject.
func DecodeRequest(b *bus.Bus, subject string, data []byte) (bus.Event, Request, error) {
	var req Request
	ev, err := bus.DecodeEvent(data)
	if err != nil {
		return ev, req, err
	}
	if err := ev.DecodeData(&req); err != nil {
		return ev, req, err
	}
	req.ID = ev.ID
	src, name, err := b.Subjects.ParseRequest(subject)
	if err != nil {
		return ev, req, err
	}
	// The subject is authoritative: it is what stream permissions and the
	// webhook's source checks apply to.
	req.Source, req.Name = src, name
	return ev, req, req.Validate()
}
