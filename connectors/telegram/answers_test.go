package telegram_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/telegram"
	"github.com/agentwork/agentwork/connectors/telegram/telegramfake"
	"github.com/agentwork/agentwork/internal/clock"
)

var (
	ana = telegramfake.User{ID: 7, FirstName: "Ana"}
	bob = telegramfake.User{ID: 42, FirstName: "Bob", Username: "bob"}
)

// question is a notification asking approval id.
func question(id, text string) connectors.Notification {
	n := connectortest.Notification(text)
	n.Approval = &connectors.Prompt{ID: id, Actions: []connectors.Action{
		{Verb: "approve", Label: "Approve", URL: "https://agentwork.example/approvals/" + id + "/approve?sig=x"},
		{Verb: "reject", Label: "Reject", URL: "https://agentwork.example/approvals/" + id + "/reject?sig=y"},
	}}
	return n
}

// decider records the answers it is handed and replies with reply.
type decider struct {
	reply func(connectors.Answer) (connectors.Reply, error)
	mu    sync.Mutex
	got   []connectors.Answer
}

func (d *decider) decide(_ context.Context, a connectors.Answer) (connectors.Reply, error) {
	d.mu.Lock()
	d.got = append(d.got, a)
	d.mu.Unlock()
	return d.reply(a)
}

func (d *decider) answers() []connectors.Answer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got)
}

// approver allows telegram:7 only, as the approval package would with
// approvers [telegram:7].
func approver(a connectors.Answer) (connectors.Reply, error) {
	if a.By != "telegram:7" {
		return connectors.Reply{Text: "You may not decide this approval.", Alert: true}, nil
	}
	return connectors.Reply{Text: "Approved", Decided: true, Summary: "✅ Approved by " + a.ByName + " at 14:02"}, nil
}

// receive runs c.Answer(d) until the returned stop, or the test's end;
// stop returns Answer's error.
func receive(t *testing.T, c *telegram.Connector, d connectors.Decider) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Answer(ctx, d) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-errc })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// msgID returns the message id of a receipt's message i.
func msgID(t *testing.T, rec connectors.Receipt, i int) int64 {
	t.Helper()
	_, id, _ := strings.Cut(rec.MessageIDs[i], ":")
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		t.Fatalf("receipt %v: %v", rec, err)
	}
	return n
}

// The question arrives with one button per action, on the last part of a
// split text, carrying the approval's id and verb, and without the links.
func TestApprovalButtons(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	if !c.ShowsButtons() {
		t.Fatal("ShowsButtons() = false")
	}
	long := strings.Repeat("word ", 1000) + "Revert abc123?"
	rec := send(t, c, question("wf-1.ask.1", long))
	if len(rec.MessageIDs) != 2 {
		t.Fatalf("receipt %v, want 2 parts", rec)
	}
	first, _ := api.Message(chat, msgID(t, rec, 0))
	last, _ := api.Message(chat, msgID(t, rec, 1))
	if len(first.Buttons) != 0 {
		t.Errorf("part 1 has buttons %v, want none", first.Buttons)
	}
	want := [][]telegramfake.Button{{{Text: "Approve", CallbackData: "ap:a:wf-1.ask.1"}, {Text: "Reject", CallbackData: "ap:r:wf-1.ask.1"}}}
	if !slices.EqualFunc(last.Buttons, want, slices.Equal) {
		t.Errorf("part 2 buttons = %v, want %v", last.Buttons, want)
	}
	for _, m := range []telegramfake.Sent{first, last} {
		if strings.Contains(m.Text, "https://") {
			t.Errorf("a part shows a link: %q", m.Text[max(0, len(m.Text)-200):])
		}
	}
}

// The approval package ends every question's text with its links
// (Prompt.Links); shown with buttons, the links are cut off.
func TestApprovalButtonsCutTheLinks(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	n := question("wf-2.ask.1", "Revert abc123?")
	n.Text += n.Approval.Links()
	rec := send(t, c, n)
	m, _ := api.Message(chat, msgID(t, rec, 0))
	if m.Text != "Revert abc123?" || len(m.Buttons) != 1 {
		t.Errorf("message = %q with buttons %v, want the question alone, with its buttons", m.Text, m.Buttons)
	}
}

// An id too long for callback_data: the question carries the links
// instead, with a note; without links it cannot be asked at all.
func TestApprovalIDTooLong(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	id := strings.Repeat("x", telegram.MaxCallbackData)
	rec := send(t, c, question(id, "Revert?"))
	m, _ := api.Message(chat, msgID(t, rec, 0))
	if len(m.Buttons) != 0 || !strings.Contains(m.Text, "Approve: https://agentwork.example/approvals/"+id+"/approve") ||
		!strings.Contains(m.Text, "Reject: https://") {
		t.Errorf("message = %+v, want the links and no buttons", m)
	}
	if len(rec.Notes) != 1 || !strings.Contains(rec.Notes[0], "too long for a button") {
		t.Errorf("notes = %q, want one that says why there are no buttons", rec.Notes)
	}
	n := question(id, "Revert?")
	n.Approval.Actions[0].URL = ""
	if _, err := c.Send(t.Context(), n); !connectors.IsPermanent(err) || !strings.Contains(err.Error(), "callback_data") {
		t.Errorf("Send without links = %v, want a permanent error that explains", err)
	}
}

