package approval

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentwork/agentwork/connectors"
)

// Kind says what asks.
type Kind string

// The kinds of approvals.
const (
	// KindWorkflowStep is a workflow's approval step.
	KindWorkflowStep Kind = "workflow_step"
	// KindToolCall is a tool call that waits for a person.
	KindToolCall Kind = "tool_call"
)

// State is where an approval is: pending until decided, then one of the
// others for good.
type State string

// The states of an approval.
const (
	Pending   State = "pending"
	Approved  State = "approved"
	Rejected  State = "rejected"
	Expired   State = "expired"
	Cancelled State = "cancelled"
)

// Ended reports whether s is final (anything but pending).
func (s State) Ended() bool { return s != Pending }

// Valid reports whether s is one of the states.
func (s State) Valid() bool {
	switch s {
	case Pending, Approved, Rejected, Expired, Cancelled:
		return true
	}
	return false
}

// Verdict is an answer: approve or reject (a person), or fail (only as
// OnTimeout: the work fails when nobody answered).
type Verdict string

// The verdicts.
const (
	Approve Verdict = "approve"
	Reject  Verdict = "reject"
	Fail    Verdict = "fail"
)

// Deciders that are not a person's chat id (By).
const (
	// ByAdmin is the HTTP API's admin token.
	ByAdmin = "admin"
	// ByLink is a signed link (its page's POST).
	ByLink = "link"
	// ByTimeout is the deadline (expired).
	ByTimeout = "timeout"
)

// Decision is who decided what, when.
type Decision struct {
	// Verdict is approve or reject; for an expired approval, its
	// OnTimeout (approve, reject or fail): what the work does.
	Verdict Verdict `json:"verdict"`
	// By is who decided: a chat user ("telegram:123456789"), ByAdmin,
	// ByLink, ByTimeout, or another name a caller of Decide gives
	// ("token:ci").
	By string `json:"by"`
	// Name is a name the decider typed on the link's page: shown as
	// given, not proof of anything.
	Name string `json:"name,omitempty"`
	// Comment is the decider's comment, if any.
	Comment string    `json:"comment,omitempty"`
	At      time.Time `json:"at"`
}

// Resume is what an approval publishes once decided (approved, rejected
// or expired; not when cancelled): how the work that waits learns the
// answer. The approval package knows nothing of its asker; the workflow
// engine gives a command to its own stream, the runner its request.
//
// The message is a CloudEvents envelope (bus.Event) on Subject with id
// and Nats-Msg-Id MsgID, type Type, subject the approval's id, runid the
// approval's Run, and data: Data (a JSON object, or empty for {}) with
// the key "approval" set to the Outcome. It is published once the
// decision is stored, as often as a crash makes it necessary, always with
// the same MsgID (the stream's duplicate window stores it once).
type Resume struct {
	// Subject is where to publish (a subject of a stream: the message
	// must be stored). Required.
	Subject string `json:"subject"`
	// Type is the envelope's type. Default "agentwork.approval.resume".
	Type string `json:"type,omitempty"`
	// MsgID is the envelope's id and Nats-Msg-Id. Default
	// "approval.<id>.resume".
	MsgID string `json:"msg_id,omitempty"`
	// Data is a JSON object given back with the outcome added under
	// "approval".
	Data json.RawMessage `json:"data,omitempty"`
}

// Outcome is the decision as a Resume carries it (under "approval").
type Outcome struct {
	// ID is the approval's id.
	ID string `json:"id"`
	// State is approved, rejected or expired.
	State State `json:"state"`
	// Verdict is what the work does: approve, reject, or (expired with
	// on_timeout fail) fail.
	Verdict Verdict   `json:"verdict"`
	By      string    `json:"by"`
	Name    string    `json:"name,omitempty"`
	Comment string    `json:"comment,omitempty"`
	At      time.Time `json:"at"`
}

