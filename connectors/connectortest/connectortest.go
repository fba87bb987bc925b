// Package connectortest is the conformance suite for connectors.Connector
// implementations, in the manner of testing/slogtest and Watermill's pub/sub
// tests: every connector runs the same cases through Run, against a fake of
// its destination (a buffer for the console, a subscription for NATS, an
// httptest server that speaks the chat API's wire format for Telegram, Slack,
// Discord, ntfy and webhooks).
//
// The cases: a notification arrives with its text intact (plain, unicode,
// emoji, newlines, markup that must stay literal, 4000 characters); urgency
// is kept; exactly one message per Send; a cancelled or expired ctx returns
// promptly with ctx's error and sends nothing; concurrent sends are safe;
// destination errors map to *connectors.RetryableError (with the delay a 429
// asks for) or *connectors.PermanentError (401, 400); and no error carries
// the connector's secret.
//
// A capability a connector lacks is declared in Features and the cases that
// need it are skipped, never weakened. A chat connector's test reads:
//
//	func TestConformance(t *testing.T) {
//		connectortest.Run(t, connectortest.Harness{
//			New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
//				api := telegramfake.New(t) // httptest; embeds a connectortest.Recorder and a connectortest.Script
//				return telegram.New(api.URL, token, chatID), api
//			},
//			Secret:   token,
//			Features: connectortest.Features{MaxText: 4096, RateLimits: true, AuthErrors: true, BadRequests: true, Outages: true, Stalls: true},
//		})
//	}
//
// A fake that stalls must release its handlers at t.Cleanup, and read the
// request body first (net/http notices a client hanging up only then).
package connectortest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/internal/secret"
)

// Harness builds connectors for the suite.
type Harness struct {
	// New returns a fresh connector and an Observer of its destination. Each
	// case calls it once, from its own (parallel) subtest; resources are
	// released with t.Cleanup.
	New func(t *testing.T) (connectors.Connector, Observer)
	// Features declares what the connector and its fake destination can do.
	Features Features
	// Secret, when set, is a credential the connector was built with (a bot
	// token, a webhook URL's key). No error from Send may contain it: errors
	// end up in logs and in delivery events anyone on the bus can read.
	Secret string
	// Secrets are more credentials the connector was built with (a URL's
	// key, a header value, a password), held to the same rule.
	Secrets []string
}

// Features lists optional capabilities. The zero value is a connector whose
// destination can neither fail nor hang, used from one goroutine at a time.
type Features struct {
	// Concurrent: Send is safe for concurrent use. Required when the
	// connector implements connectors.Concurrent with more than one.
	Concurrent bool
	// MaxText is the longest text (measured by Length) the destination
	// takes in one message; longer texts are split over several messages,
	// none longer than MaxText, that together hold the whole text (white
	// space at the cuts may change), and Send resumes a split text after
	// the n.SentParts parts an earlier attempt sent. 0: no limit, every
	// text is one message.
	MaxText int
	// Length measures MaxText: connectors.Runes (the default) or
	// connectors.UTF16.
	Length func(string) int
	// MessageIDs: the receipt of a Send holds the platform's id of each
	// message (one per part).
	MessageIDs bool
	// Destination, when set, is a destination the connector takes in a
	// target (conformance:<Destination>); the Observer reports it in
	// Message.Destination.
	Destination string
	// KeepsID: the destination keeps the notification ID (Message.ID), for
	// example as an idempotency key or inside a structured payload.
	KeepsID bool

	// The destination can be made to fail (the Observer implements
	// FaultInjector):
	//
	// Outages: it is down or answers 5xx; Send returns an error that is not
	// permanent, so the dispatcher retries it.
	Outages bool
	// RateLimits: it answers 429 with a retry-after; Send returns a
	// *connectors.RetryableError whose After is that delay and whose
	// RateLimited is set (connectors.RateLimit).
	RateLimits bool
	// AuthErrors: it rejects the credentials (401/403); Send returns a
	// *connectors.PermanentError.
	AuthErrors bool
	// BadRequests: it rejects the message (400); Send returns a
	// *connectors.PermanentError.
	BadRequests bool
	// Stalls: it accepts the request and never answers; Send returns
	// promptly with ctx's error when ctx is cancelled or its deadline passes.
	Stalls bool
}

