package agentwork

// A run's conversation with the model, kept in its claim as the tool loop
// goes (a tools.Journal), so that a run taken over after a crash goes on
// from its last step instead of making its tool calls again.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// MaxConversation is the most a run's claim keeps of its conversation
// (512 KiB of JSON), or half the bus's max payload if that is less (the
// claim is one KV value, so one message: 1 MB on a NATS server's default
// settings, 8 MB on the embedded one). A longer conversation is kept with
// its tool results cut to fit (see packState).
const MaxConversation = 512 << 10

// conversationMax is how many bytes of conversation a claim keeps.
func (r *Runner) conversationMax() int {
	if r.maxConversation > 0 {
		return r.maxConversation
	}
	return r.bus.HalfPayload(MaxConversation)
}

// claimJournal keeps a run's tool loop in its claim.
type claimJournal struct {
	r         *Runner
	run       *Run
	held      *heldClaim
	requestID string
	lease     time.Duration
	flush     *flushMark // set while the loop is the run's memory flush
}

var _ tools.Journal = claimJournal{}

// errCheckpoint marks a checkpoint that could not be written.
var errCheckpoint = errors.New("checkpoint")

// Save implements tools.Journal: one write of the claim (CAS), which the
// renewals carry on.
func (j claimJournal) Save(ctx context.Context, s tools.State) error {
	p, err := packState(s, j.r.secrets, j.r.conversationMax())
	if err != nil {
		return err
	}
	cp := &checkpoint{Conversation: p, Flush: j.flush}
	if j.run != nil {
		cp.Approvals = slices.Clone(j.run.approvals)
		cp.ModelCalls, cp.ModelCallsOmitted = slices.Clone(j.run.calls.List), j.run.calls.Omitted
	}
	if err := j.held.save(ctx, j.r, j.requestID, cp, j.lease); err != nil {
		return fmt.Errorf("%w: %w", errCheckpoint, err)
	}
	return nil
}

// tooLargeError: a conversation does not fit in a claim even with every
// tool result cut.
type tooLargeError struct{ size, max int }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("the run's conversation is too large to checkpoint (%d bytes with every tool result cut; a run's claim keeps at most %d), "+
		"so the run stopped before its next tool call or model call; shorten the prompt or lower max_steps", e.size, e.max)
}

// packState returns s as a claim keeps it, in at most limit bytes of JSON:
// the runner's secrets cut out of every message but the user's; the calls
// without their arguments, results and errors, which are those of the
// messages (unpackState puts them back); and, if it is still too long,
// every tool result cut to the longest length at which it fits, with a
// note the model reads when the run goes on. A conversation that does not
// fit with every tool result cut is a *tooLargeError.
func packState(s tools.State, secrets []string, limit int) (*tools.State, error) {
	out := s
	out.Messages = make([]model.Message, len(s.Messages))
	longest := 0
	for i, m := range s.Messages {
		if m.Role != model.RoleUser {
			m.Content = secret.Redact(m.Content, secrets)
			m.ToolCalls = slices.Clone(m.ToolCalls)
			for j := range m.ToolCalls {
				m.ToolCalls[j].Arguments = secret.Redact(m.ToolCalls[j].Arguments, secrets)
			}
		}
		if m.Role == model.RoleTool {
			longest = max(longest, len(m.Content))
		}
		out.Messages[i] = m
	}
	out.Calls = make([]tools.Call, len(s.Calls))
	for i, c := range s.Calls {
		c.Arguments, c.Result, c.Error = "", "", ""
		out.Calls[i] = c
	}
	size := jsonSize(&out)
	if size <= limit {
		return &out, nil
	}
	whole := slices.Clone(out.Messages)
	fits := func(n int) bool {
		for i, m := range whole {
			if m.Role == model.RoleTool {
				out.Messages[i].Content = cutResult(m.Content, n, "when agentwork checkpointed this run")
			}
		}
		size = jsonSize(&out)
		return size <= limit
	}
	// The first length that does not fit; the one before it does.
	if n := sort.Search(longest, func(n int) bool { return !fits(n) }); n > 0 && fits(n-1) {
		return &out, nil
	}
	fits(0)
	return nil, &tooLargeError{size: size, max: limit}
}

// cutResult cuts s (a tool result, a text of a run's event) to at most n
// bytes, at a character, and says so: "…[cut: the first n of len(s) bytes
// were kept <why>]".
func cutResult(s string, n int, why string) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("…[cut: the first %d of %d bytes were kept %s]", n, len(s), why)
}

// jsonSize is the length of v as JSON (v is plain data).
func jsonSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return int(^uint(0) >> 1) // cannot happen: a State is plain data
	}
	return len(b)
}

// unpackState returns the State p holds (see packState): each call gets
// its arguments from the replies' calls and its result or error from the
// tool results, in order (the tool loop gives every call one result, in
// the order of the calls, an error's content starting "error: ").
func unpackState(p *tools.State) tools.State {
	s := *p
	s.Messages = slices.Clone(p.Messages)
	s.Calls = slices.Clone(p.Calls)
	var args []string
	var results []model.Message
	for _, m := range s.Messages {
		switch m.Role {
		case model.RoleAssistant:
			for _, tc := range m.ToolCalls {
				args = append(args, tc.Arguments)
			}
		case model.RoleTool:
			results = append(results, m)
		}
	}
	for i := range s.Calls {
		if i < len(args) {
			s.Calls[i].Arguments = args[i]
		}
		if i < len(results) {
			if m := results[i]; m.IsError {
				s.Calls[i].Error = strings.TrimPrefix(m.Content, "error: ")
			} else {
				s.Calls[i].Result = m.Content
			}
		}
	}
	return s
}
