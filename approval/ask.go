package approval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/internal/secret"
)

// maxQuestion bounds a question's text (bytes).
const maxQuestion = 4096

// previewMax bounds the arguments a chat question shows (bytes): chat
// messages are short (Telegram's hold 4096 characters). The rest is on
// the links' page and in approvals show.
const previewMax = 1500

func (s *Service) ask(ctx context.Context, r Request) (Approval, bool, error) {
	a, err := s.newApproval(r)
	if err != nil {
		return Approval{}, false, err
	}
	created := true
	want := a
	a, rev, err := s.write(ctx, a, 0, func(cur *Approval, _ bool) (bool, error) {
		created = false
		return false, sameCall(*cur, want)
	})
	if err != nil {
		return Approval{}, false, err
	}
	if err := s.at("ask.recorded", a.ID); err != nil {
		return a, created, err
	}
	if a.State.Ended() {
		if !a.Finished {
			a, err = s.finish(ctx, a, rev)
		}
		return a, created, err
	}
	if err := s.arm(ctx, a); err != nil {
		return a, created, err
	}
	if err := s.at("ask.armed", a.ID); err != nil {
		return a, created, err
	}
	if !a.Asked {
		a, err = s.sendQuestion(ctx, a, rev)
	}
	return a, created, err
}

