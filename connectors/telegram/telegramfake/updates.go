package telegramfake

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentwork/agentwork/connectors"
)

// The descriptions the Bot API answers for buttons, presses and edits.
const (
	// DescButtonData: a callback_data of 0 or more than 64 bytes.
	DescButtonData = "Bad Request: BUTTON_DATA_INVALID"
	// DescQueryTooOld: answerCallbackQuery for a query that was answered
	// already, is too old, or never was.
	DescQueryTooOld = "Bad Request: query is too old and response timeout expired or query ID is invalid"
	// DescNotModified: an edit that changes nothing.
	DescNotModified = "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"
	// DescEditNotFound: an edit of a message the bot did not send there.
	DescEditNotFound = "Bad Request: message to edit not found"
	// DescWebhookActive: getUpdates while a webhook is set.
	DescWebhookActive = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"
	// DescTerminated: a getUpdates that a newer one replaced.
	DescTerminated = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
)

// MaxButtonData is the most bytes a button's callback_data may hold
// (https://core.telegram.org/bots/api#inlinekeyboardbutton: "1-64 bytes").
const MaxButtonData = 64

// Button is one button of an inline keyboard
// (https://core.telegram.org/bots/api#inlinekeyboardbutton), the kinds the
// connector uses.
type Button struct {
	Text         string `json:"text"`
	CallbackData string `json:"callback_data,omitempty"`
	URL          string `json:"url,omitempty"`
}

// replyMarkup is an InlineKeyboardMarkup
// (https://core.telegram.org/bots/api#inlinekeyboardmarkup).
type replyMarkup struct {
	InlineKeyboard [][]Button `json:"inline_keyboard"`
}

// User is who presses a button: a User's id, first_name and username
// (https://core.telegram.org/bots/api#user).
type User struct {
	ID        int64
	FirstName string
	Username  string
}

// CallbackAnswer is one answerCallbackQuery call the fake accepted
// (https://core.telegram.org/bots/api#answercallbackquery).
type CallbackAnswer struct {
	QueryID   string
	Text      string
	ShowAlert bool
	// From is the id of the user who pressed.
	From int64
}

// Edit is one editMessageText or editMessageReplyMarkup call, answered or
// not (https://core.telegram.org/bots/api#editmessagetext,
// https://core.telegram.org/bots/api#editmessagereplymarkup).
type Edit struct {
	// Method is "editMessageText" or "editMessageReplyMarkup".
	Method    string
	ChatID    string
	MessageID int64
	// Text is the new text as sent (editMessageText only).
	Text string
	// Buttons is the new inline keyboard (none: the buttons are removed).
	Buttons     [][]Button
	Status      int
	Description string
}

// Sent is a message the bot sent, as a reader sees it now.
type Sent struct {
	ChatID    string
	MessageID int64
	Text      string
	Buttons   [][]Button
	Edited    bool
}

type msgKey struct {
	chat string
	id   int64
}

type sent struct {
	req     Request
	text    string
	buttons [][]Button
	edited  bool
}

type update struct {
	id   int64
	kind string // "callback_query"
	body map[string]any
}

type query struct {
	from     int64
	answered bool
}

// changed wakes whoever waits for a change. s.mu is held.
func (s *Server) changed() {
	close(s.change)
	s.change = make(chan struct{})
}