// Message is one message as the destination holds it, decoded by the
// Observer into what a reader sees.
type Message struct {
	// Text is the text as the reader sees it (markup escapes undone).
	Text string
	// Urgency is "important" or "info", as the destination shows it.
	Urgency string
	// ID is the notification ID, when Features.KeepsID.
	ID string
	// Destination is where the message went (a chat id, a channel), when
	// Features.Destination is set: the connector's configured destination
	// or the target's.
	Destination string
}

// Observer reads back what the destination received.
type Observer interface {
	// Messages blocks until the destination holds at least n messages or
	// ctx is done, and returns all of them in order of arrival. With n = 0
	// it returns at once.
	Messages(ctx context.Context, n int) ([]Message, error)
}

// FaultKind is a way the destination can fail.
type FaultKind int

// The faults a FaultInjector can inject.
const (
	// Unavailable: down, connection refused or 5xx (Features.Outages).
	Unavailable FaultKind = iota + 1
	// RateLimited: 429 with Fault.RetryAfter (Features.RateLimits).
	RateLimited
	// Unauthorized: credentials rejected, 401 (Features.AuthErrors).
	Unauthorized
	// BadRequest: message rejected, 400 (Features.BadRequests).
	BadRequest
	// Stall: never answers until the request is abandoned (Features.Stalls).
	Stall
)

func (k FaultKind) String() string {
	switch k {
	case Unavailable:
		return "unavailable"
	case RateLimited:
		return "rate limited"
	case Unauthorized:
		return "unauthorized"
	case BadRequest:
		return "bad request"
	case Stall:
		return "stall"
	}
	return fmt.Sprintf("FaultKind(%d)", int(k))
}

// Fault is a scripted failure of the destination.
type Fault struct {
	Kind FaultKind
	// RetryAfter is the delay a RateLimited destination asks for, in whole
	// seconds on the wire.
	RetryAfter time.Duration
	// After is how many requests the destination answers normally before
	// the fault hits (the parts of a split text before the failing one).
	After int
}

// FaultInjector is implemented by an Observer whose destination can be made
// to fail. Inject makes the destination answer the next Send with f; a
// destination that cannot recover from f (a closed connection) may answer
// every later Send so too. A fake implements it by embedding a Script.
type FaultInjector interface {
	Inject(f Fault)
}

// Timeouts the suite allows.
const (
	// Wait bounds waiting for a message to arrive.
	Wait = 10 * time.Second
	// Prompt bounds how long after ctx is done Send may take to return.
	Prompt = 2 * time.Second
)

// Run runs every case against h, each as a parallel subtest with its own
// connector and destination.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("connectortest: Harness.New is nil")
	}
	t.Run("TextIntact", func(t *testing.T) { t.Parallel(); testTextIntact(t, h) })
	t.Run("Urgency", func(t *testing.T) { t.Parallel(); testUrgency(t, h) })
	t.Run("OneMessagePerSend", func(t *testing.T) { t.Parallel(); testOneMessagePerSend(t, h) })
	t.Run("CancelledContext", func(t *testing.T) { t.Parallel(); testCancelled(t, h) })
	t.Run("Concurrent", func(t *testing.T) { t.Parallel(); testConcurrent(t, h) })
	t.Run("Outage", func(t *testing.T) { t.Parallel(); testOutage(t, h) })
	t.Run("RateLimited", func(t *testing.T) { t.Parallel(); testRateLimited(t, h) })
	t.Run("Unauthorized", func(t *testing.T) {
		t.Parallel()
		testPermanent(t, h, h.Features.AuthErrors, "AuthErrors", Unauthorized)
	})
	t.Run("BadRequest", func(t *testing.T) {
		t.Parallel()
		testPermanent(t, h, h.Features.BadRequests, "BadRequests", BadRequest)
	})
	t.Run("Split", func(t *testing.T) { t.Parallel(); testSplit(t, h) })
	t.Run("SplitResumed", func(t *testing.T) { t.Parallel(); testSplitResumed(t, h) })
	t.Run("SplitLongGrapheme", func(t *testing.T) { t.Parallel(); testSplitLongGrapheme(t, h) })
	t.Run("Destination", func(t *testing.T) { t.Parallel(); testDestination(t, h) })
	t.Run("StallCancelled", func(t *testing.T) { t.Parallel(); testStall(t, h, false) })
	t.Run("StallDeadline", func(t *testing.T) { t.Parallel(); testStall(t, h, true) })
}