// newApproval checks r and makes the pending approval it asks for.
func (s *Service) newApproval(r Request) (Approval, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !bus.ValidToken(r.ID) || len(r.ID) > maxID {
		bad("id %q: want 1-%d characters of a-z, 0-9, _ and - (WorkflowStepID, ToolCallID)", r.ID, maxID)
	}
	switch r.Kind {
	case KindWorkflowStep, KindToolCall:
	default:
		bad("kind %q: want workflow_step or tool_call", r.Kind)
	}
	if strings.TrimSpace(r.Question) == "" {
		bad("question is empty: say what the person approves")
	}
	if len(r.Targets) == 0 {
		bad("no targets: nobody would be asked (give the connectors that carry the question)")
	}
	for i, t := range r.Targets {
		if err := connectors.CheckTarget(fmt.Sprintf("targets[%d]", i), t); err != nil {
			errs = append(errs, err)
			continue
		}
		if name, _ := connectors.SplitTarget(t); len(s.cfg.Connectors) > 0 && !slices.Contains(s.cfg.Connectors, name) {
			bad("targets[%d]: no connector named %q (connectors: %s)", i, name, strings.Join(s.cfg.Connectors, ", "))
		}
	}
	for i, ap := range r.Approvers {
		if ap == ByLink || ap == ByAdmin {
			continue
		}
		if c, id, ok := strings.Cut(ap, ":"); !ok || c == "" || id == "" {
			bad("approvers[%d]: %q: want platform:user-id (telegram:123456789), link or admin", i, ap)
		}
	}
	timeout := r.Timeout
	if timeout < 0 {
		bad("timeout %s: must not be negative", timeout)
	}
	if timeout == 0 {
		timeout = s.cfg.Timeout
	}
	onTimeout := r.OnTimeout
	switch onTimeout {
	case "":
		onTimeout = Reject
	case Approve, Reject, Fail:
	default:
		bad("on_timeout %q: want reject, approve or fail", onTimeout)
	}
	if r.Reminder < 0 || (r.Reminder > 0 && r.Reminder >= timeout) {
		bad("reminder %s: want a duration shorter than the timeout (%s)", r.Reminder, timeout)
	}
	var resume *Resume
	if r.Resume != nil {
		rc := *r.Resume
		if rc.Subject == "" {
			bad("resume.subject is empty: say where to publish the decision")
		}
		if len(rc.Data) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(rc.Data, &obj); err != nil {
				bad("resume.data: want a JSON object: %v", err)
			}
		}
		if rc.Type == "" {
			rc.Type = ResumeType
		}
		if rc.MsgID == "" {
			rc.MsgID = "approval." + r.ID + ".resume"
		}
		resume = &rc
	}
	var args string
	if r.Args != "" {
		var whole int
		args, whole = secret.Cut(r.Args, s.cfg.ArgsMax, false, s.cfg.Secrets)
		if len(args) < whole {
			bad("arguments: %d bytes (secrets cut out), more than the %d a person can be shown whole to approve: the call is not asked about; make it with shorter arguments", whole, s.cfg.ArgsMax)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Approval{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	now := s.now().UTC()
	a := Approval{
		ID: r.ID, Kind: r.Kind, Run: r.Run, Step: r.Step, Source: r.Source, Name: r.Name,
		Question: s.cut(r.Question, maxQuestion), Tool: r.Tool, Args: args,
		Targets: slices.Clone(r.Targets), Approvers: slices.Clone(r.Approvers), Requester: r.Requester,
		Deadline: now.Add(timeout), OnTimeout: onTimeout, State: Pending, Resume: resume, CreatedAt: now,
	}
	if r.Tool != "" || r.Args != "" {
		a.CallHash = callHash(r.Tool, r.Args)
	}
	if r.Reminder > 0 {
		a.RemindAt = now.Add(r.Reminder)
	}
	return a, nil
}

// callHash is the hex SHA-256 of a tool call: its tool and arguments.
func callHash(tool, args string) string {
	h := sha256.Sum256([]byte("agentwork tool call\x00" + tool + "\x00" + args))
	return hex.EncodeToString(h[:])
}

// sameCall says whether the approval cur, found under want's id, is one of
// the same call: nil, or an error wrapping ErrMismatch. A record written
// before approvals kept the hash is compared by its tool alone.
func sameCall(cur, want Approval) error {
	if cur.Kind == want.Kind && cur.Tool == want.Tool && (cur.CallHash == "" || cur.CallHash == want.CallHash) {
		return nil
	}
	return fmt.Errorf("%w: approval %s was asked for a call of %q with other arguments; its decision is not for this call", ErrMismatch, cur.ID, cur.Tool)
}

// cut cuts the secrets out of text, then cuts it to max bytes with a note.
func (s *Service) cut(text string, max int) string {
	kept, whole := secret.Cut(text, max, false, s.cfg.Secrets)
	if len(kept) < whole {
		kept += fmt.Sprintf(" … (cut: %d of %d bytes)", len(kept), whole)
	}
	return kept
}

// ResumeType is the default type of a Resume's envelope.
const ResumeType = "agentwork.approval.resume"

// timerKey is the time engine's key of approval id: its reminder and
// deadline.
func timerKey(id string) string { return "approval." + id }

// decideKey is the key of the timer a Decide of approval id sets to fire
// at once, a key of its own: a fire of the approval's other timer,
// handled while the Decide is under way, arms that one again, and with
// one key for both it replaced the Decide's (which then never finished
// a decision whose Decide died after its write).
func decideKey(id string) string { return "approval." + id + ".decide" }

// timerData is an approval timer's payload: which approval, and why it
// was set (deadline, remind, decide).
type timerData struct {
	ID  string `json:"id"`
	Why string `json:"why"`
}

// next is when a pending approval's timer is due: its reminder, if not
// sent yet, else its deadline.
func (a Approval) next() (time.Time, string) {
	if !a.RemindAt.IsZero() && !a.Reminded && a.RemindAt.Before(a.Deadline) {
		return a.RemindAt, "remind"
	}
	return a.Deadline, "deadline"
}

// arm sets the approval's timer to its next due time.
func (s *Service) arm(ctx context.Context, a Approval) error {
	at, why := a.next()
	return s.setTimer(ctx, a.ID, at, why)
}

func (s *Service) setTimer(ctx context.Context, id string, at time.Time, why string) error {
	raw, err := json.Marshal(timerData{ID: id, Why: why})
	if err != nil {
		return err
	}
	key := timerKey(id)
	if why == "decide" {
		key = decideKey(id)
	}
	if err := s.timers.Set(ctx, key, at, raw); err != nil {
		return fmt.Errorf("approval %s: arm its timer: %w", id, err)
	}
	return nil
}

// sendQuestion queues the question to every target, publishes the
// requested event, and marks the approval asked.
func (s *Service) sendQuestion(ctx context.Context, a Approval, rev uint64) (Approval, error) {
	if err := s.notify(ctx, a, "", s.questionText(a, "")); err != nil {
		return a, err
	}
	if err := s.at("ask.sent", a.ID); err != nil {
		return a, err
	}
	if err := s.emit(ctx, a, "requested"); err != nil {
		return a, err
	}
	next := a
	next.Asked = true
	a, _, err := s.write(ctx, next, rev, func(cur *Approval, found bool) (bool, error) {
		if !found || cur.Asked {
			return false, nil
		}
		cur.Asked = true
		return true, nil
	})
	return a, err
}

// notify queues text to each of a's targets as notification kind ("" the
// question, ".reminder", ".expired"): with the approval's prompt when a
// is pending (buttons where the connector shows them).
func (s *Service) notify(ctx context.Context, a Approval, kind, text string) error {
	var prompt *connectors.Prompt
	if a.State == Pending {
		p := s.prompt(a)
		prompt = &p
		text += p.Links()
	}
	var errs []error
	for _, t := range a.Targets {
		n := connectors.Notification{
			ID: connectors.NotificationID("approval."+a.ID, kind, t), RunID: a.Run, Source: Source, Name: a.Name,
			Text: text, Urgency: "important", Target: t, Targets: a.Targets, Time: s.now(),
			Metadata: map[string]string{"approval": a.ID}, Approval: prompt,
		}
		if kind == ".expired" {
			n.Urgency = "info"
		}
		if err := connectors.Enqueue(ctx, s.bus, n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("approval %s: queue the notifications: %w", a.ID, err)
	}
	return nil
}

// Source is the source of the approvals' events and notifications.
const Source = "approval"

// questionText is what the people asked read (before the links).
func (s *Service) questionText(a Approval, lead string) string {
	var b strings.Builder
	b.WriteString(lead)
	b.WriteString(a.Question)
	if a.Tool != "" {
		fmt.Fprintf(&b, "\n\nTool: %s", a.Tool)
		if a.Args != "" {
			preview, whole := secret.Cut(a.Args, previewMax, false, nil)
			fmt.Fprintf(&b, "\nArguments: %s", preview)
			if len(preview) < whole {
				fmt.Fprintf(&b, " …\n(cut: this shows %d of the %d bytes of the arguments. See them all before you decide: open a link below, or run agentwork approvals show %s)", len(preview), whole, a.ID)
			}
		}
	}
	fmt.Fprintf(&b, "\n\nAnswer by %s, or it is %s automatically.", clock(a.Deadline), verdictDone(a.OnTimeout))
	fmt.Fprintf(&b, "\nApproval %s: agentwork approvals approve|reject %s", a.ID, a.ID)
	return b.String()
}

// clock formats t for the people asked.
func clock(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// verdictDone says what a verdict makes of the work, as a past participle.
func verdictDone(v Verdict) string {
	switch v {
	case Approve:
		return "approved"
	case Fail:
		return "failed"
	}
	return "rejected"
}

// emit publishes agentwork.event.approval.<outcome> for a, once per
// outcome (its id is derived from the approval and the outcome).
func (s *Service) emit(ctx context.Context, a Approval, outcome string) error {
	data := a
	data.Resume, data.Receipts = nil, nil
	ev, err := bus.NewEvent("agentwork/approval", bus.TypeOf(Source, outcome), a.ID, s.now(), data)
	if err != nil {
		return err
	}
	id := "approval." + a.ID + "." + outcome
	ev.ID, ev.RunID = id, a.Run
	if _, err := s.bus.Publish(ctx, s.bus.Subjects.Event(Source, outcome), ev, id); err != nil {
		return fmt.Errorf("approval %s: event %s: %w", a.ID, outcome, err)
	}
	return nil
}
