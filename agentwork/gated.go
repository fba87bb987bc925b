package agentwork

// Gated tool calls: a call of a tool the run's approval list names waits
// for a person. The run asks (approval.Service), parks on its conversation
// checkpoint (the call held, not made), and ends the message's handling;
// the approval, once decided, publishes the run's request again (its
// Resume), and the runner goes on from the checkpoint.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// WithApprovals gives the runner the approvals service its gated tool
// calls ask through (runner.approval). Without it, a gated call is
// refused: nobody could be asked.
func WithApprovals(s *approval.Service) Option { return func(r *Runner) { r.approvals = s } }

// gated is the union of approval lists: each level adds to the one above,
// so that no source, job or task can take a gate away.
func gated(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, g := range l {
			if !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
	}
	return out
}

// CallApproval is the approval of a gated tool call, as the run's event
// has it.
type CallApproval struct {
	// ID is the approval's id (agentwork approvals show <id>).
	ID string `json:"id"`
	// Tool is the tool called; Call the call's index among the run's
	// tool calls.
	Tool string `json:"tool"`
	Call int    `json:"call"`
	// State is approved, rejected, expired or cancelled; Verdict what the
	// call did: approve (made) or reject (not made), or fail.
	State   string    `json:"state"`
	Verdict string    `json:"verdict,omitempty"`
	By      string    `json:"by,omitempty"`
	Comment string    `json:"comment,omitempty"`
	At      time.Time `json:"at,omitzero"`
}

// resumedOutcome makes the type of the request an approval publishes to
// resume a parked run: agentwork.<source>.resumed.
const resumedOutcome = "resumed"

// approvalGate is the tools.Gate of a run: it holds the calls of the
// tools its approval list names, asks for each once, and answers with the
// decision once there is one.
type approvalGate struct {
	r     *Runner
	run   *Run
	scope tools.Scope
	flush bool // the run's memory flush: gated calls are refused
}

var _ tools.Gate = approvalGate{}

// Gates implements tools.Gate.
func (g approvalGate) Gates(name string) bool {
	return name != tools.NotifyName && g.scope.Allows(name)
}

// Check implements tools.Gate.
func (g approvalGate) Check(ctx context.Context, tc model.ToolCall, index int) (tools.Decision, error) {
	r, run := g.r, g.run
	if g.flush {
		return tools.Decision{Refused: "not run: calls of " + tc.Name + " wait for a person's approval (runner.approval), which the silent memory flush does not ask for"}, nil
	}
	if r.approvals == nil {
		return tools.Decision{Refused: "not run: calls of " + tc.Name + " need a person's approval (runner.approval), and this runtime has no approvals to ask with"}, nil
	}
	cfg := r.cfg.Approvals
	targets := r.questionTargets(run.Request.Source)
	again := run.Request
	again.Resumes, again.Approval = run.Request.ID, nil
	data, err := json.Marshal(again)
	if err != nil {
		return tools.Decision{}, err
	}
	src, name := run.Request.Source, run.Request.Name
	a, _, err := r.approvals.Ask(ctx, approval.Request{
		ID: approval.ToolCallID(run.ID, index), Kind: approval.KindToolCall,
		Run: run.ID, Source: src, Name: name,
		Question: fmt.Sprintf("The %s run %q wants to call the tool %s. Allow this call?", src, name, tc.Name),
		Tool:     tc.Name, Args: r.redact(tc.Arguments),
		Targets: targets, Approvers: cfg.Approvers, Requester: run.Request.Credential, Timeout: cfg.Timeout, OnTimeout: approval.Verdict(cfg.OnTimeout),
		Resume: &approval.Resume{Subject: r.bus.Subjects.Request(src, name), Type: bus.TypeOf(src, resumedOutcome), Data: data},
	})
	if errors.Is(err, approval.ErrInvalid) || errors.Is(err, approval.ErrMismatch) {
		// Asking can never work as configured (no targets, say), or the
		// call cannot be shown whole (its arguments are too long), or the
		// approval of this index is another call's: the call is not
		// made, and the model is told why.
		return tools.Decision{Refused: fmt.Sprintf("not run: calls of %s need a person's approval, and the question could not be asked: %v", tc.Name, err)}, nil
	}
	if err != nil {
		return tools.Decision{}, fmt.Errorf("ask for the approval of %s: %w", tc.Name, err)
	}
	if a.State == approval.Pending {
		run.parked = a.ID
		return tools.Decision{Wait: true}, nil
	}
	ca := CallApproval{ID: a.ID, Tool: tc.Name, Call: index, State: string(a.State)}
	if d := a.Decision; d != nil {
		ca.Verdict, ca.By, ca.Comment, ca.At = string(d.Verdict), d.By, cutRecord(r.redact(d.Comment)), d.At
	}
	if !slices.ContainsFunc(run.approvals, func(c CallApproval) bool { return c.ID == a.ID }) {
		run.approvals = append(run.approvals, ca)
	}
	return refusal(a, tc.Name)
}

