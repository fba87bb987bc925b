package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/config"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/workflow"
)

// The button presses of the connectors that receive them (Telegram's
// getUpdates): one instance polls each bot, under a lease of the one bus
// lease primitive, and decides each press through the approvals Service.

// answerLease is how long the lease of a bot's polling lasts unless
// renewed (every third of it). An instance that dies stops renewing; on the
// embedded server its lease is free at once at the next start, on a
// cluster another instance takes over within answerLease.
const answerLease = 15 * time.Second

// answerRetry is the wait after a connector's Answer gave up (a bad token,
// a webhook set on the bot): the operator fixes it, the next try polls.
const answerRetry = time.Minute

// answerLeaseKey is the key in agentwork_locks of connector name's
// polling lease.
func answerLeaseKey(name string) string { return "connectors." + name + ".answers" }

// answerRecord is the lease's record: who polls which connector.
type answerRecord struct {
	bus.Lease
	Connector string `json:"connector"`
}

// answerers are the connectors of reg that receive presses, by name.
func answerers(reg connectors.Registry) map[string]connectors.Answers {
	out := map[string]connectors.Answers{}
	for name, c := range reg {
		if a, ok := c.(connectors.Answers); ok {
			out[name] = a
		}
	}
	return out
}

// pollAnswers returns the consumer that receives the presses of each
// answerer while this instance holds its lease, and decides them through
// approvals.
func pollAnswers(b *bus.Bus, approvals *approval.Service, as map[string]connectors.Answers, log *zap.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		var wg sync.WaitGroup
		for _, name := range slices.Sorted(maps.Keys(as)) {
			p := &poller{ttl: answerLease, bus: b, name: name, c: as[name], decide: decider(approvals), log: log.With(zap.String("connector", name))}
			wg.Go(func() { p.run(ctx) })
		}
		wg.Wait()
		return nil
	}
}

type poller struct {
	// ttl is the lease's time to live (answerLease).
	ttl    time.Duration
	bus    *bus.Bus
	name   string
	c      connectors.Answers
	decide connectors.Decider
	log    *zap.Logger
}

// run takes the lease when it is free, polls while it holds it, and waits
// for it again when it is lost, until ctx ends.
func (p *poller) run(ctx context.Context) {
	key := answerLeaseKey(p.name)
	for ctx.Err() == nil {
		rec := &answerRecord{Connector: p.name}
		rev, err := bus.AcquireWait(ctx, p.bus, p.bus.Locks, key, p.ttl, 0, rec, nil)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("the lease of the button presses could not be taken; trying again", zap.Error(err))
			}
			sleepCtx(ctx, p.ttl/3)
			continue
		}
		p.log.Info("receiving the button presses (this instance holds the lease)")
		if fatal := p.hold(ctx, key, rec, rev); fatal {
			sleepCtx(ctx, answerRetry)
		}
	}
}

