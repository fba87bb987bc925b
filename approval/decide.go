package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/agentwork/agentwork/bus"
)

// check says what answering d to a (already read) comes to: nil when a
// is pending and by may decide; errSame when a holds that verdict
// already; else the error to return.
func check(a Approval, d Decision) error {
	switch a.State {
	case Pending:
		if a.Requester != "" && d.By == ByCredential(a.Requester) {
			return fmt.Errorf("%w: %s asked for approval %s, and nobody approves their own request", ErrNotAllowed, d.By, a.ID)
		}
		if !a.Allowed(d.By) {
			return fmt.Errorf("%w: %s may not decide approval %s (it names its approvers)", ErrNotAllowed, d.By, a.ID)
		}
		return nil
	case Approved, Rejected:
		if a.Decision != nil && a.Decision.Verdict == d.Verdict {
			return errSame
		}
		return &ConflictError{ID: a.ID, State: a.State, Decision: *a.Decision}
	case Expired:
		v := Reject
		if a.Decision != nil {
			v = a.Decision.Verdict
		}
		return fmt.Errorf("%w: approval %s expired at %s, nobody having answered: %s automatically", ErrExpired, a.ID, clock(a.Deadline), verdictDone(v))
	case Cancelled:
		return fmt.Errorf("%w: approval %s was cancelled at %s: %s", ErrCancelled, a.ID, clock(a.CancelledAt), a.CancelReason)
	}
	return fmt.Errorf("approval %s is in an unknown state %q", a.ID, a.State)
}

// errSame: the approval holds the verdict asked for already.
var errSame = errors.New("approval: same verdict")

func (s *Service) decide(ctx context.Context, id string, d Decision) (Approval, error) {
	if d.Verdict != Approve && d.Verdict != Reject {
		return Approval{}, fmt.Errorf("%w: verdict %q: want approve or reject", ErrInvalid, d.Verdict)
	}
	if d.By == "" {
		return Approval{}, fmt.Errorf("%w: say who decides (by)", ErrInvalid)
	}
	d.Comment = s.cut(d.Comment, maxComment)
	d.Name = s.cut(d.Name, maxName)
	a, rev, err := s.read(ctx, id)
	if err != nil {
		return a, err
	}
	now := s.now().UTC()
	if a.State == Pending && !now.Before(a.Deadline) {
		// Too late, whether or not the deadline's timer has fired yet:
		// expire it here as the timer would (its OnTimeout verdict, its
		// Resume, the people asked told), and refuse the answer.
		return s.expireLate(ctx, a, rev, d)
	}
	if err := check(a, d); err != nil {
		if errors.Is(err, errSame) {
			return a, nil
		}
		return a, err
	}
	// Before the compare-and-set, the timer is set to fire at once: if
	// this process dies after the write, its handler does the rest.
	if err := s.setTimer(ctx, id, time.Now(), "decide"); err != nil {
		return a, err
	}
	if err := s.at("decide.armed", id); err != nil {
		return a, err
	}
	d.At = now
	next := a
	next.State, next.Decision = stateOf(d.Verdict), &d
	var lost error
	a, rev, err = s.write(ctx, next, rev, func(cur *Approval, found bool) (bool, error) {
		if !found {
			return false, fmt.Errorf("%w %q", ErrNoApproval, id)
		}
		if lost = check(*cur, d); lost != nil {
			return false, nil
		}
		cur.State, cur.Decision = stateOf(d.Verdict), &d
		return true, nil
	})
	if err != nil {
		return a, err
	}
	if lost != nil {
		if errors.Is(lost, errSame) {
			return a, nil
		}
		return a, lost
	}
	if err := s.at("decide.written", id); err != nil {
		return a, err
	}
	s.log.Info("approval decided", zap.String("approval", id), zap.String("verdict", string(d.Verdict)), zap.String("by", d.By))
	done, err := s.finish(ctx, a, rev)
	if errors.Is(err, errAbort) {
		return done, err
	}
	if err != nil {
		// Decided: the timer set above finishes it.
		s.log.Warn("approval decided; what follows is left to its timer", zap.String("approval", id), zap.Error(err))
		return a, nil
	}
	return done, nil
}

// expireLate expires the pending approval a, whose deadline has passed,
// for an answer d that came too late, and returns what check makes of d
// then: ErrExpired (or, if someone decided in time meanwhile, what their
// decision makes of d).
func (s *Service) expireLate(ctx context.Context, a Approval, rev uint64, d Decision) (Approval, error) {
	a, err := s.expire(ctx, a, rev)
	if err != nil && (!a.State.Valid() || a.State == Pending) {
		return a, err
	}
	if err != nil {
		// Ended: the deadline's timer finishes what is left.
		s.log.Warn("approval expired; what follows is left to its timer", zap.String("approval", a.ID), zap.Error(err))
	}
	if err := check(a, d); err != nil && !errors.Is(err, errSame) {
		return a, err
	}
	return a, nil
}