// questionTargets are where the question of a gated call of a run of
// source goes: runner.approvals.targets, else the source's default
// targets, else runner.targets, else every connector. Never the
// request's own targets: whoever sent the request (a webhook caller
// names its targets) would be sent the means to approve its own call —
// the buttons and signed links anyone holding them may press.
func (r *Runner) questionTargets(source string) []string {
	if t := r.cfg.Approvals.Targets; len(t) > 0 {
		return t
	}
	pol, _ := r.policy(source)
	return r.targetsFor(Request{}, pol)
}

// refusal is what the decided (or cancelled) approval a makes of its call.
func refusal(a approval.Approval, tool string) (tools.Decision, error) {
	at := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }
	d := a.Decision
	switch {
	case a.State == approval.Cancelled:
		return tools.Decision{Refused: fmt.Sprintf("not run: the approval of this call was cancelled at %s (%s)", at(a.CancelledAt), a.CancelReason)}, nil
	case d == nil:
		return tools.Decision{}, fmt.Errorf("approval %s is %s without a decision", a.ID, a.State)
	case d.Verdict == approval.Approve:
		return tools.Decision{}, nil
	case d.Verdict == approval.Fail:
		return tools.Decision{}, &model.Error{Class: model.ClassPermanent, Message: fmt.Sprintf(
			"nobody decided on the call of %s (approval %s) by %s, and runner.approvals.on_timeout is fail", tool, a.ID, at(a.Deadline))}
	case a.State == approval.Expired:
		return tools.Decision{Refused: fmt.Sprintf("not run: nobody decided on this call by %s, so it was rejected automatically (approval %s)", at(a.Deadline), a.ID)}, nil
	}
	why := fmt.Sprintf("a person refused this call: rejected by %s at %s", d.By, at(d.At))
	if d.Name != "" {
		why += fmt.Sprintf(" (who gave the name %q)", d.Name)
	}
	if d.Comment != "" {
		why += fmt.Sprintf(" (comment: %s)", d.Comment)
	}
	return tools.Decision{Refused: why + "; it was not made. Do not try it again in this run unless asked"}, nil
}

// resumedRequest returns the request of the run that the approval id
// resumes, as the run asked it to be published again (from the approval's
// record, not the message: what a resume message says is only which
// approval was decided).
func (r *Runner) resumedRequest(ctx context.Context, msg Request) (Request, error) {
	if r.approvals == nil {
		return msg, nil
	}
	a, err := r.approvals.Get(ctx, msg.Approval.ID)
	if err != nil {
		return Request{}, err
	}
	if a.Resume == nil || a.Kind != approval.KindToolCall || a.Source != msg.Source || a.Name != msg.Name {
		return Request{}, fmt.Errorf("approval %s is not a tool call of %s %q", a.ID, msg.Source, msg.Name)
	}
	var req Request
	if err := json.Unmarshal(a.Resume.Data, &req); err != nil {
		return Request{}, fmt.Errorf("approval %s: its run's request: %w", a.ID, err)
	}
	if req.Resumes != msg.Resumes {
		return Request{}, fmt.Errorf("approval %s resumes request %s, not %s", a.ID, req.Resumes, msg.Resumes)
	}
	req.ID, req.Source, req.Name = req.Resumes, a.Source, a.Name
	req.Approval = msg.Approval
	return req, req.Validate()
}

// reparked is c parked on approval id again (a resume that could not go on
// puts it back as it found it).
func (r *Runner) reparked(c claim, id string) claim {
	c.Parked = id
	return c
}
