package connectors

import "context"

// Buttons is an optional capability: a connector whose ShowsButtons
// reports true shows a Notification's Approval as buttons a person
// presses (Telegram's inline keyboard), so whoever asks does not append
// the actions' links to the text for it. A connector without it, or
// reporting false, gets the links in the text.
type Buttons interface {
	ShowsButtons() bool
}

// Answers is an optional capability: a connector that receives people's
// answers to the questions it showed as buttons (see Buttons).
//
// Answer blocks, receiving presses and handing each to d, until ctx is
// done; then it returns nil promptly. It returns an error only for a
// condition that will not pass by itself (a bad token, a webhook set on a
// Telegram bot that is asked to poll). It calls d from one goroutine, one
// answer at a time. Run one Answer per bot: the platforms deliver each
// press to one receiver, and two receivers of one bot take turns (or, on
// Telegram, evict each other).
//
// A press may be handed to d more than once (after a crash between
// handling it and telling the platform so), so d must be idempotent: the
// same person's same verb again returns the recorded decision.
type Answers interface {
	Answer(ctx context.Context, d Decider) error
}

// AnswersConfig is the config side of Answers, for checks made without
// building the connector (config check): a connector type whose connector
// receives answers has a config that implements it. AnswersAs returns
// the prefix of the ids of the people who answer through it, as
// approvers are written ("telegram" for "telegram:123456789").
type AnswersConfig interface {
	AnswersAs() string
}

// Decider decides an approval from one press and says what to show the
// person who pressed. An error means the answer could not be recorded
// now (the bus is away); the connector tells the person to try again.
// A person who may not decide, an unknown or closed approval, a conflict
// with an earlier decision: all are a Reply, not an error.
type Decider func(ctx context.Context, a Answer) (Reply, error)

// Answer is one press of a button of an approval's question.
type Answer struct {
	// Connector is the name of the connector that received it.
	Connector string `json:"connector"`
	// ApprovalID and Verb are what the button carries (Prompt.ID and an
	// Action's Verb).
	ApprovalID string `json:"approval_id"`
	Verb       string `json:"verb"`
	// By is who pressed, as approvers are written: "telegram:<user id>".
	// It comes from the platform, not from the person. ByName is their
	// display name, for showing only: anyone can choose any name.
	By     string `json:"by"`
	ByName string `json:"by_name,omitempty"`
	// Chat and MessageID are where the pressed button is (a Telegram chat
	// id and message_id), "" when the platform no longer says. A decider
	// may check them against the receipts of the question: a client of
	// the platform's own API can send any button data for any message the
	// bot sent it.
	Chat      string `json:"chat,omitempty"`
	MessageID string `json:"message_id,omitempty"`
}

// Reply is what the connector shows after a press.
type Reply struct {
	// Text is the short answer the person sees at once (Telegram shows
	// at most 200 characters, as a toast): "Approved", "You may not decide
	// this". Empty: nothing is shown but the press is acknowledged.
	Text string `json:"text,omitempty"`
	// Alert shows Text as a dialog the person must dismiss rather than
	// a toast: for a refusal ("not allowed") that must not go unseen.
	Alert bool `json:"alert,omitempty"`
	// Decided: the approval is decided (now or earlier); the connector
	// removes the buttons and shows Summary under the question, so every
	// reader of the chat sees the outcome.
	Decided bool `json:"decided,omitempty"`
	// Summary says what was decided, by whom, when: "✅ Approved by Ana
	// at 14:02".
	Summary string `json:"summary,omitempty"`
}