// A press by someone who may not decide is answered with the Decider's
// refusal as an alert and changes nothing; the approver's press decides,
// is answered, and the question shows who decided, without its buttons.
func TestPressDecides(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	rec := send(t, c, question("wf-1.ask.1", "Revert abc123?"))
	id := msgID(t, rec, 0)
	d := &decider{reply: approver}
	receive(t, c, d.decide)

	if _, err := api.PressButton(bob, chat, id, "Approve"); err != nil {
		t.Fatal(err)
	}
	got, err := api.WaitAnswers(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Text != "You may not decide this approval." || !got[0].ShowAlert || got[0].From != bob.ID {
		t.Errorf("answer to Bob = %+v, want the refusal as an alert", got[0])
	}

	if _, err := api.PressButton(ana, chat, id, "Approve"); err != nil {
		t.Fatal(err)
	}
	if got, err = api.WaitAnswers(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	if got[1].Text != "Approved" || got[1].ShowAlert {
		t.Errorf("answer to Ana = %+v, want Approved as a toast", got[1])
	}
	edits, err := api.WaitEdits(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(edits) != 1 || edits[0].Method != "editMessageText" || edits[0].Status != 200 {
		t.Fatalf("edits = %+v, want one editMessageText (none after Bob's press)", edits)
	}
	m, _ := api.Message(chat, id)
	if m.Text != "Revert abc123?\n\n✅ Approved by Ana at 14:02" || len(m.Buttons) != 0 {
		t.Errorf("the question now reads %q with buttons %v, want the decision and no buttons", m.Text, m.Buttons)
	}
	want := []connectors.Answer{
		{Connector: "tg", ApprovalID: "wf-1.ask.1", Verb: "approve", By: "telegram:42", ByName: "Bob", Chat: chat, MessageID: strconv.FormatInt(id, 10)},
		{Connector: "tg", ApprovalID: "wf-1.ask.1", Verb: "approve", By: "telegram:7", ByName: "Ana", Chat: chat, MessageID: strconv.FormatInt(id, 10)},
	}
	if a := d.answers(); !slices.Equal(a, want) {
		t.Errorf("the Decider got %+v, want %+v", a, want)
	}
}

// Data that is not an approval's button is answered with a clear text
// and never reaches the Decider; a Decider's error asks to press again.
func TestPressGarbledOrFailed(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	rec := send(t, c, question("wf-1.ask.1", "Revert?"))
	id := msgID(t, rec, 0)
	d := &decider{reply: func(connectors.Answer) (connectors.Reply, error) {
		return connectors.Reply{}, errors.New("bus: no responders")
	}}
	receive(t, c, d.decide)

	for _, data := range []string{"garbage", "ap:", "ap:a:", "ap:x:id", "a:wf-1.ask.1:approve"} {
		api.Press(ana, chat, id, data)
	}
	got, err := api.WaitAnswers(t.Context(), 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range got {
		if a.Text != telegram.UnknownButton {
			t.Errorf("answer = %+v, want %q", a, telegram.UnknownButton)
		}
	}
	if a := d.answers(); len(a) != 0 {
		t.Errorf("the Decider was called with %+v", a)
	}

	if _, err := api.PressButton(ana, chat, id, "Reject"); err != nil {
		t.Fatal(err)
	}
	if got, err = api.WaitAnswers(t.Context(), 6); err != nil {
		t.Fatal(err)
	}
	if got[5].Text != telegram.NotRecorded {
		t.Errorf("answer after the Decider failed = %+v, want %q", got[5], telegram.NotRecorded)
	}
	if m, _ := api.Message(chat, id); len(m.Buttons) != 1 || len(m.Buttons[0]) != 2 || len(api.Edits()) != 0 {
		t.Errorf("the question was edited (%+v) though nothing was decided", api.Edits())
	}
}

// A receiver stopped after handling a press confirms it to Telegram: the
// next receiver (a restart) is not handed it again.
func TestRestartDoesNotRedeliver(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	rec := send(t, c, question("wf-1.ask.1", "Revert?"))
	id := msgID(t, rec, 0)
	d := &decider{reply: approver}

	stop := receive(t, c, d.decide)
	if _, err := api.PressButton(bob, chat, id, "Reject"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.WaitAnswers(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Answer after cancel = %v, want nil", err)
	}
	if n := api.Pending(); n != 0 {
		t.Errorf("%d handled presses left unconfirmed at the stop", n)
	}

	receive(t, c, d.decide)
	if _, err := api.PressButton(ana, chat, id, "Approve"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.WaitAnswers(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	if a := d.answers(); len(a) != 2 || a[0].By != "telegram:42" || a[1].By != "telegram:7" {
		t.Errorf("the Decider got %+v, want Bob's press once, then Ana's", a)
	}
}

// A 429 on getUpdates waits the retry_after it names before polling
// again (no busy loop), and then presses are received.
func TestPollRateLimited(t *testing.T) {
	t.Parallel()
	api := telegramfake.New(t)
	clk := clock.NewFake(time.Date(2026, 5, 1, 14, 0, 0, 0, time.UTC))
	c, err := telegram.New("tg", telegram.Config{BotToken: api.Token, ChatID: chat, BaseURL: api.URL}, telegram.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	rec := send(t, c, question("wf-1.ask.1", "Revert?"))
	api.RateLimitUpdates(1, 7*time.Second)
	d := &decider{reply: approver}
	receive(t, c, d.decide)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("no wait after the 429: %v", err)
	}
	if at, _ := clk.NextDeadline(); at.Sub(clk.Now()) != 7*time.Second {
		t.Errorf("waits %s after the 429, want its retry_after 7s", at.Sub(clk.Now()))
	}
	if n := api.Polls(); n != 1 {
		t.Errorf("%d getUpdates calls before the wait ended, want 1", n)
	}
	clk.Advance(7 * time.Second)
	if _, err := api.PressButton(ana, chat, msgID(t, rec, 0), "Approve"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.WaitAnswers(ctx, 1); err != nil {
		t.Fatalf("no press received after the wait: %v", err)
	}
}

// An outage of getUpdates waits 1 s, then 2 s, between polls.
func TestPollOutageBacksOff(t *testing.T) {
	t.Parallel()
	api := telegramfake.New(t)
	clk := clock.NewFake(time.Date(2026, 5, 1, 14, 0, 0, 0, time.UTC))
	c, err := telegram.New("tg", telegram.Config{BotToken: api.Token, ChatID: chat, BaseURL: api.URL}, telegram.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	api.FailUpdates(2, 502)
	receive(t, c, (&decider{reply: approver}).decide)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		if err := clk.BlockUntil(ctx, 1); err != nil {
			t.Fatalf("no wait after failure %d: %v", i+1, err)
		}
		if at, _ := clk.NextDeadline(); at.Sub(clk.Now()) != want || api.Polls() != i+1 {
			t.Errorf("after failure %d: waits %s after %d polls, want %s after %d", i+1, at.Sub(clk.Now()), api.Polls(), want, i+1)
		}
		clk.Advance(want)
	}
	if err := api.WaitPolls(ctx, 3); err != nil {
		t.Fatalf("no poll after the outage: %v", err)
	}
}

// With a webhook set, Telegram refuses getUpdates: Answer stops with an
// error that says so and what to do, without the token.
func TestPollWebhookSet(t *testing.T) {
	t.Parallel()
	c, api := newPair(t, telegram.Config{})
	api.SetWebhook("https://example.com/hook")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := c.Answer(ctx, (&decider{reply: approver}).decide)
	if err == nil || !strings.Contains(err.Error(), "webhook") || !strings.Contains(err.Error(), "deleteWebhook") {
		t.Fatalf("Answer with a webhook set = %v, want an error naming the webhook and deleteWebhook", err)
	}
	if strings.Contains(err.Error(), api.Token) {
		t.Errorf("the error holds the token: %v", err)
	}
}

func TestCallbackData(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id, verb, data string
		ok             bool
	}{
		{"wf-1.ask.1", "approve", "ap:a:wf-1.ask.1", true},
		{"wf-1.ask.1", "reject", "ap:r:wf-1.ask.1", true},
		{"x", "defer", "ap:defer:x", true},
		{"a:b", "approve", "ap:a:a:b", true},
		{strings.Repeat("x", 59), "approve", "ap:a:" + strings.Repeat("x", 59), true},
		{strings.Repeat("x", 60), "approve", "", false},
		{"", "approve", "", false},
		{"x", "", "", false},
		{"x", "q", "", false},
		{"x", "a:b", "", false},
	} {
		data, ok := telegram.CallbackData(tc.id, tc.verb)
		if data != tc.data || ok != tc.ok {
			t.Errorf("CallbackData(%q, %q) = %q, %v, want %q, %v", tc.id, tc.verb, data, ok, tc.data, tc.ok)
		}
		if !ok {
			continue
		}
		if id, verb, ok := telegram.ParseCallbackData(data); id != tc.id || verb != tc.verb || !ok {
			t.Errorf("ParseCallbackData(%q) = %q, %q, %v, want %q, %q", data, id, verb, ok, tc.id, tc.verb)
		}
	}
}

// Whatever a client sends as callback_data parses or is refused, and what
// parses makes the same button again.
func FuzzParseCallbackData(f *testing.F) {
	for _, s := range []string{"ap:a:x", "ap:r:wf-1", "ap:defer:x", "ap:", "ap:a:", "garbage", "ap:x:y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		id, verb, ok := telegram.ParseCallbackData(data)
		if !ok {
			return
		}
		again, fits := telegram.CallbackData(id, verb)
		if !fits {
			return // data longer than a button holds
		}
		if id2, verb2, _ := telegram.ParseCallbackData(again); id2 != id || verb2 != verb {
			t.Errorf("ParseCallbackData(CallbackData(%q, %q)) = %q, %q", id, verb, id2, verb2)
		}
	})
}