// wait calls cond under s.mu until it reports true or ctx is done.
func (s *Server) wait(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ok, ch := cond(), s.change
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// checkKeyboard returns the API's description of what is wrong with an
// inline keyboard, or "".
func checkKeyboard(rows [][]Button) string {
	for _, row := range rows {
		for _, b := range row {
			switch {
			case b.CallbackData == "" && b.URL == "":
				return "Bad Request: text buttons are unallowed in the inline keyboard"
			case b.URL == "" && len(b.CallbackData) > MaxButtonData:
				return DescButtonData
			}
		}
	}
	return ""
}

// Message returns the message id of chat as a reader sees it now.
func (s *Server) Message(chat string, id int64) (Sent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.sent[msgKey{chat, id}]
	if !ok {
		return Sent{}, false
	}
	return Sent{ChatID: chat, MessageID: id, Text: m.text, Buttons: m.buttons, Edited: m.edited}, true
}

// Press queues the update of user pressing a button that carries data on
// message id of chat (https://core.telegram.org/bots/api#callbackquery:
// {id, from, message, chat_instance, data}), whatever buttons the message
// has: a client of Telegram's own API can send any data. It returns the
// callback query's id. A message the bot did not send is given as an
// InaccessibleMessage (date 0).
func (s *Server) Press(user User, chat string, id int64, data string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastUpd++
	qid := strconv.FormatInt(4000000000000000000+s.lastUpd, 10)
	s.queries[qid] = &query{from: user.ID}
	from := map[string]any{"id": user.ID, "is_bot": false, "first_name": user.FirstName}
	if user.Username != "" {
		from["username"] = user.Username
	}
	key := msgKey{chat, id}
	var msg map[string]any
	if _, ok := s.sent[key]; ok {
		msg = s.message(key)
	} else {
		chatID, _ := strconv.ParseInt(chat, 10, 64)
		msg = map[string]any{"chat": map[string]any{"id": chatID, "type": "supergroup"}, "message_id": id, "date": 0}
	}
	cq := map[string]any{"id": qid, "from": from, "message": msg, "chat_instance": "-5012345678901234567", "data": data}
	s.updates = append(s.updates, update{id: s.lastUpd, kind: "callback_query", body: map[string]any{"update_id": s.lastUpd, "callback_query": cq}})
	s.changed()
	return qid
}

// PressButton presses the button labelled label of message id of chat as
// user (see Press), or fails when the message has no such button.
func (s *Server) PressButton(user User, chat string, id int64, label string) (string, error) {
	m, ok := s.Message(chat, id)
	if !ok {
		return "", fmt.Errorf("telegramfake: no message %d in chat %s", id, chat)
	}
	for _, row := range m.Buttons {
		for _, b := range row {
			if b.Text == label && b.CallbackData != "" {
				return s.Press(user, chat, id, b.CallbackData), nil
			}
		}
	}
	return "", fmt.Errorf("telegramfake: message %d in chat %s has no button %q (it has %v)", id, chat, label, m.Buttons)
}

// Pending returns how many updates getUpdates has not had confirmed (by
// a later call with a higher offset).
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.updates)
}

// Polls returns how many getUpdates calls arrived.
func (s *Server) Polls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

// WaitPolls waits until n getUpdates calls arrived.
func (s *Server) WaitPolls(ctx context.Context, n int) error {
	return s.wait(ctx, func() bool { return s.polls >= n })
}

// FailUpdates answers the next n getUpdates calls (-1: every one, until
// Recover) with status, as FailStatus does sends.
func (s *Server) FailUpdates(n, status int) { s.pollFail.AnswerNext(n, outage(status)) }

// RateLimitUpdates answers the next n getUpdates calls with a 429 that
// asks to wait after (whole seconds, at least 1).
func (s *Server) RateLimitUpdates(n int, after time.Duration) {
	s.pollFail.AnswerNext(n, rateLimited(seconds(after)))
}

// SetWebhook sets a webhook (as setWebhook does): getUpdates is then
// answered 409. "" deletes it.
func (s *Server) SetWebhook(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webhook = url
	s.changed()
}

// Answers returns the answerCallbackQuery calls accepted so far.
func (s *Server) Answers() []CallbackAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.answers)
}

// WaitAnswers waits until n answerCallbackQuery calls were accepted and
// returns them all.
func (s *Server) WaitAnswers(ctx context.Context, n int) ([]CallbackAnswer, error) {
	err := s.wait(ctx, func() bool { return len(s.answers) >= n })
	return s.Answers(), err
}

// Edits returns the edit calls so far, answered or not.
func (s *Server) Edits() []Edit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.edits)
}

