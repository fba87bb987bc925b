package agentwork

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
)

// NotifyGate is the fail-closed heartbeat gate: only what the model passed
// to notify_user is delivered. No call skips "ack"; calls without usable
// text (blank, or arguments the tool rejected and the model was told so)
// skip "empty"; when the model called it more than once, the first call the
// tool accepted wins.
type NotifyGate struct{}

var _ OutputGate = NotifyGate{}

// Inspect implements OutputGate.
func (NotifyGate) Inspect(_ context.Context, run *Run, out Output) error {
	run.Notice = nil
	sawCall := false
	for _, c := range out.Calls {
		if c.Name != tools.NotifyName {
			continue
		}
		sawCall = true
		if c.Error != "" {
			// The model was told this call failed: delivering it would send
			// what the model believes was not sent.
			continue
		}
		a, err := tools.DecodeNotify(c.Arguments)
		if err != nil {
			continue
		}
		run.Notice = &Notice{Text: strings.TrimSpace(a.Text), Urgency: a.Urgency}
		return nil
	}
	if sawCall {
		return Skip(ReasonEmpty, "notify_user was called without usable text")
	}
	return Skip(ReasonAck, "")
}

// ReplyGate delivers the model's final text; a blank reply skips "empty".
type ReplyGate struct{}

var _ OutputGate = ReplyGate{}

// Inspect implements OutputGate.
func (ReplyGate) Inspect(_ context.Context, run *Run, out Output) error {
	text := strings.TrimSpace(out.Text)
	if text == "" {
		run.Notice = nil
		return Skip(ReasonEmpty, "the model's reply is blank")
	}
	run.Notice = &Notice{Text: text, Urgency: tools.UrgencyInfo}
	return nil
}

// ModeGate picks the delivery by the request's Deliver field (Default when
// the request leaves it empty): reply → ReplyGate, notify → NotifyGate,
// none → nothing is delivered.
type ModeGate struct{ Default string }

var _ OutputGate = ModeGate{}

// Inspect implements OutputGate.
func (g ModeGate) Inspect(ctx context.Context, run *Run, out Output) error {
	mode := run.Request.Deliver
	if mode == "" {
		mode = g.Default
	}
	switch mode {
	case DeliverNotify:
		return NotifyGate{}.Inspect(ctx, run, out)
	case DeliverNone:
		run.Notice = nil
		return nil
	default:
		return ReplyGate{}.Inspect(ctx, run, out)
	}
}

// DedupGate skips "duplicate" when the same notification text was already
// sent for the same source within Window. Keys live in the shared
// agentwork_dedup bucket, taken with an atomic Create and a per-key TTL, so
// all instances agree and restarts forget nothing. The key is released when
// no connector delivers the notification.
type DedupGate struct {
	KV     jetstream.KeyValue
	Window time.Duration
}

var _ OutputGate = (*DedupGate)(nil)

// Inspect implements OutputGate.
func (g *DedupGate) Inspect(ctx context.Context, run *Run, _ Output) error {
	if run.Notice == nil || g.Window <= 0 {
		return nil
	}
	key := DedupKey(run.Request.Source, run.Notice.Text)
	_, err := g.KV.Create(ctx, key, []byte(run.ID), jetstream.KeyTTL(g.Window))
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