// Texts are the texts every connector must deliver intact, by name.
func Texts() map[string]string {
	return map[string]string{
		"plain":    "Disk /var is 95% full",
		"unicode":  "Größe: 95 % — 日本語のテキスト — Ünïcødé ✓ ∑ π ≠ 3",
		"emoji":    "🔥 deploy failed 👩‍💻 on 🇩🇪 runner 🚀🚀",
		"newlines": "Sales report:\n- revenue up 5%\n\n    indented line\twith a tab\nlast line",
		"markup":   "<b>not bold</b> *not bold* _not italic_ `code` [link](http://example.com) & &amp; < > @everyone <!channel> #1",
		"long":     longText(4000),
	}
}

// longText returns n characters of lines mixing ASCII, accents and emoji.
func longText(n int) string {
	line := []rune("The quick brown fox jumps over the lazy dog, café naïve 🚀 ")
	var b []rune
	for i := 0; len(b) < n; i++ {
		if i > 0 && i%2 == 0 {
			b = append(b, '\n')
			continue
		}
		b = append(b, line...)
	}
	b = b[:n]
	// The text must not end in white space (chat apps trim it).
	b[n-1] = '.'
	return string(b)
}

// Notification returns a well-formed notification with text.
func Notification(text string) connectors.Notification {
	return connectors.Notification{
		ID:        "0195f3a0-7d2c-7e51-9b2a-3c1f0d4e5a6b.conformance",
		RunID:     "0195f3a0-7d2c-7e51-9b2a-3c1f0d4e5a6b",
		RequestID: "0195f3a0-7c00-7000-8000-000000000001",
		Source:    "heartbeat",
		Name:      "default",
		Text:      text,
		Urgency:   "info",
		Target:    "conformance",
		Time:      time.Date(2026, 11, 21, 9, 0, 3, 0, time.UTC),
	}
}

func newConnector(t *testing.T, h Harness) (connectors.Connector, Observer) {
	t.Helper()
	c, obs := h.New(t)
	if c == nil || obs == nil {
		t.Fatal("Harness.New returned a nil connector or observer")
	}
	if cc, ok := c.(connectors.Concurrent); ok && cc.Concurrency() > 1 && !h.Features.Concurrent {
		t.Fatalf("%T implements connectors.Concurrent (%d) but Features.Concurrent is false", c, cc.Concurrency())
	}
	return c, obs
}

func injector(t *testing.T, obs Observer, feature string) FaultInjector {
	t.Helper()
	fi, ok := obs.(FaultInjector)
	if !ok {
		t.Fatalf("Features.%s is set but the Observer (%T) does not implement FaultInjector", feature, obs)
	}
	return fi
}