// Bounds of what a decider types.
const (
	maxComment = 2000
	maxName    = 100
)

func stateOf(v Verdict) State {
	if v == Approve {
		return Approved
	}
	return Rejected
}

// finish does the work that follows an approval's end, each step stored
// once however often it runs: its Resume (decided or expired), its event,
// the expiry notices, then the mark that it is finished.
func (s *Service) finish(ctx context.Context, a Approval, rev uint64) (Approval, error) {
	if a.Finished || a.State == Pending {
		return a, nil
	}
	if a.Resume != nil && a.State != Cancelled {
		if err := s.resume(ctx, a); err != nil {
			return a, err
		}
		if err := s.at("finish.resumed", a.ID); err != nil {
			return a, err
		}
	}
	if a.State == Expired {
		text := fmt.Sprintf("Expired: %s automatically at %s, nobody having answered.\n\n%s", verdictDone(a.Decision.Verdict), clock(a.Deadline), a.Question)
		if err := s.notify(ctx, a, ".expired", text); err != nil {
			return a, err
		}
	}
	if err := s.emit(ctx, a, string(a.State)); err != nil {
		return a, err
	}
	next := a
	next.Finished = true
	a, _, err := s.write(ctx, next, rev, func(cur *Approval, found bool) (bool, error) {
		if !found || cur.Finished {
			return false, nil
		}
		cur.Finished = true
		return true, nil
	})
	if err == nil {
		// Its reminder and deadline have nothing left to do (a fire of
		// them still on its way finds it finished): removed, waiting at
		// most cancelWait for the timers' stream, since all is done.
		cctx, cancel := context.WithTimeout(ctx, cancelWait)
		defer cancel()
		if cerr := s.timers.Cancel(cctx, timerKey(a.ID)); cerr != nil {
			s.log.Info("approval finished; its timer was not removed, and fires to no effect", zap.String("approval", a.ID), zap.Error(cerr))
		}
	}
	return a, err
}

// cancelWait bounds finish's removal of the approval's timer.
const cancelWait = 5 * time.Second

// resume publishes a's Resume with its outcome.
func (s *Service) resume(ctx context.Context, a Approval) error {
	r, d := a.Resume, a.Decision
	obj := map[string]json.RawMessage{}
	if len(r.Data) > 0 {
		if err := json.Unmarshal(r.Data, &obj); err != nil {
			return fmt.Errorf("approval %s: resume data: %w", a.ID, err)
		}
	}
	out, err := json.Marshal(Outcome{ID: a.ID, State: a.State, Verdict: d.Verdict, By: d.By, Name: d.Name, Comment: d.Comment, At: d.At})
	if err != nil {
		return err
	}
	obj["approval"] = out
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	ev := bus.Event{
		SpecVersion: "1.0", ID: r.MsgID, Source: "agentwork/approval", Type: r.Type, Subject: a.ID,
		Time: d.At, DataContentType: "application/json", Data: raw, RunID: a.Run,
	}
	if _, err := s.bus.Publish(ctx, r.Subject, ev, r.MsgID); err != nil {
		return fmt.Errorf("approval %s: publish its resume: %w", a.ID, err)
	}
	return nil
}

// expire ends the pending approval a at its deadline with its OnTimeout
// verdict, then finishes it.
func (s *Service) expire(ctx context.Context, a Approval, rev uint64) (Approval, error) {
	d := Decision{Verdict: a.OnTimeout, By: ByTimeout, At: s.now().UTC()}
	next := a
	next.State, next.Decision = Expired, &d
	a, rev, err := s.write(ctx, next, rev, func(cur *Approval, found bool) (bool, error) {
		if !found || cur.State != Pending {
			return false, nil // decided meanwhile: finish what it is
		}
		cur.State, cur.Decision = Expired, &d
		return true, nil
	})
	if err != nil {
		return a, err
	}
	if a.State == Expired && a.Decision.At.Equal(d.At) {
		s.log.Info("approval expired", zap.String("approval", a.ID), zap.String("verdict", string(d.Verdict)))
	}
	return s.finish(ctx, a, rev)
}

