package approval_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// An approval whose deadline passes while nothing runs expires once at
// the next start: on_timeout followed in its resume, the people asked
// told once.
func TestExpiresAtNextStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := func() *bus.Bus {
		return bustest.New(t, func(c *bus.Config) { c.DataDir = dir })
	}
	b := open()
	s := newService(t, b)
	stop := run(t, s)
	id := approval.WorkflowStepID("run1", "ask", 1)
	r := resumeTo(b, request(id))
	r.Timeout, r.OnTimeout = 2*time.Second, approval.Approve
	a, _, err := s.Ask(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Down across the deadline.
	time.Sleep(time.Until(a.Deadline) + 500*time.Millisecond)

	b = open()
	s = newService(t, b)
	run(t, s)
	eventually(t, "the approval expired and finished", func() bool {
		a, err := s.Get(t.Context(), id)
		return err == nil && a.Finished
	})
	a, _ = s.Get(t.Context(), id)
	if a.State != approval.Expired || a.Decision.Verdict != approval.Approve || a.Decision.By != approval.ByTimeout {
		t.Fatalf("after the deadline: %+v %+v, want expired, approve by timeout", a, a.Decision)
	}
	rs := resumes(t, b)
	if len(rs) != 1 {
		t.Fatalf("%d resumes, want 1", len(rs))
	}
	if o := outcome(t, rs[0]); o.State != approval.Expired || o.Verdict != approval.Approve || o.By != approval.ByTimeout {
		t.Errorf("resume outcome = %+v, want expired, approve, by timeout", o)
	}
	var told []string
	for _, n := range queued(t, b, id) {
		if strings.Contains(n.ID, ".expired.") {
			told = append(told, n.Target)
			if !strings.Contains(n.Text, "Expired: approved automatically at") || n.Approval != nil {
				t.Errorf("expiry notice = %q (prompt %v), want what happened and no buttons", n.Text, n.Approval)
			}
		}
	}
	if len(told) != 2 {
		t.Errorf("expiry notices to %v, want one to each of the 2 targets", told)
	}
	if n := len(events(t, b, id, "expired")); n != 1 {
		t.Errorf("%d expired events, want 1", n)
	}
	if _, err := s.Decide(t.Context(), id, approval.Reject, approval.ByAdmin, ""); !errors.Is(err, approval.ErrExpired) {
		t.Errorf("Decide after expiry = %v, want ErrExpired", err)
	}
}

// A crash between the compare-and-set and the work after it: the timer
// Decide set before writing finishes the work, once.
func TestDecideCrashAfterWrite(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"decide.written", "finish.resumed"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			s := newService(t, b)
			approval.SetHook(s, func(p, _ string) error {
				if p == point {
					return errors.New("crash")
				}
				return nil
			})
			id := approval.WorkflowStepID("run1", "ask", 1)
			if _, _, err := s.Ask(t.Context(), resumeTo(b, request(id))); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Decide(t.Context(), id, approval.Approve, "telegram:1", "go"); err == nil {
				t.Fatal("Decide with a crash: no error")
			}
			a, _ := s.Get(t.Context(), id)
			if a.State != approval.Approved || a.Finished {
				t.Fatalf("after the crash: %s finished %v, want approved, not finished", a.State, a.Finished)
			}
			// Another instance (no crash) takes the timer.
			s2 := newService(t, bustest.Client(t, b))
			run(t, s2)
			eventually(t, "the approval finished", func() bool { a, _ := s2.Get(t.Context(), id); return a.Finished })
			rs := resumes(t, b)
			if len(rs) != 1 {
				t.Fatalf("%d resumes, want 1", len(rs))
			}
			if o := outcome(t, rs[0]); o.Verdict != approval.Approve || o.By != "telegram:1" || o.Comment != "go" {
				t.Errorf("resume outcome = %+v", o)
			}
			if n := len(events(t, b, id, "approved")); n != 1 {
				t.Errorf("%d approved events, want 1", n)
			}
		})
	}
}

