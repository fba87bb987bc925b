package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// NotifyName is the name of the notify_user tool.
const NotifyName = "notify_user"

// Urgency values of notify_user.
const (
	UrgencyInfo      = "info"
	UrgencyImportant = "important"
)

// NotifyArgs are the arguments of notify_user.
type NotifyArgs struct {
	Text    string `json:"text" jsonschema:"minLength=1,description=The message for the user: concise (under about 300 characters) and in the user's language."`
	Urgency string `json:"urgency,omitempty" jsonschema:"enum=info,enum=important,default=info,description=important only when the user should look now."`
}

// MaxNotify is how many notify_user messages one run may send. They are
// delivered together, as one notification; a call beyond is refused.
const MaxNotify = 5

// Notify returns the notify_user tool. It has no side effect: delivery is
// decided after the run by the runner's output gates, which read the calls
// from the reply, so that dedup and other gating stay possible. What it
// answers the model is what will happen, by the run's delivery (see
// WithDelivery): the message will be sent; or it is refused because the
// run sends its reply or nothing; or it is refused because the run already
// has MaxNotify messages.
//
// It is Idempotent: it only answers the model, and the runner reads what
// it was given from the calls.
func Notify() Spec {
	s := Func(NotifyName,
		"Send a short message to the user. Call it only when something needs the user's attention; "+
			"if nothing does, do not call it and reply briefly that all is well.",
		func(ctx context.Context, a NotifyArgs) (string, error) {
			if _, err := ParseNotify(a); err != nil {
				return "", err
			}
			d, _ := ctx.Value(deliveryKey{}).(*Delivery)
			if d == nil {
				d = &Delivery{Mode: DeliveryNotify}
			}
			switch d.Mode {
			case DeliveryReply:
				return "", errors.New("not sent: this run sends your final reply to the user, not notify_user messages; write what the user needs to know in your reply")
			case DeliveryNone:
				return "", errors.New("not sent: this run sends nothing to the user; its record keeps your reply")
			}
			switch n := d.accepted.Add(1); {
			case n > MaxNotify:
				return "", fmt.Errorf("not sent: a run sends at most %d notify_user messages; put what is left into one of them next time", MaxNotify)
			case n > 1:
				return "acknowledged: it will be sent with your earlier notify_user message(s), as one message to the user, when this run completes", nil
			}
			return "acknowledged: the message will be sent to the user when this run completes (unless the same message was sent very recently); your final reply is not sent, so put everything the user needs into notify_user", nil
		})
	s.Idempotent = true
	return s
}

// Delivery modes of a run, as notify_user sees them.
const (
	// DeliveryNotify: notify_user messages are sent.
	DeliveryNotify = "notify"
	// DeliveryReply: the final reply is sent; notify_user is refused.
	DeliveryReply = "reply"
	// DeliveryNone: nothing is sent; notify_user is refused.
	DeliveryNone = "none"
)

// Delivery is what one run does with notify_user messages. The runner puts
// one per run into the tool calls' ctx (WithDelivery).
type Delivery struct {
	// Mode is DeliveryNotify, DeliveryReply or DeliveryNone.
	Mode     string
	accepted atomic.Int32
}

type deliveryKey struct{}

// WithDelivery returns ctx carrying d for the notify_user calls of one run.
func WithDelivery(ctx context.Context, d *Delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

// restoreDelivery counts the notify_user messages of calls, made before a
// Loop went on from its State, as accepted by the run's Delivery in ctx.
func restoreDelivery(ctx context.Context, calls []Call) {
	d, _ := ctx.Value(deliveryKey{}).(*Delivery)
	if d == nil {
		return
	}
	for _, c := range calls {
		if c.Name == NotifyName && c.Outcome == OutcomeOK {
			d.accepted.Add(1)
		}
	}
}

// ParseNotify checks notify_user arguments and fills defaults.
func ParseNotify(a NotifyArgs) (NotifyArgs, error) {
	if strings.TrimSpace(a.Text) == "" {
		return a, fmt.Errorf("text is empty")
	}
	switch a.Urgency {
	case "":
		a.Urgency = UrgencyInfo
	case UrgencyInfo, UrgencyImportant:
	default:
		return a, fmt.Errorf("urgency %q: want info or important", a.Urgency)
	}
	return a, nil
}

// DecodeNotify decodes raw notify_user arguments as the model sent them.
func DecodeNotify(raw string) (NotifyArgs, error) {
	var a NotifyArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return a, fmt.Errorf("notify_user arguments: %w", err)
	}
	return ParseNotify(a)
}