func (s *Service) cancel(ctx context.Context, id, reason string) (Approval, error) {
	a, rev, err := s.read(ctx, id)
	if err != nil || a.State.Ended() {
		return a, err
	}
	now := s.now().UTC()
	next := a
	next.State, next.CancelReason, next.CancelledAt = Cancelled, reason, now
	a, rev, err = s.write(ctx, next, rev, func(cur *Approval, found bool) (bool, error) {
		if !found || cur.State != Pending {
			return false, nil
		}
		cur.State, cur.CancelReason, cur.CancelledAt = Cancelled, reason, now
		return true, nil
	})
	if err != nil || a.State != Cancelled {
		return a, err
	}
	return s.finish(ctx, a, rev) // which removes its timer
}

// consumerTimers is the durable consumer of the approvals' timers.
const consumerTimers = "approval-timers"

// decideGrace is how long a timer set by Decide waits for Decide's write
// before it takes the approval for undecided (Decide died before it).
const decideGrace = 5 * time.Second

func (s *Service) run(ctx context.Context) error {
	w, err := bus.NewWorker(s.bus.JetStream(), bus.WorkerConfig{
		Stream: bus.StreamTimers,
		Consumer: jetstream.ConsumerConfig{
			Durable: consumerTimers, FilterSubject: s.bus.Subjects.TimerFired("approval") + ".>",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: s.cfg.AckWait, MaxAckPending: 10_000,
		},
		Concurrency: s.cfg.Concurrency, ShutdownGrace: s.cfg.ShutdownGrace, Log: s.log,
	}, s.onTimer)
	if err != nil {
		return err
	}
	var g errgroup.Group
	g.Go(func() error { return w.Run(ctx) })
	return g.Wait()
}

func (s *Service) onTimer(ctx context.Context, m jetstream.Msg) bus.Verdict {
	t, err := s.timers.DecodeTimer(m.Subject(), m.Data())
	var td timerData
	if err == nil {
		err = json.Unmarshal(t.Data, &td)
	}
	if err != nil || td.ID == "" {
		s.log.Error("approval timer dropped: it does not decode", zap.String("subject", m.Subject()), zap.Error(err))
		return bus.Terminate()
	}
	log := s.log.With(zap.String("approval", td.ID), zap.String("why", td.Why))
	a, rev, err := s.read(ctx, td.ID)
	switch {
	case errors.Is(err, ErrNoApproval):
		return bus.Done()
	case err != nil:
		log.Warn("approval timer: read", zap.Error(err))
		return bus.Retry(time.Second)
	}
	if err := s.fired(ctx, a, rev, t, td); err != nil {
		if errors.Is(err, errAbort) {
			log.Warn("approval timer aborted", zap.Error(err))
			return bus.Defer(0)
		}
		if errors.Is(err, errWait) {
			return bus.Defer(250 * time.Millisecond)
		}
		log.Warn("approval timer: will try again", zap.Error(err))
		return bus.Retry(time.Second)
	}
	return bus.Done()
}

// errWait: Decide may be writing its decision; look again shortly.
var errWait = errors.New("approval: a decision may be under way")

// fired handles a's timer: finish it if ended, expire it when due, send
// its reminder when due, else arm its timer again (a Decide that set it
// died before its write).
func (s *Service) fired(ctx context.Context, a Approval, rev uint64, t bus.Timer, td timerData) error {
	if a.State.Ended() {
		_, err := s.finish(ctx, a, rev)
		return err
	}
	now := s.now()
	if !now.Before(a.Deadline) {
		_, err := s.expire(ctx, a, rev)
		return err
	}
	if td.Why == "decide" && time.Since(t.Due) < decideGrace {
		return errWait
	}
	if !a.Asked {
		var err error
		if a, err = s.sendQuestion(ctx, a, rev); err != nil {
			return err
		}
		if _, rev, err = s.read(ctx, a.ID); err != nil {
			return err
		}
	}
	if !a.RemindAt.IsZero() && !a.Reminded && !now.Before(a.RemindAt) {
		if err := s.notify(ctx, a, ".reminder", s.questionText(a, "Reminder: still waiting for an answer.\n\n")); err != nil {
			return err
		}
		if err := s.emit(ctx, a, "reminded"); err != nil {
			return err
		}
		next := a
		next.Reminded = true
		var err error
		a, _, err = s.write(ctx, next, rev, func(cur *Approval, found bool) (bool, error) {
			if !found || cur.Reminded || cur.State != Pending {
				return false, nil
			}
			cur.Reminded = true
			return true, nil
		})
		if err != nil {
			return err
		}
		if a.State.Ended() {
			return nil // decided meanwhile: its own timer finishes it
		}
	}
	return s.arm(ctx, a)
}
