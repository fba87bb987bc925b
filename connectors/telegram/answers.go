package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/connectors"
)

// MaxCallbackData is the most bytes a button's callback_data may hold
// (https://core.telegram.org/bots/api#inlinekeyboardbutton: "1-64
// bytes").
const MaxCallbackData = 64

// callbackPrefix starts the callback_data of an approval's button.
const callbackPrefix = "ap:"

// PollTimeout is how long one getUpdates call waits for a press (a long
// poll): Telegram answers at once when one comes.
const PollTimeout = 30 * time.Second

// confirmTimeout bounds the getUpdates call that confirms the presses
// handled when Answer stops.
const confirmTimeout = 5 * time.Second

// verbLetters are the one-letter forms of the common verbs in
// callback_data; another verb is written out.
var verbLetters = map[string]string{"approve": "a", "reject": "r"}

// CallbackData returns the callback_data of the button that answers
// approval id with verb: "ap:<a|r|verb>:<id>". ok is false when it would
// not fit in MaxCallbackData bytes, or verb is empty, a single letter or
// holds a colon.
func CallbackData(id, verb string) (data string, ok bool) {
	v, short := verbLetters[verb]
	if !short {
		if len(verb) < 2 || strings.Contains(verb, ":") {
			return "", false
		}
		v = verb
	}
	data = callbackPrefix + v + ":" + id
	if id == "" || len(data) > MaxCallbackData {
		return "", false
	}
	return data, true
}

// ParseCallbackData returns the approval id and verb of a button's
// callback_data made by CallbackData; ok is false for any other data.
func ParseCallbackData(data string) (id, verb string, ok bool) {
	rest, ok := strings.CutPrefix(data, callbackPrefix)
	if !ok {
		return "", "", false
	}
	v, id, ok := strings.Cut(rest, ":")
	if !ok || id == "" || v == "" {
		return "", "", false
	}
	for long, short := range verbLetters {
		if v == short {
			return id, long, true
		}
	}
	if len(v) < 2 {
		return "", "", false
	}
	return id, v, true
}

// inlineKeyboard is a reply_markup of inline buttons
// (https://core.telegram.org/bots/api#inlinekeyboardmarkup).
type inlineKeyboard struct {
	InlineKeyboard [][]inlineButton `json:"inline_keyboard"`
}

type inlineButton struct {
	Text         string `json:"text"`
	CallbackData string `json:"callback_data"`
}

// buttons returns the keyboard that asks p, one button per action in one
// row. When an action's callback_data would not fit (the approval's id is
// too long), it returns no keyboard but the links of the actions, to add
// to the text; when an action has no link either, an error.
func buttons(p *connectors.Prompt) (*inlineKeyboard, string, error) {
	if p == nil || len(p.Actions) == 0 {
		return nil, "", nil
	}
	row := make([]inlineButton, 0, len(p.Actions))
	fits := true
	for _, a := range p.Actions {
		data, ok := CallbackData(p.ID, a.Verb)
		if !ok {
			fits = false
			break
		}
		label := a.Label
		if strings.TrimSpace(label) == "" {
			label = a.Verb
		}
		row = append(row, inlineButton{Text: label, CallbackData: data})
	}
	if fits {
		return &inlineKeyboard{InlineKeyboard: [][]inlineButton{row}}, "", nil
	}
	var b strings.Builder
	b.WriteString("\n")
	for _, a := range p.Actions {
		if a.URL == "" {
			return nil, "", fmt.Errorf("approval %q: cannot be asked with buttons (its id and verb %q do not fit in a button's %d bytes of callback_data) nor with links (the action has no url)", p.ID, a.Verb, MaxCallbackData)
		}
		label := a.Label
		if strings.TrimSpace(label) == "" {
			label = a.Verb
		}
		fmt.Fprintf(&b, "\n%s: %s", label, a.URL)
	}
	return nil, b.String(), nil
}

// ShowsButtons reports true: a notification's Approval is shown as
// inline buttons, so the asker need not add links (connectors.Buttons).
func (c *Connector) ShowsButtons() bool { return true }

// update is the part of an Update Answer reads
// (https://core.telegram.org/bots/api#update).
type update struct {
	UpdateID      int64          `json:"update_id"`
	CallbackQuery *callbackQuery `json:"callback_query"`
}

// callbackQuery is https://core.telegram.org/bots/api#callbackquery.
type callbackQuery struct {
	ID   string `json:"id"`
	From struct {
		ID        int64  `json:"id"`
		FirstName string `json:"first_name"`
		LastName  string `json:"last_name"`
		Username  string `json:"username"`
	} `json:"from"`
	// Message is the message with the button; an InaccessibleMessage
	// (date 0) when it is too old or was deleted.
	Message *struct {
		MessageID int64 `json:"message_id"`
		Date      int64 `json:"date"`
		Chat      struct {
			ID json.Number `json:"id"`
		} `json:"chat"`
		Text            string `json:"text"`
		MessageThreadID int64  `json:"message_thread_id"`
	} `json:"message"`
	Data string `json:"data"`
}