// Approval is the record of one approval.
type Approval struct {
	// ID is derived from what asks (see WorkflowStepID, ToolCallID), so
	// asking twice is one approval: 32 hex digits.
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
	// Run is the asker's run id (a workflow run, a runner run); Step the
	// workflow step; Source and Name the work's ("workflow"/<workflow>,
	// "heartbeat"/"default", "cron"/<job>).
	Run    string `json:"run,omitempty"`
	Step   string `json:"step,omitempty"`
	Source string `json:"source,omitempty"`
	Name   string `json:"name,omitempty"`
	// Question is what the people asked read.
	Question string `json:"question"`
	// Tool and Args are the tool call waiting (KindToolCall): the tool's
	// name and its arguments as JSON text, whole, secrets cut out (a
	// call whose arguments are longer than Config.ArgsMax is not asked
	// about). CallHash binds the approval to that call: the hex
	// SHA-256 of the tool and the arguments as asked.
	Tool     string `json:"tool,omitempty"`
	Args     string `json:"args,omitempty"`
	CallHash string `json:"call_hash,omitempty"`
	// Targets are where the question went (connector targets).
	Targets []string `json:"targets"`
	// Approvers, if set, are who may decide ("telegram:123456789",
	// "slack:U024BE7LH", "link" for anyone holding the question's signed
	// links); anyone else gets ErrNotAllowed. The admin (HTTP API's admin
	// token, the CLI) may always decide. Empty: anyone who can reach a
	// target, and the links.
	Approvers []string `json:"approvers,omitempty"`
	// Requester, if set, is the credential (a webhook or MCP token's
	// name) whose work asked: it may never decide the approval itself.
	Requester string `json:"requester,omitempty"`
	// Deadline is when it expires unless decided.
	Deadline time.Time `json:"deadline"`
	// OnTimeout is the verdict at the deadline: reject (default),
	// approve or fail.
	OnTimeout Verdict `json:"on_timeout"`
	// RemindAt, if set, is when the question is sent once more if still
	// pending; Reminded says it was.
	RemindAt time.Time `json:"remind_at,omitzero"`
	Reminded bool      `json:"reminded,omitempty"`
	State    State     `json:"state"`
	// Decision is set once decided (approved, rejected, expired).
	Decision *Decision `json:"decision,omitempty"`
	// CancelReason and CancelledAt are set when cancelled.
	CancelReason string    `json:"cancel_reason,omitempty"`
	CancelledAt  time.Time `json:"cancelled_at,omitzero"`
	// Resume is what is published when decided (nil: nothing but the
	// event).
	Resume *Resume `json:"resume,omitempty"`
	// Asked: the question was queued to every target and the requested
	// event published. Finished: the work after the decision (Resume,
	// event, expiry notices) was done.
	Asked     bool      `json:"asked,omitempty"`
	Finished  bool      `json:"finished,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Receipts are the delivery receipts of the question by target, as
	// far as known (a Telegram message id, to edit the message later).
	// Nothing fills them yet: a button press carries its own message.
	Receipts map[string]connectors.Receipt `json:"receipts,omitempty"`
}

// ByCredential is how a decision made with a credential (a webhook or
// MCP token named name, through the API or the MCP server) names its
// decider: "token:<name>".
func ByCredential(name string) string { return "token:" + name }

// Allowed reports whether by may decide a: never the credential whose
// work asked (nobody approves their own request); else Approvers is
// empty, names by, or by is ByAdmin.
func (a Approval) Allowed(by string) bool {
	if a.Requester != "" && by == ByCredential(a.Requester) {
		return false
	}
	if len(a.Approvers) == 0 || by == ByAdmin {
		return true
	}
	for _, ap := range a.Approvers {
		if ap == by {
			return true
		}
	}
	return false
}

// Request is what Ask needs.
type Request struct {
	// ID identifies the approval: the same ID asked twice is one
	// approval. Required: WorkflowStepID or ToolCallID derive it.
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
	// Run, Step, Source, Name: see Approval.
	Run    string `json:"run,omitempty"`
	Step   string `json:"step,omitempty"`
	Source string `json:"source,omitempty"`
	Name   string `json:"name,omitempty"`
	// Question is the text people read. Required.
	Question string `json:"question"`
	// Tool and Args (JSON) are the tool call that waits (KindToolCall);
	// the record keeps Args whole with secrets cut out. Args longer than
	// Config.ArgsMax (secrets cut out) are refused (ErrInvalid): a
	// person could not be shown what they approve. Asking again with the
	// same ID and another Tool or Args is ErrMismatch.
	Tool string `json:"tool,omitempty"`
	Args string `json:"args,omitempty"`
	// Targets are the connector targets the question goes to (at least
	// one: nobody else would know to answer).
	Targets []string `json:"targets"`
	// Approvers: see Approval.
	Approvers []string `json:"approvers,omitempty"`
	// Requester: see Approval (the request's credential, if any).
	Requester string `json:"requester,omitempty"`
	// Timeout is how long it waits from now. Default Config.Timeout.
	Timeout time.Duration `json:"timeout,omitempty"`
	// OnTimeout is the verdict at the deadline. Default reject.
	OnTimeout Verdict `json:"on_timeout,omitempty"`
	// Reminder, if set, sends the question once more this long after it
	// was asked, if still pending; it must be shorter than Timeout.
	Reminder time.Duration `json:"reminder,omitempty"`
	// Resume is what to publish once decided.
	Resume *Resume `json:"resume,omitempty"`
}

// WorkflowStepID is the id of the approval of a workflow run's step at an
// attempt.
func WorkflowStepID(run, step string, attempt int) string {
	return derive(string(KindWorkflowStep), run, step, strconv.Itoa(attempt))
}

// ToolCallID is the id of the approval of a runner run's tool call (its
// index among the run's tool calls).
func ToolCallID(run string, call int) string {
	return derive(string(KindToolCall), run, strconv.Itoa(call))
}

func derive(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:16])
}

// Filter selects approvals for List. Zero fields select all.
type Filter struct {
	State State
	// Limit bounds the approvals returned, the newest first. Default 100.
	Limit int
}

// Errors of the API.
var (
	// ErrNoApproval: no approval of that id (never asked, or expired
	// from the bucket: bus.ApprovalTTL after it ended).
	ErrNoApproval = errors.New("approval: no such approval")
	// ErrNotAllowed: the approval names its approvers, and the decider
	// is not one of them.
	ErrNotAllowed = errors.New("approval: not allowed to decide")
	// ErrExpired: the approval expired before this answer.
	ErrExpired = errors.New("approval: expired")
	// ErrCancelled: the approval was cancelled (its run was).
	ErrCancelled = errors.New("approval: cancelled")
	// ErrInvalid: a request or an answer is malformed (the error says
	// what is wrong).
	ErrInvalid = errors.New("approval: invalid")
	// ErrMismatch: Ask with the id of an approval of another call (its
	// tool or its arguments differ): the approval is bound to the call
	// it asked about, and its decision is never one for another.
	ErrMismatch = errors.New("approval: the id is that of another call")
)

// ConflictError is the answer to a verdict that differs from the one
// already recorded: someone else decided first.
type ConflictError struct {
	ID       string
	State    State
	Decision Decision
}

func (e *ConflictError) Error() string {
	d := e.Decision
	return fmt.Sprintf("approval %s was already %s by %s at %s", e.ID, e.State, d.By, d.At.UTC().Format(time.RFC3339))
}
