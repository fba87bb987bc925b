package agentwork

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
)

// Deliverer is an optional capability of an OutputGate: before the model
// runs, it says what the run will do with notify_user messages
// (tools.DeliveryNotify, DeliveryReply or DeliveryNone), so that what the
// tool answers the model is what will happen. The runner asks the first
// gate of a policy that has it; without one, notify_user messages are sent.
type Deliverer interface {
	Delivers(run *Run) string
}

// NotifyGate is the fail-closed heartbeat gate: only what the model passed
// to notify_user is delivered. No call skips "ack"; calls without usable
// text (blank, or arguments the tool rejected and the model was told so)
// skip "empty". The messages of several calls (at most tools.MaxNotify,
// the ones the tool accepted, as it told the model) are sent as one, in
// order, separated by a blank line; it is important if any of them is.
type NotifyGate struct{}

var (
	_ OutputGate = NotifyGate{}
	_ Deliverer  = NotifyGate{}
)

// Delivers implements Deliverer.
func (NotifyGate) Delivers(*Run) string { return tools.DeliveryNotify }

// Inspect implements OutputGate.
func (NotifyGate) Inspect(_ context.Context, run *Run, out Output) error {
	run.Notice = nil
	texts, urgency, sawCall := notifyTexts(out)
	if len(texts) > 0 {
		run.Notice = &Notice{Text: strings.Join(texts, "\n\n"), Urgency: urgency}
		return nil
	}
	if sawCall {
		return Skip(ReasonEmpty, "notify_user was called without usable text")
	}
	return Skip(ReasonAck, "")
}

// notifyTexts returns the texts of the notify_user calls the tool accepted,
// in order (at most tools.MaxNotify), their joint urgency, and whether
// notify_user was called at all.
func notifyTexts(out Output) (texts []string, urgency string, called bool) {
	urgency = tools.UrgencyInfo
	for _, c := range out.Calls {
		if c.Name != tools.NotifyName {
			continue
		}
		called = true
		if c.Error != "" {
			// The model was told this call failed: delivering it would send
			// what the model believes was not sent.
			continue
		}
		a, err := tools.DecodeNotify(c.Arguments)
		if err != nil || len(texts) == tools.MaxNotify {
			continue
		}
		texts = append(texts, strings.TrimSpace(a.Text))
		if a.Urgency == tools.UrgencyImportant {
			urgency = tools.UrgencyImportant
		}
	}
	return texts, urgency, called
}

// ReplyGate delivers the model's final text; a blank reply skips "empty".
type ReplyGate struct{}

var (
	_ OutputGate = ReplyGate{}
	_ Deliverer  = ReplyGate{}
)

// Delivers implements Deliverer.
func (ReplyGate) Delivers(*Run) string { return tools.DeliveryReply }

// Inspect implements OutputGate.
func (ReplyGate) Inspect(_ context.Context, run *Run, out Output) error {
	text := strings.TrimSpace(out.Text)
	if text == "" {
		run.Notice = nil
		return Skip(ReasonEmpty, "the model's reply is blank")
	}
	run.Notice = &Notice{Text: text, Urgency: tools.UrgencyInfo, Truncated: out.Truncated}
	return nil
}

// ModeGate picks the delivery by the request's Deliver field (Default when
// the request leaves it empty, DeliverAuto when both do): auto → the
// notify_user messages when the tool accepted one, else the reply; reply →
// ReplyGate; notify → NotifyGate; none → nothing is delivered.
type ModeGate struct{ Default string }

var (
	_ OutputGate = ModeGate{}
	_ Deliverer  = ModeGate{}
)

func (g ModeGate) mode(run *Run) string {
	switch {
	case run.Request.Deliver != "":
		return run.Request.Deliver
	case g.Default != "":
		return g.Default
	}
	return DeliverAuto
}

// Delivers implements Deliverer.
func (g ModeGate) Delivers(run *Run) string {
	switch g.mode(run) {
	case DeliverReply:
		return tools.DeliveryReply
	case DeliverNone:
		return tools.DeliveryNone
	}
	return tools.DeliveryNotify
}

// Inspect implements OutputGate.
func (g ModeGate) Inspect(ctx context.Context, run *Run, out Output) error {
	switch g.mode(run) {
	case DeliverNotify:
		return NotifyGate{}.Inspect(ctx, run, out)
	case DeliverNone:
		run.Notice = nil
		return nil
	case DeliverReply:
		return ReplyGate{}.Inspect(ctx, run, out)
	}
	if texts, _, _ := notifyTexts(out); len(texts) > 0 {
		return NotifyGate{}.Inspect(ctx, run, out)
	}
	return ReplyGate{}.Inspect(ctx, run, out)
}

// DedupGate skips "duplicate" when the same notification was already sent
// within the window: the same text (see NormalizeText) from the same source
// and name to the same targets, so an alert meant for another destination
// is not held back. The window is the request's DedupWindow, else Window;
// zero sends everything. Keys live in the shared agentwork_dedup bucket,
// taken with an atomic Create and a per-key TTL, so all instances agree and
// restarts forget nothing. The key is released when no connector delivers
// the notification.
type DedupGate struct {
	KV     jetstream.KeyValue
	Window time.Duration
}

var _ OutputGate = (*DedupGate)(nil)

// Inspect implements OutputGate.
func (g *DedupGate) Inspect(ctx context.Context, run *Run, _ Output) error {
	window := g.Window
	if w, _ := ParseDedupWindow(run.Request.DedupWindow); w > 0 {
		window = w
	}
	if run.Notice == nil || window <= 0 {
		return nil
	}
	key := NoticeKey(run.Request.Source, run.Request.Name, run.Targets, run.Notice.Text)
	_, err := g.KV.Create(ctx, key, []byte(run.ID), jetstream.KeyTTL(window))
	switch {
	case err == nil:
		run.Notice.DedupKey = key
		return nil
	case errors.Is(err, jetstream.ErrKeyExists):
		// The same run may have taken the key before: a run retried after a
		// crash keeps its run id and must not find itself a duplicate.
		if e, gerr := g.KV.Get(ctx, key); gerr == nil && string(e.Value()) == run.ID {
			run.Notice.DedupKey = key
			return nil
		}
		return Skip(ReasonDuplicate, preview(run.Notice.Text, 80))
	default:
		return fmt.Errorf("dedup: %w", err)
	}
}

// DedupKey is the dedup bucket key of text from source: the source and a
// hash of the text with case, spacing and punctuation at the ends folded, so
// "Disk full!" and "disk  full" are the same notification.
func DedupKey(source, text string) string {
	sum := sha256.Sum256([]byte(NormalizeText(text)))
	return bus.Token(source) + "." + hex.EncodeToString(sum[:16])
}

// NoticeKey is the dedup bucket key of a notification: its source, and a
// hash of its name, its targets (in any order) and its text folded as
// DedupKey folds it.
func NoticeKey(source, name string, targets []string, text string) string {
	t := slices.Clone(targets)
	slices.Sort(t)
	sum := sha256.Sum256([]byte(name + "\x00" + strings.Join(t, ",") + "\x00" + NormalizeText(text)))
	return bus.Token(source) + "." + hex.EncodeToString(sum[:16])
}

// NormalizeText folds text for dedup: lower case, runs of white space to one
// space, punctuation trimmed from both ends.
func NormalizeText(s string) string {
	s = strings.Join(strings.FieldsFunc(strings.ToLower(s), unicode.IsSpace), " ")
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsPunct(r) || unicode.IsSpace(r) })
}

func preview(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