// hold polls while the lease is renewed, and releases it when polling
// stops. fatal reports that the connector gave up (see Answers).
func (p *poller) hold(ctx context.Context, key string, rec *answerRecord, rev uint64) (fatal bool) {
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- p.c.Answer(pctx, p.decide) }()
	tick := time.NewTicker(p.ttl / 3)
	defer tick.Stop()
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := bus.Release(rctx, p.bus.Locks, key, rec.Token, rev); err != nil && !errors.As(err, new(*bus.HeldError)) {
			p.log.Warn("the lease of the button presses was not released; it expires on its own", zap.Error(err))
		}
	}
	for {
		select {
		case err := <-done:
			release()
			if err != nil {
				p.log.Error("cannot receive the button presses; trying again later", zap.Error(err), zap.Duration("retry", answerRetry))
				return true
			}
			return false
		case <-tick.C:
			next, err := bus.Renew(ctx, p.bus.Locks, key, rec, rev, p.ttl)
			if err == nil {
				rev = next
				continue
			}
			// Lost (taken over after a stall, or the bus is away): stop
			// polling, so that two instances never poll one bot.
			p.log.Warn("the lease of the button presses was lost; polling stops", zap.Error(err))
			stop()
			<-done
			if !errors.As(err, new(*bus.HeldError)) {
				release()
			}
			return false
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Answers to presses that decided nothing.
const (
	replyNotAllowed = "You are not allowed to decide this"
	replyNotHere    = "This question was not sent here: nothing was decided."
	replyUnknown    = "This approval is not known (it may have been removed after it ended): nothing was decided."
	replyBadVerb    = "This button is not an approval's Approve or Reject: nothing was decided."
)

// decider decides approvals from button presses: by "<platform>:<user
// id>", as approvers are written, with no comment.
func decider(approvals *approval.Service) connectors.Decider {
	return func(ctx context.Context, ans connectors.Answer) (connectors.Reply, error) {
		v := approval.Verdict(ans.Verb)
		if v != approval.Approve && v != approval.Reject {
			return connectors.Reply{Text: replyBadVerb, Alert: true}, nil
		}
		a, err := approvals.Get(ctx, ans.ApprovalID)
		if errors.Is(err, approval.ErrNoApproval) {
			return connectors.Reply{Text: replyUnknown, Alert: true}, nil
		}
		if err != nil {
			return connectors.Reply{}, err
		}
		if !sentHere(a, ans) {
			return connectors.Reply{Text: replyNotHere, Alert: true}, nil
		}
		got, err := approvals.Decide(ctx, ans.ApprovalID, v, ans.By, "")
		var ce *approval.ConflictError
		switch {
		case err == nil:
			d := got.Decision
			name := d.By
			if d.By == ans.By && ans.ByName != "" {
				name = ans.ByName
			}
			return connectors.Reply{Text: pastTense(d.Verdict), Decided: true, Summary: summary(d.Verdict, name, d.At)}, nil
		case errors.Is(err, approval.ErrNotAllowed):
			return connectors.Reply{Text: replyNotAllowed, Alert: true}, nil
		case errors.As(err, &ce):
			d := ce.Decision
			return connectors.Reply{
				Text:    fmt.Sprintf("Already %s by %s at %s: your answer changed nothing.", strings.ToLower(pastTense(d.Verdict)), d.By, clockOf(d.At)),
				Alert:   true,
				Decided: true, Summary: summary(d.Verdict, d.By, d.At),
			}, nil
		case errors.Is(err, approval.ErrExpired):
			v := approval.Reject
			if got.Decision != nil {
				v = got.Decision.Verdict
			}
			return connectors.Reply{
				Text:    fmt.Sprintf("Too late: nobody answered by %s, so it was %s automatically.", clockOf(got.Deadline), strings.ToLower(pastTense(v))),
				Alert:   true,
				Decided: true, Summary: fmt.Sprintf("⌛ Expired: %s automatically at %s", strings.ToLower(pastTense(v)), clockOf(got.Deadline)),
			}, nil
		case errors.Is(err, approval.ErrCancelled):
			return connectors.Reply{
				Text:    "This approval was cancelled (" + got.CancelReason + "): nothing was decided.",
				Alert:   true,
				Decided: true, Summary: "🚫 Cancelled at " + clockOf(got.CancelledAt) + ": " + got.CancelReason,
			}, nil
		case errors.Is(err, approval.ErrNoApproval):
			return connectors.Reply{Text: replyUnknown, Alert: true}, nil
		}
		return connectors.Reply{}, err
	}
}

// sentHere reports whether the press came from where the question was
// sent: a connector among the approval's targets and, where the
// question's receipts say which messages carried it, one of those.
func sentHere(a approval.Approval, ans connectors.Answer) bool {
	ok := false
	var ids []string
	for _, t := range a.Targets {
		if name, _ := connectors.SplitTarget(t); name == ans.Connector {
			ok = true
			ids = append(ids, a.Receipts[t].MessageIDs...)
		}
	}
	if !ok {
		return false
	}
	if len(ids) == 0 || ans.Chat == "" {
		return true // not known: the approvers decide who may answer
	}
	return slices.Contains(ids, ans.Chat+":"+ans.MessageID)
}

func pastTense(v approval.Verdict) string {
	switch v {
	case approval.Approve:
		return "Approved"
	case approval.Fail:
		return "Failed"
	}
	return "Rejected"
}

func clockOf(t time.Time) string { return t.UTC().Format("15:04 UTC") }

// summary is what the question's message shows once decided.
func summary(v approval.Verdict, by string, at time.Time) string {
	mark := "❌"
	if v == approval.Approve {
		mark = "✅"
	}
	return fmt.Sprintf("%s %s by %s at %s", mark, pastTense(v), by, clockOf(at))
}

// askedOn returns the answerers of as on which an approval can be asked,
// the only ones polled: a bot that is polled is read by agentwork alone
// (other programs reading it get 409), and one with a webhook set fails
// every poll. An approval is asked on a connector when a gated tool call
// may send its question there (any approval list set, and the connector
// among runner.approvals.targets or, when those are unset, among the
// sources' default targets: heartbeat.targets, cron.targets,
// runner.targets, else every connector), or a workflow's approval step
// may (its targets, else its workflow's; templated targets: any).
func askedOn(f *config.File, as map[string]connectors.Answers) map[string]connectors.Answers {
	every := false
	var targets []string
	gated := len(f.Runner.Approval) > 0 || len(f.Heartbeat.Approval) > 0
	for _, j := range f.Cron.Jobs {
		gated = gated || len(j.Approval) > 0
	}
	for _, tc := range f.Tasks {
		gated = gated || len(tc.Approval) > 0
	}
	if gated {
		if t := f.Runner.Approvals.Targets; len(t) > 0 {
			targets = append(targets, t...)
		} else {
			targets = append(targets, f.Heartbeat.Targets...)
			targets = append(targets, f.Cron.Targets...)
			targets = append(targets, f.Runner.Targets...)
			every = len(f.Runner.Targets) == 0
		}
	}
	for _, w := range f.Workflows {
		w.Walk(func(_ string, s *workflow.Step) {
			if s.Approval == nil {
				return
			}
			t := s.Approval.Targets
			if len(t) == 0 {
				t = w.Targets
			}
			targets = append(targets, t...)
		})
	}
	out := map[string]connectors.Answers{}
	for name, a := range as {
		if every || slices.ContainsFunc(targets, func(t string) bool {
			n, _ := connectors.SplitTarget(t)
			return n == name || strings.Contains(t, "${{")
		}) {
			out[name] = a
		}
	}
	return out
}