// send sends n and checks the receipt: the parts the destination holds
// now, with an id each when Features.MessageIDs.
func send(ctx context.Context, t *testing.T, h Harness, c connectors.Connector, n connectors.Notification) connectors.Receipt {
	t.Helper()
	rec, err := c.Send(ctx, n)
	if err != nil {
		t.Fatalf("Send(%q) = %v, want nil", preview(n.Text), err)
	}
	noSecretIn(t, h, "the receipt", fmt.Sprint(rec))
	want := len(split(h, n.Text))
	if rec.Parts != want {
		t.Errorf("Receipt.Parts = %d, want %d (the parts of the text)", rec.Parts, want)
	}
	if h.Features.MessageIDs && len(rec.MessageIDs) != want-n.SentParts {
		t.Errorf("Receipt.MessageIDs = %q, want an id for each of the %d messages sent", rec.MessageIDs, want-n.SentParts)
	}
	return rec
}

// split returns the parts text is sent in.
func split(h Harness, text string) []string {
	return connectors.Split(text, h.Features.MaxText, h.length())
}

func (h Harness) length() func(string) int {
	if h.Features.Length != nil {
		return h.Features.Length
	}
	return connectors.Runes
}

func messages(t *testing.T, obs Observer, n int) []Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Wait)
	defer cancel()
	msgs, err := obs.Messages(ctx, n)
	if err != nil {
		t.Fatalf("Messages(%d) = %d messages, %v; the destination did not receive what Send confirmed", n, len(msgs), err)
	}
	return msgs
}

func testTextIntact(t *testing.T, h Harness) {
	for name, text := range Texts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, obs := newConnector(t, h)
			n := Notification(text)
			send(t.Context(), t, h, c, n)
			msgs := messages(t, obs, 1)
			split := h.Features.MaxText > 0 && h.length()(text) > h.Features.MaxText
			if !split {
				if len(msgs) != 1 {
					t.Fatalf("destination got %d messages for one %d-character text, want 1", len(msgs), len([]rune(text)))
				}
				if msgs[0].Text != text {
					t.Fatalf("destination text = %q, want %q", msgs[0].Text, text)
				}
			} else {
				var parts []string
				for i, m := range msgs {
					if l := h.length()(m.Text); l > h.Features.MaxText {
						t.Errorf("part %d has %d characters, want at most MaxText %d", i, l, h.Features.MaxText)
					}
					parts = append(parts, m.Text)
				}
				if got, want := foldSpace(strings.Join(parts, "\n")), foldSpace(text); got != want {
					t.Fatalf("the %d parts together = %q, want %q (white space folded)", len(parts), got, want)
				}
			}
			if h.Features.KeepsID {
				for i, m := range msgs {
					if m.ID != n.ID {
						t.Errorf("message %d ID = %q, want the notification ID %q", i, m.ID, n.ID)
					}
				}
			}
		})
	}
}

func testUrgency(t *testing.T, h Harness) {
	for _, tc := range []struct{ urgency, want string }{
		{"important", "important"},
		{"info", "info"},
		{"", "info"},
	} {
		t.Run("urgency="+tc.urgency, func(t *testing.T) {
			t.Parallel()
			c, obs := newConnector(t, h)
			n := Notification("Disk /var is 95% full")
			n.Urgency = tc.urgency
			send(t.Context(), t, h, c, n)
			msgs := messages(t, obs, 1)
			got := msgs[0].Urgency
			if got == "" {
				got = "info"
			}
			if got != tc.want {
				t.Fatalf("urgency %q arrived as %q, want %q", tc.urgency, msgs[0].Urgency, tc.want)
			}
		})
	}
}

func testOneMessagePerSend(t *testing.T, h Harness) {
	c, obs := newConnector(t, h)
	texts := []string{"first", "second", "third"}
	for _, s := range texts {
		n := Notification(s)
		n.ID += "." + s
		send(t.Context(), t, h, c, n)
	}
	msgs := messages(t, obs, len(texts))
	var got []string
	for _, m := range msgs {
		got = append(got, m.Text)
	}
	if !slices.Equal(got, texts) {
		t.Fatalf("three sequential sends arrived as %q, want %q", got, texts)
	}
}

