package agentwork

import (
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// Run is one execution of a request, as gates and observers see it.
type Run struct {
	// ID identifies the run (the runid of its events). A request retried
	// after a crash keeps its run id.
	ID string
	// Request is the work asked for.
	Request Request
	// Envelope is the request's CloudEvents envelope.
	Envelope bus.Event
	// Attempt counts model attempts of this request, from 1.
	Attempt int
	// Started is when the run began.
	Started time.Time
	// Targets are the connectors the notification goes to.
	Targets []string
	// Overlap is the run's overlap mode (OverlapSkip, OverlapQueue or
	// OverlapAllow): the policy's Overlap.Mode unless an input gate set
	// another for this run.
	Overlap string
	// Notice is what the output gates decided to deliver (nil: nothing).
	Notice *Notice
	// Output is the model's output, once the model answered.
	Output *Output
	// Result is the data of the run's event, once it ended.
	Result *Result

	release func() // frees input-gate leases; called once, before the event
	emitErr error  // the event could not be published

	// resumed is the approval whose decision resumed this run (from its
	// parked checkpoint); parked the one it parks on (a gated tool call
	// waits); approvals the decided approvals of its calls.
	resumed   string
	parked    string
	approvals []CallApproval

	// calls are the run's model calls so far (see recordedModel);
	// flushing says its memory flush is under way.
	calls    modelCalls
	flushing bool
}

// Result is the data of every run event (agentwork.<source>.done|skip|error).
// Fields that do not apply to an outcome are omitted.
type Result struct {
	Source  string `json:"source"`
	Name    string `json:"name"`
	Outcome string `json:"outcome"`

	// skip
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`

	// error
	Class string `json:"class,omitempty"`
	Error string `json:"error,omitempty"`

	// done: the text actually sent, where it went, and the model's side.
	Text            string   `json:"text,omitempty"`
	Urgency         string   `json:"urgency,omitempty"`
	Targets         []string `json:"targets,omitempty"`
	NotificationIDs []string `json:"notification_ids,omitempty"`
	// Truncated: Text is a reply the model's token limit cut short.
	Truncated bool   `json:"truncated,omitempty"`
	Reply     string `json:"reply,omitempty"`
	// StopReason is the provider's reason the last reply ended ("stop",
	// "length", "max_tokens", ...); ReplyTruncated says it was the token
	// limit, so Reply is incomplete.
	StopReason     string       `json:"stop_reason,omitempty"`
	ReplyTruncated bool         `json:"reply_truncated,omitempty"`
	Model          string       `json:"model,omitempty"`
	Usage          *model.Usage `json:"usage,omitempty"`
	// ToolCalls are the run's tool calls, in order, each with its outcome,
	// duration and sizes; arguments, results and errors redacted of the
	// runner's secrets and cut to RecordMax bytes. On every outcome after
	// the model ran.
	ToolCalls []tools.Call `json:"tool_calls,omitempty"`
	// ToolCallsOmitted counts the calls the run made that ToolCalls leaves
	// out, so that the event fits the bus's max payload: those between the
	// first and the last ones it lists (at most RecordFirst and
	// RecordLast). ToolCallsDropped counts the calls the model's replies
	// asked for past what one reply may make (tools.Limits.PerReply),
	// which ran nothing. ToolCallsNote says so when either is not 0.
	ToolCallsOmitted int    `json:"tool_calls_omitted,omitempty"`
	ToolCallsDropped int    `json:"tool_calls_dropped,omitempty"`
	ToolCallsNote    string `json:"tool_calls_note,omitempty"`
	// ModelCalls are the run's model calls, in order, each numbered in the
	// run and with its model, tokens, duration, stop reason and the tool
	// calls it asked for, or its error; those of its memory flush last (ModelCall.Flush). Those
	// of a try before a retry, a crash or an approval are listed when the
	// run went on from the checkpoint that kept them. ModelCallsOmitted
	// counts the calls left out, so that the event fits the bus's max
	// payload: those between the first and the last ones it lists (at
	// most RecordFirst and RecordLast). On every outcome after the model
	// ran.
	ModelCalls        []ModelCall `json:"model_calls,omitempty"`
	ModelCallsOmitted int         `json:"model_calls_omitted,omitempty"`
	// Flush is the run's memory flush, if one ran (its tool calls are the
	// last of ToolCalls).
	Flush *FlushResult `json:"flush,omitempty"`
	// Approvals are the approvals of the run's gated tool calls (see
	// runner.approval): who decided what on which call.
	Approvals []CallApproval `json:"approvals,omitempty"`

	Attempt     int               `json:"attempt,omitempty"`
	DurationMS  int64             `json:"duration_ms"`
	ScheduledAt *time.Time        `json:"scheduled_at,omitempty"`
	Manual      bool              `json:"manual,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}