// Texts of the answers to presses the connector answers itself.
const (
	// UnknownButton answers a press of a button whose data is not an
	// approval's (an old message, another program's buttons).
	UnknownButton = "This button is not one agentwork knows (it may be from an older version or another program): nothing was decided."
	// NotRecorded answers a press whose decision failed for a reason that
	// may pass (the Decider's error).
	NotRecorded = "Your answer could not be recorded just now: please press again in a moment."
)

// maxAnswerText is the most characters an answerCallbackQuery text shows
// (https://core.telegram.org/bots/api#answercallbackquery: "0-200
// characters").
const maxAnswerText = 200

// Answer receives the presses of the buttons Send showed, hands each to
// d, answers the press with d's Reply.Text (as an alert when Reply.Alert),
// and when the approval is decided edits the message: the buttons go and
// Reply.Summary is shown under the question (connectors.Answers).
//
// It long-polls getUpdates (allowed_updates ["callback_query"], PollTimeout
// a call), which needs no public URL. Telegram keeps the offset: a call
// confirms the updates before it, and confirmed updates never come again,
// so a restart does not see presses already handled. When ctx ends,
// Answer confirms what it handled with one more short call (at most 5 s)
// and returns nil. A press handled just before the process died can come
// again after a restart; d must be idempotent (an approval's decision
// is).
//
// A 429 waits the retry_after it names; 5xx, network errors and another
// receiver of the same bot (409 "terminated by other getUpdates request")
// wait 1 s, doubling to 30 s. It returns an error for what does not pass
// by itself: a webhook set for the bot (409: Telegram gives updates to the
// webhook alone; delete it), a bad token (401), another 4xx.
func (c *Connector) Answer(ctx context.Context, d connectors.Decider) error {
	var offset, confirmed int64
	defer func() {
		if offset > confirmed {
			c.confirm(ctx, offset)
		}
	}()
	fails := 0
	for {
		ups, err := c.getUpdates(ctx, offset)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			var te *Error
			if !errors.As(err, &te) {
				te = nil
			}
			if te != nil && fatalPoll(te) {
				return fmt.Errorf("telegram: %s: cannot receive button presses: %w", c.name, err)
			}
			fails++
			wait := backoff(fails)
			if te != nil && te.RetryAfter > 0 {
				wait = te.RetryAfter
			}
			c.log.Warn("telegram: getUpdates failed; trying again", zap.Error(err), zap.Duration("wait", wait))
			if !c.sleep(ctx, wait) {
				return nil
			}
			continue
		}
		fails, confirmed = 0, offset
		for _, u := range ups {
			offset = max(offset, u.UpdateID+1)
			if u.CallbackQuery != nil {
				c.press(ctx, d, u.CallbackQuery)
			}
			if ctx.Err() != nil {
				return nil
			}
		}
	}
}

// fatalPoll reports whether a getUpdates error will not pass by itself.
func fatalPoll(e *Error) bool {
	switch {
	case e.Code == http.StatusConflict:
		return !strings.Contains(strings.ToLower(e.Description), "terminated by other getupdates")
	case e.Status/100 == 2, e.Code == http.StatusTooManyRequests, e.Code == http.StatusRequestTimeout, e.Code >= 500:
		return false
	}
	return e.Code >= 300 // a redirect (base_url), a bad token, a bad request
}

// backoff is the wait after n failures in a row: 1 s, doubling to 30 s.
func backoff(n int) time.Duration {
	return min(time.Second<<min(max(n-1, 0), 5), 30*time.Second)
}

// sleep waits d on the connector's clock; false when ctx ended first.
func (c *Connector) sleep(ctx context.Context, d time.Duration) bool {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// getUpdates waits up to PollTimeout for presses after offset.
func (c *Connector) getUpdates(ctx context.Context, offset int64) ([]update, error) {
	// A connection that died quietly must not hold the poll forever.
	ctx, cancel := context.WithTimeout(ctx, PollTimeout+15*time.Second)
	defer cancel()
	body := map[string]any{"timeout": int(PollTimeout / time.Second), "allowed_updates": []string{"callback_query"}}
	if offset > 0 {
		body["offset"] = offset
	}
	res, err := c.call(ctx, "getUpdates", "", body)
	if err != nil {
		return nil, err
	}
	var ups []update
	if err := json.Unmarshal(res, &ups); err != nil {
		return nil, fmt.Errorf("telegram: getUpdates: a result that is not a list of updates: %w", err)
	}
	return ups, nil
}

// confirm tells Telegram that the updates before offset were handled: a
// getUpdates call with that offset that waits for nothing and asks for
// at most one update (which it does not confirm).
func (c *Connector) confirm(ctx context.Context, offset int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmTimeout)
	defer cancel()
	if _, err := c.call(ctx, "getUpdates", "", map[string]any{"offset": offset, "limit": 1, "timeout": 0}); err != nil {
		c.log.Warn("telegram: could not confirm the handled presses; they may be handed over again at the next start", zap.Error(err))
	}
}