// WaitEdits waits until n edit calls arrived and returns them all.
func (s *Server) WaitEdits(ctx context.Context, n int) ([]Edit, error) {
	err := s.wait(ctx, func() bool { return len(s.edits) >= n })
	return s.Edits(), err
}

// getUpdates answers https://core.telegram.org/bots/api#getupdates: an
// offset confirms every update below it (they are never returned again);
// with no update waiting, the call waits up to timeout seconds for one; a
// newer call ends a waiting one with 409; a set webhook makes it 409.
func (s *Server) getUpdates(r *http.Request, raw []byte) answer {
	var body struct {
		Offset         int64     `json:"offset"`
		Limit          int       `json:"limit"`
		Timeout        int       `json:"timeout"`
		AllowedUpdates *[]string `json:"allowed_updates"`
	}
	if len(raw) > 0 && json.Unmarshal(raw, &body) != nil {
		return apiError(http.StatusBadRequest, "Bad Request: can't parse JSON object")
	}
	if f, ok := s.pollFail.Next(); ok {
		s.mu.Lock()
		s.polls++
		s.changed()
		s.mu.Unlock()
		return f
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	s.changed()
	if s.webhook != "" {
		return apiError(http.StatusConflict, DescWebhookActive)
	}
	if body.Limit <= 0 || body.Limit > 100 {
		body.Limit = 100
	}
	if body.AllowedUpdates != nil {
		s.allowed = slices.Clone(*body.AllowedUpdates)
	}
	if body.Offset > 0 {
		s.updates = slices.DeleteFunc(s.updates, func(u update) bool { return u.id < body.Offset })
	}
	s.polling++
	me := s.polling
	deadline := time.NewTimer(time.Duration(max(body.Timeout, 0)) * time.Second)
	defer deadline.Stop()
	for {
		var out []map[string]any
		for _, u := range s.updates {
			if len(out) < body.Limit && (len(s.allowed) == 0 || slices.Contains(s.allowed, u.kind)) {
				out = append(out, u.body)
			}
		}
		if len(out) > 0 || body.Timeout <= 0 {
			return answer{status: http.StatusOK, body: map[string]any{"ok": true, "result": orEmpty(out)}}
		}
		ch := s.change
		s.mu.Unlock()
		expired := false
		select {
		case <-ch:
		case <-deadline.C:
			expired = true
		case <-r.Context().Done():
		case <-s.done:
		}
		s.mu.Lock()
		switch {
		case s.polling != me:
			return apiError(http.StatusConflict, DescTerminated)
		case s.webhook != "":
			return apiError(http.StatusConflict, DescWebhookActive)
		case expired || r.Context().Err() != nil || s.isClosed():
			return answer{status: http.StatusOK, body: map[string]any{"ok": true, "result": []any{}}}
		}
	}
}

func orEmpty(ups []map[string]any) any {
	if len(ups) == 0 {
		return []any{}
	}
	return ups
}

// isClosed reports whether Close was called.
func (s *Server) isClosed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// answerCallbackQuery answers
// https://core.telegram.org/bots/api#answercallbackquery: a query is
// answered once; another answer, or one to an id never given, is 400.
func (s *Server) answerCallbackQuery(_ *http.Request, raw []byte) answer {
	var body struct {
		CallbackQueryID string `json:"callback_query_id"`
		Text            string `json:"text"`
		ShowAlert       bool   `json:"show_alert"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return apiError(http.StatusBadRequest, "Bad Request: can't parse JSON object")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queries[body.CallbackQueryID]
	switch {
	case body.CallbackQueryID == "":
		return apiError(http.StatusBadRequest, "Bad Request: parameter \"callback_query_id\" is required")
	case q == nil || q.answered:
		return apiError(http.StatusBadRequest, DescQueryTooOld)
	}
	q.answered = true
	s.answers = append(s.answers, CallbackAnswer{QueryID: body.CallbackQueryID, Text: body.Text, ShowAlert: body.ShowAlert, From: q.from})
	s.changed()
	return answer{status: http.StatusOK, body: map[string]any{"ok": true, "result": true}}
}

// editMessage answers editMessageText (text) or editMessageReplyMarkup:
// the message must be the bot's in that chat; a reply_markup left out
// removes the buttons; an edit that changes nothing is 400 "message is
// not modified".
func (s *Server) editMessage(_ *http.Request, raw []byte, text bool) (a answer) {
	var body struct {
		ChatID      json.RawMessage `json:"chat_id"`
		MessageID   int64           `json:"message_id"`
		Text        *string         `json:"text"`
		ParseMode   string          `json:"parse_mode"`
		ReplyMarkup *replyMarkup    `json:"reply_markup"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return apiError(http.StatusBadRequest, "Bad Request: can't parse JSON object")
	}
	e := Edit{Method: "editMessageReplyMarkup", ChatID: chatString(body.ChatID), MessageID: body.MessageID}
	if text {
		e.Method = "editMessageText"
	}
	if body.Text != nil {
		e.Text = *body.Text
	}
	if body.ReplyMarkup != nil {
		e.Buttons = body.ReplyMarkup.InlineKeyboard
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		e.Status = a.status
		if m, ok := a.body.(map[string]any); ok {
			e.Description, _ = m["description"].(string)
		}
		s.edits = append(s.edits, e)
		s.changed()
	}()
	key := msgKey{e.ChatID, e.MessageID}
	m := s.sent[key]
	switch {
	case e.ChatID == "":
		return apiError(http.StatusBadRequest, "Bad Request: chat_id is empty")
	case m == nil:
		return apiError(http.StatusBadRequest, DescEditNotFound)
	}
	if d := checkKeyboard(e.Buttons); d != "" {
		return apiError(http.StatusBadRequest, d)
	}
	newText := m.text
	if text {
		newText = e.Text
		if body.ParseMode != "" {
			parsed, err := ParseHTML(newText)
			if err != nil || !strings.EqualFold(body.ParseMode, "HTML") {
				return apiError(http.StatusBadRequest, "Bad Request: can't parse entities")
			}
			newText = parsed
		}
		newText = strings.TrimSpace(newText)
		switch {
		case newText == "":
			return apiError(http.StatusBadRequest, "Bad Request: message text is empty")
		case connectors.UTF16(newText) > MaxText:
			return apiError(http.StatusBadRequest, "Bad Request: MESSAGE_TOO_LONG")
		}
	}
	if newText == m.text && sameKeyboard(e.Buttons, m.buttons) {
		return apiError(http.StatusBadRequest, DescNotModified)
	}
	m.text, m.buttons, m.edited = newText, e.Buttons, true
	return answer{status: http.StatusOK, body: map[string]any{"ok": true, "result": s.message(key)}}
}

func sameKeyboard(a, b [][]Button) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	return reflect.DeepEqual(a, b)
}

// secretTokenRE is what setWebhook's secret_token may hold
// (https://core.telegram.org/bots/api#setwebhook).
var secretTokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// setWebhook answers https://core.telegram.org/bots/api#setwebhook.
func (s *Server) setWebhook(_ *http.Request, raw []byte) answer {
	var body struct {
		URL         string `json:"url"`
		SecretToken string `json:"secret_token"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return apiError(http.StatusBadRequest, "Bad Request: can't parse JSON object")
	}
	if body.SecretToken != "" && !secretTokenRE.MatchString(body.SecretToken) {
		return apiError(http.StatusBadRequest, "Bad Request: secret token contains unallowed characters")
	}
	s.SetWebhook(body.URL)
	desc := "Webhook was set"
	if body.URL == "" {
		desc = "Webhook was deleted"
	}
	return answer{status: http.StatusOK, body: map[string]any{"ok": true, "result": true, "description": desc}}
}

// deleteWebhook answers https://core.telegram.org/bots/api#deletewebhook.
func (s *Server) deleteWebhook() answer {
	s.SetWebhook("")
	return answer{status: http.StatusOK, body: map[string]any{"ok": true, "result": true, "description": "Webhook was deleted"}}
}