// A Decide that dies before its write leaves the approval pending: its
// timer (set to fire at once) arms the deadline again.
func TestDecideCrashBeforeWrite(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	approval.SetHook(s, func(p, _ string) error {
		if p == "decide.armed" {
			return errors.New("crash")
		}
		return nil
	})
	run(t, s)
	id := approval.WorkflowStepID("run1", "ask", 1)
	a, _, err := s.Ask(t.Context(), request(id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decide(t.Context(), id, approval.Approve, "telegram:1", ""); err == nil {
		t.Fatal("Decide with a crash: no error")
	}
	timers := bus.NewTimers(b)
	eventually(t, "the deadline armed again", func() bool {
		tm, err := timers.Pending(context.Background(), "approval."+id)
		return err == nil && tm.Due.Equal(a.Deadline)
	})
	if a, _ := s.Get(t.Context(), id); a.State != approval.Pending {
		t.Errorf("state %s, want pending", a.State)
	}
}

// A reminder asks once more before the deadline.
func TestReminder(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	run(t, s)
	id := approval.WorkflowStepID("run1", "ask", 1)
	r := request(id)
	r.Reminder = time.Second
	if _, _, err := s.Ask(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the reminder", func() bool { a, _ := s.Get(t.Context(), id); return a.Reminded })
	var reminders int
	for _, n := range queued(t, b, id) {
		if strings.Contains(n.ID, ".reminder.") {
			reminders++
			if !strings.HasPrefix(n.Text, "Reminder:") || n.Approval == nil {
				t.Errorf("reminder = %q, %v", n.Text, n.Approval)
			}
		}
	}
	if reminders != 2 {
		t.Errorf("%d reminders, want one per target (2)", reminders)
	}
	a, _ := s.Get(t.Context(), id)
	tm, err := bus.NewTimers(b).Pending(t.Context(), "approval."+id)
	if err != nil || !tm.Due.Equal(a.Deadline) {
		t.Errorf("after the reminder the timer = %+v, %v; want the deadline %s", tm, err, a.Deadline)
	}
}

// An answer at or after the deadline is refused even when the timer has
// not fired (its consumer is not running): the approval expires there and
// then, the same way the timer would have expired it.
func TestDecideAfterDeadlineExpires(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := newService(t, b, approval.WithClock(clock))
	id := approval.WorkflowStepID("run1", "ask", 1)
	r := resumeTo(b, request(id))
	r.Timeout, r.OnTimeout = time.Hour, approval.Reject
	a, _, err := s.Ask(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = a.Deadline.Add(500 * time.Millisecond)
	mu.Unlock()
	got, err := s.Decide(t.Context(), id, approval.Approve, "telegram:1", "late")
	if !errors.Is(err, approval.ErrExpired) {
		t.Fatalf("Decide after the deadline = %+v, %v; want ErrExpired", got, err)
	}
	a, _ = s.Get(t.Context(), id)
	if a.State != approval.Expired || a.Decision == nil || a.Decision.Verdict != approval.Reject || a.Decision.By != approval.ByTimeout || !a.Finished {
		t.Fatalf("after a late answer: %s %+v finished %v; want expired, reject by timeout, finished", a.State, a.Decision, a.Finished)
	}
	rs := resumes(t, b)
	if len(rs) != 1 {
		t.Fatalf("%d resumes, want 1", len(rs))
	}
	if o := outcome(t, rs[0]); o.State != approval.Expired || o.Verdict != approval.Reject {
		t.Errorf("resume outcome = %+v, want expired, reject", o)
	}
	var told int
	for _, n := range queued(t, b, id) {
		if strings.Contains(n.ID, ".expired.") {
			told++
		}
	}
	if told != 2 {
		t.Errorf("%d expiry notices, want one to each of the 2 targets", told)
	}
}

// An old fire of the approval's timer, handled while a Decide is under
// way, re-arms the approval's next time (here its deadline, an hour
// away) after Decide set its own timer to fire at once; Decide then dies
// after its write. What Decide set still finishes the decision at once,
// not at the deadline.
func TestDecideCrashAfterAnOldFireReArmed(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	id := approval.WorkflowStepID("run1", "ask", 1)
	a, _, err := s.Ask(t.Context(), resumeTo(b, request(id)))
	if err != nil {
		t.Fatal(err)
	}
	timers := bus.NewTimers(b)
	approval.SetHook(s, func(p, hid string) error {
		switch p {
		case "decide.armed":
			// What fired() does last for a pending approval: arm its
			// next time again.
			data := fmt.Sprintf(`{"id":%q,"why":"deadline"}`, hid)
			return timers.Set(context.Background(), "approval."+hid, a.Deadline, []byte(data))
		case "decide.written":
			return errors.New("crash")
		}
		return nil
	})
	if _, err := s.Decide(t.Context(), id, approval.Approve, "telegram:1", "go"); err == nil {
		t.Fatal("Decide with a crash: no error")
	}
	// Another instance takes the timers.
	s2 := newService(t, bustest.Client(t, b))
	run(t, s2)
	eventually(t, "the decision finished before the deadline", func() bool { a, _ := s2.Get(t.Context(), id); return a.Finished })
	if rs := resumes(t, b); len(rs) != 1 {
		t.Fatalf("%d resumes, want 1", len(rs))
	}
	// Finished, the approval's timer is no longer pending.
	eventually(t, "no pending timer", func() bool {
		_, err := timers.Pending(context.Background(), "approval."+id)
		return errors.Is(err, bus.ErrNoTimer)
	})
}

// An Ask that died before arming its timer, then a Decide that died
// before its write: the main key has no timer, and only the handler of
// the Decide's own timer arms the deadline again (and sends the
// question). TestDecideCrashBeforeWrite no longer shows this: the Ask's
// deadline timer stays pending through the Decide, so it passes whether
// or not the handler arms anything.
func TestDecideCrashBeforeWriteAfterAskCrashBeforeArm(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	crashAt := "ask.recorded"
	approval.SetHook(s, func(p, _ string) error {
		if p == crashAt {
			return errors.New("crash")
		}
		return nil
	})
	id := approval.WorkflowStepID("run1", "ask", 1)
	if _, _, err := s.Ask(t.Context(), request(id)); err == nil {
		t.Fatal("Ask with a crash: no error")
	}
	timers := bus.NewTimers(b)
	if _, err := timers.Pending(t.Context(), "approval."+id); !errors.Is(err, bus.ErrNoTimer) {
		t.Fatalf("after the Ask's crash: pending timer %v, want none", err)
	}
	crashAt = "decide.armed"
	if _, err := s.Decide(t.Context(), id, approval.Approve, "telegram:1", ""); err == nil {
		t.Fatal("Decide with a crash: no error")
	}
	s2 := newService(t, bustest.Client(t, b))
	run(t, s2)
	a, err := s2.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deadline armed", func() bool {
		tm, err := timers.Pending(context.Background(), "approval."+id)
		return err == nil && tm.Due.Equal(a.Deadline)
	})
	if a, _ := s2.Get(t.Context(), id); a.State != approval.Pending || !a.Asked {
		t.Errorf("state %s, asked %v; want pending, asked", a.State, a.Asked)
	}
}