// press handles one press.
func (c *Connector) press(ctx context.Context, d connectors.Decider, q *callbackQuery) {
	a := connectors.Answer{
		Connector: c.name,
		By:        "telegram:" + strconv.FormatInt(q.From.ID, 10),
		ByName:    strings.TrimSpace(q.From.FirstName + " " + q.From.LastName),
	}
	if a.ByName == "" && q.From.Username != "" {
		a.ByName = "@" + q.From.Username
	}
	if m := q.Message; m != nil {
		a.Chat, a.MessageID = m.Chat.ID.String(), strconv.FormatInt(m.MessageID, 10)
	}
	id, verb, ok := ParseCallbackData(q.Data)
	if !ok {
		c.answerQuery(ctx, q.ID, UnknownButton, true)
		return
	}
	a.ApprovalID, a.Verb = id, verb
	rep, err := d(ctx, a)
	if err != nil {
		c.log.Warn("telegram: a press could not be decided", zap.String("approval", id), zap.String("verb", verb), zap.String("by", a.By), zap.Error(err))
		c.answerQuery(ctx, q.ID, NotRecorded, false)
		return
	}
	c.answerQuery(ctx, q.ID, rep.Text, rep.Alert)
	if rep.Decided && q.Message != nil && q.Message.Date != 0 {
		c.showDecision(ctx, q, rep.Summary)
	}
}

// answerQuery answers callback query id, which stops the spinner on the
// person's button and shows text.
func (c *Connector) answerQuery(ctx context.Context, id, text string, alert bool) {
	body := map[string]any{"callback_query_id": id}
	if text = cut(text, maxAnswerText); text != "" {
		body["text"] = text
		body["show_alert"] = alert
	}
	if err := c.retry(ctx, "answerCallbackQuery", "", body); err != nil {
		// "query is too old": the press was handled before, or a minute
		// or more ago; nothing is left to stop.
		c.log.Info("telegram: could not answer a press", zap.Error(err))
	}
}

// showDecision edits the question's message: its text and summary under
// it, without the buttons (an editMessageText without reply_markup drops
// them). With no summary, only the buttons go.
func (c *Connector) showDecision(ctx context.Context, q *callbackQuery, summary string) {
	m := q.Message
	body := map[string]any{"chat_id": chatID(m.Chat.ID.String()), "message_id": m.MessageID}
	method := "editMessageReplyMarkup"
	if summary = strings.TrimSpace(summary); summary != "" {
		method = "editMessageText"
		tail := "\n\n" + summary
		text := cut(m.Text, MaxText-connectors.UTF16(tail)) + tail
		body["text"] = text
		if !c.preview {
			body["link_preview_options"] = linkPreviewOptions{IsDisabled: true}
		}
	}
	err := c.retry(ctx, method, m.Chat.ID.String(), body)
	var te *Error
	if errors.As(err, &te) && strings.Contains(strings.ToLower(te.Description), "message is not modified") {
		return // shown already: a press after the decision
	}
	if err != nil {
		c.log.Warn("telegram: could not show the decision on the question", zap.Error(err))
	}
}

// retry calls method until it succeeds, at most 3 times: after a 429 it
// waits its retry_after, after a 5xx or network error 1 s, then 2 s.
func (c *Connector) retry(ctx context.Context, method, chat string, body any) error {
	var err error
	for n := 1; ; n++ {
		_, err = c.call(ctx, method, chat, body)
		if err == nil || ctx.Err() != nil || n == 3 {
			return err
		}
		var te *Error
		wait := backoff(n)
		if errors.As(err, &te) {
			switch {
			case te.Code == http.StatusTooManyRequests && te.RetryAfter > 0:
				wait = te.RetryAfter
			case te.Code < 500 && te.Code != http.StatusRequestTimeout && te.Code != http.StatusTooManyRequests:
				return err
			}
		}
		if !c.sleep(ctx, wait) {
			return err
		}
	}
}

// cut returns s cut to at most n UTF-16 code units, ending in "…" when
// cut.
func cut(s string, n int) string {
	if connectors.UTF16(s) <= n {
		return s
	}
	var b strings.Builder
	used := 0
	for _, r := range s {
		w := 1
		if r > 0xFFFF {
			w = 2
		}
		if used+w > n-1 {
			break
		}
		b.WriteRune(r)
		used += w
	}
	return b.String() + "…"
}