func testCancelled(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		ctx  func(t *testing.T) context.Context
		want error
	}{
		{"canceled", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		}, context.Canceled},
		{"deadline", func(t *testing.T) context.Context {
			ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, obs := newConnector(t, h)
			start := time.Now()
			_, err := c.Send(tc.ctx(t), Notification("never sent"))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Send(done ctx) = %v, want an error wrapping %v", err, tc.want)
			}
			if d := time.Since(start); d > Prompt {
				t.Errorf("Send(done ctx) took %s, want < %s", d, Prompt)
			}
			if msgs, _ := obs.Messages(t.Context(), 0); len(msgs) != 0 {
				t.Errorf("destination got %d messages after Send with a done ctx, want 0", len(msgs))
			}
		})
	}
}

func testConcurrent(t *testing.T, h Harness) {
	if !h.Features.Concurrent {
		t.Skip("Features.Concurrent is false: Send is not safe for concurrent use")
	}
	c, obs := newConnector(t, h)
	const workers, each = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	want := make([]string, 0, workers*each)
	for w := range workers {
		for i := range each {
			want = append(want, fmt.Sprintf("worker %d message %d\nsecond line of %d/%d ✓", w, i, w, i))
		}
	}
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				n := Notification(want[w*each+i])
				n.ID = fmt.Sprintf("%s.%d.%d", n.ID, w, i)
				if _, err := c.Send(t.Context(), n); err != nil {
					errs <- fmt.Errorf("Send(worker %d, %d) = %w", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	msgs := messages(t, obs, len(want))
	var got []string
	for _, m := range msgs {
		got = append(got, m.Text)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%d concurrent sends arrived as %d messages %q, want %q", len(want), len(got), got, want)
	}
}

func testOutage(t *testing.T, h Harness) {
	if !h.Features.Outages {
		t.Skip("Features.Outages is false: the destination cannot be made unavailable")
	}
	c, obs := newConnector(t, h)
	injector(t, obs, "Outages").Inject(Fault{Kind: Unavailable})
	_, err := c.Send(t.Context(), Notification("during an outage"))
	noSecret(t, h, err)
	switch {
	case err == nil:
		t.Fatal("Send to an unavailable destination = nil, want an error")
	case connectors.IsPermanent(err):
		t.Fatalf("Send to an unavailable destination = %v, a permanent error; want a retryable one", err)
	}
}

func testRateLimited(t *testing.T, h Harness) {
	if !h.Features.RateLimits {
		t.Skip("Features.RateLimits is false: the destination has no rate limits")
	}
	c, obs := newConnector(t, h)
	const after = 7 * time.Second
	injector(t, obs, "RateLimits").Inject(Fault{Kind: RateLimited, RetryAfter: after})
	_, err := c.Send(t.Context(), Notification("rate limited"))
	noSecret(t, h, err)
	var re *connectors.RetryableError
	if !errors.As(err, &re) {
		t.Fatalf("Send answered by 429 = %v, want a *connectors.RetryableError", err)
	}
	if connectors.IsPermanent(err) {
		t.Fatalf("Send answered by 429 = %v, both retryable and permanent", err)
	}
	if re.After < after || re.After > after+time.Second {
		t.Fatalf("RetryableError.After = %s, want the %s the destination asked for", re.After, after)
	}
	if !re.RateLimited {
		t.Fatalf("Send answered by 429 = %v, want RateLimited set (connectors.RateLimit): waiting as the destination asked spends no attempt", err)
	}
	if msgs, _ := obs.Messages(t.Context(), 0); len(msgs) != 0 {
		t.Errorf("destination holds %d messages after a 429, want 0", len(msgs))
	}
}

func testPermanent(t *testing.T, h Harness, has bool, feature string, k FaultKind) {
	if !has {
		t.Skipf("Features.%s is false: the destination has no such errors", feature)
	}
	c, obs := newConnector(t, h)
	injector(t, obs, feature).Inject(Fault{Kind: k})
	_, err := c.Send(t.Context(), Notification("rejected"))
	noSecret(t, h, err)
	if !connectors.IsPermanent(err) {
		t.Fatalf("Send answered by %s = %v, want a *connectors.PermanentError", k, err)
	}
	var re *connectors.RetryableError
	if errors.As(err, &re) {
		t.Fatalf("Send answered by %s = %v, both permanent and retryable", k, err)
	}
}

func testStall(t *testing.T, h Harness, deadline bool) {
	if !h.Features.Stalls {
		t.Skip("Features.Stalls is false: the destination cannot hang")
	}
	c, obs := newConnector(t, h)
	injector(t, obs, "Stalls").Inject(Fault{Kind: Stall})
	const wait = 200 * time.Millisecond
	var ctx context.Context
	var cancel context.CancelFunc
	want := context.Canceled
	if deadline {
		ctx, cancel = context.WithTimeout(t.Context(), wait)
		want = context.DeadlineExceeded
	} else {
		ctx, cancel = context.WithCancel(t.Context())
		stop := time.AfterFunc(wait, cancel)
		defer stop.Stop()
	}
	defer cancel()
	start := time.Now()
	_, err := c.Send(ctx, Notification("stalled"))
	noSecret(t, h, err)
	if !errors.Is(err, want) {
		t.Fatalf("Send to a hanging destination = %v, want an error wrapping %v", err, want)
	}
	if d := time.Since(start); d > wait+Prompt {
		t.Fatalf("Send returned %s after ctx was done, want < %s", d-wait, Prompt)
	}
}

// noSecret fails t when err's message contains h.Secret.
func noSecret(t *testing.T, h Harness, err error) {
	t.Helper()
	if err != nil {
		noSecretIn(t, h, "Send's error", err.Error())
	}
}

// noSecretIn fails t when s, what, contains h.Secret as it is or in a
// common encoding (URL path or query escaped).
// Every form secret.Redact knows counts: as is, JSON- or Go-escaped,
// URL-encoded, base64.
func noSecretIn(t *testing.T, h Harness, what, s string) {
	t.Helper()
	secrets := slices.DeleteFunc(append([]string{h.Secret}, h.Secrets...), func(s string) bool { return s == "" })
	if len(secrets) > 0 && secret.Redact(s, secrets) != s {
		t.Errorf("%s %q contains a secret of the connector (in some encoding); redact it", what, s)
	}
}

// SplitText returns a text of about 2.5 times limit (measured by length)
// with an emoji on each boundary where a plain cut would fall: the text
// the Split cases send.
func SplitText(limit int, length func(string) int) string {
	var b strings.Builder
	word := "alert "
	for length(b.String()) < limit-1 {
		b.WriteString(word)
	}
	// An emoji with a skin tone, astride the limit.
	b.WriteString("👍🏽")
	for length(b.String()) < 2*limit+limit/2 {
		b.WriteString("line ")
		if length(b.String())%97 == 0 {
			b.WriteString("\n")
		}
	}
	b.WriteString("end.")
	return b.String()
}

func testSplit(t *testing.T, h Harness) {
	if h.Features.MaxText <= 0 {
		t.Skip("Features.MaxText is 0: every text is one message")
	}
	c, obs := newConnector(t, h)
	text := SplitText(h.Features.MaxText, h.length())
	want := split(h, text)
	n := Notification(text)
	send(t.Context(), t, h, c, n)
	msgs := messages(t, obs, len(want))
	if len(msgs) != len(want) {
		t.Fatalf("destination got %d messages for a text of %d parts", len(msgs), len(want))
	}
	for i, m := range msgs {
		if m.Text != want[i] {
			t.Fatalf("message %d = %q, want part %d %q (in order, emoji whole)", i, preview(m.Text), i, preview(want[i]))
		}
	}
}

// One grapheme longer than MaxText (a letter with thousands of combining
// marks, as a model or a fetched page can write) arrives as several
// messages that each fit: every rune once, in order.
func testSplitLongGrapheme(t *testing.T, h Harness) {
	if h.Features.MaxText <= 0 {
		t.Skip("Features.MaxText is 0: every text is one message")
	}
	c, obs := newConnector(t, h)
	const mark = "\u0301" // COMBINING ACUTE ACCENT
	marks := (2*h.Features.MaxText + h.Features.MaxText/2) / h.length()(mark)
	text := "Zalgo a" + strings.Repeat(mark, marks) + " end."
	n := Notification(text)
	rec, err := c.Send(t.Context(), n)
	if err != nil {
		t.Fatalf("Send(a letter with %d combining marks) = %v, want nil: every part must fit the limit", marks, err)
	}
	want := split(h, text)
	if len(want) < 3 || rec.Parts != len(want) {
		t.Fatalf("Receipt.Parts = %d, split into %d parts; want at least 3, all sent", rec.Parts, len(want))
	}
	msgs := messages(t, obs, len(want))
	var got strings.Builder
	for i, m := range msgs {
		if l := h.length()(m.Text); l > h.Features.MaxText {
			t.Errorf("message %d has length %d, want at most %d", i, l, h.Features.MaxText)
		}
		got.WriteString(m.Text)
	}
	if noSpace(got.String()) != noSpace(text) {
		t.Fatalf("the messages in order hold %q, want %q (white space aside)", preview(got.String()), preview(text))
	}
}

// A split text whose second part fails is resumed from that part: the
// first part arrives once.
func testSplitResumed(t *testing.T, h Harness) {
	if h.Features.MaxText <= 0 || !h.Features.Outages {
		t.Skip("needs Features.MaxText and Features.Outages")
	}
	c, obs := newConnector(t, h)
	text := SplitText(h.Features.MaxText, h.length())
	want := split(h, text)
	n := Notification(text)
	injector(t, obs, "Outages").Inject(Fault{Kind: Unavailable, After: 1})
	rec, err := c.Send(t.Context(), n)
	noSecret(t, h, err)
	if err == nil || connectors.IsPermanent(err) {
		t.Fatalf("Send with part 2 failing = %v, want a retryable error", err)
	}
	if rec.Parts != 1 {
		t.Fatalf("Receipt.Parts after part 2 failed = %d, want 1", rec.Parts)
	}
	n.SentParts = rec.Parts
	send(t.Context(), t, h, c, n)
	msgs := messages(t, obs, len(want))
	var got []string
	for _, m := range msgs {
		got = append(got, m.Text)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after the resume the destination holds %d messages, want the %d parts once each, in order", len(got), len(want))
	}
}

func testDestination(t *testing.T, h Harness) {
	if h.Features.Destination == "" {
		t.Skip("Features.Destination is empty: targets name no destination")
	}
	c, obs := newConnector(t, h)
	first := Notification("to the configured destination")
	send(t.Context(), t, h, c, first)
	n := Notification("to the target's destination")
	n.ID += ".dest"
	n.Target = "conformance:" + h.Features.Destination
	send(t.Context(), t, h, c, n)
	msgs := messages(t, obs, 2)
	if msgs[1].Destination != h.Features.Destination {
		t.Fatalf("a notification for target %s went to %q, want %q", n.Target, msgs[1].Destination, h.Features.Destination)
	}
	if msgs[0].Destination == h.Features.Destination {
		t.Fatalf("a notification without a destination went to %q too, want the connector's configured one", msgs[0].Destination)
	}
}

// noSpace is s without its white space.
func noSpace(s string) string { return strings.Join(strings.Fields(s), "") }

// foldSpace replaces every run of white space with one space and trims the ends.
func foldSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

func preview(s string) string {
	r := []rune(s)
	if len(r) <= 40 {
		return s
	}
	return string(r[:40]) + "…"
}
