package heartbeat_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/triggers/activehours"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// kind is outcome or outcome/reason.
func kind(o outcome) string {
	if o.Result.Reason != "" {
		return o.Result.Outcome + "/" + o.Result.Reason
	}
	return o.Result.Outcome
}

// wakeN starts a heartbeat and a runner, wakes the heartbeat n times,
// one after the other, and returns the outcomes.
func wakeN(t *testing.T, cfg heartbeat.Config, m *fakeModel, checklist string, n int) []outcome {
	t.Helper()
	b := bustest.New(t)
	clk := clock.NewFake(monday)
	dir := t.TempDir()
	if checklist != "" {
		writeChecklist(t, dir, checklist)
	}
	h := newHeartbeat(t, b, cfg, clk, dir)
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	for i := range n {
		if _, err := h.Wake(t.Context()); err != nil {
			t.Fatalf("Wake: %v", err)
		}
		s.wait(i + 1)
		waitIdle(t, b)
	}
	return s.settle()
}

func TestWakeDeliversTheNotifyText(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(monday)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	h := newHeartbeat(t, b, heartbeat.Config{Targets: []string{"console"}}, clk, dir)
	m := scripted(t, script.Rule{Match: script.Match{Source: "heartbeat"}, Reply: script.Reply{Text: "The backup failed.", Notify: "The nightly backup did not finish: check the backup host."}})
	startRunner(t, b, m, h, clk)
	s := watch(t, b)

	pub, err := h.Wake(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := s.wait(1)[0]
	r := got.Result
	if r.Outcome != bus.OutcomeDone || r.Text != "The nightly backup did not finish: check the backup host." {
		t.Fatalf("outcome = %v, want done with the notify_user text (not the model's prose)", got)
	}
	if !r.Manual || r.ScheduledAt != nil || got.Event.CausationID != pub.ID || got.Event.Subject != "default" {
		t.Errorf("event = %+v / %+v, want a manual run of heartbeat default caused by %s", got.Event, r, pub.ID)
	}
	if len(r.Targets) != 1 || r.Targets[0] != "console" {
		t.Errorf("targets = %v, want [console]", r.Targets)
	}
	prompt := m.lastPrompt()
	for _, want := range []string{"notify_user", "Check that the nightly backup finished", "Checklist (HEARTBEAT.md)", "Monday 2026-03-09"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt does not contain %q:\n%s", want, prompt)
		}
	}
	if strings.Contains(prompt, "private note") {
		t.Errorf("prompt contains an HTML comment of the checklist:\n%s", prompt)
	}
}

// TestFailClosed: only a notify_user call reaches the user.
func TestFailClosed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		reply model.Reply
		runs  int
		want  []string // outcome/reason of each run, then the text of done runs
	}{
		{"no notify_user call is an ack", model.Reply{Text: "STATUS: CHAT_YES\nREASON: the disk is full\nCONTENT: please clean up"}, 1, []string{"skip/ack"}},
		{"blank text is empty", notifyReply("   "), 1, []string{"skip/empty"}},
		{"two calls are sent as one", notifyReply("disk /var is 93% full", "second message"), 1, []string{`done "disk /var is 93% full\n\nsecond message"`}},
		{"same text twice is a duplicate", notifyReply("disk /var is 93% full"), 2, []string{`done "disk /var is 93% full"`, "skip/duplicate"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := newModel(answer(c.reply))
			got := wakeN(t, heartbeat.Config{}, m, checklistText, c.runs)
			if len(got) != len(c.want) {
				t.Fatalf("events = %v, want %d", got, len(c.want))
			}
			for i, o := range got {
				s := strings.TrimSuffix(o.String(), " manual")
				if s != c.want[i] {
					t.Errorf("run %d = %s, want %s", i+1, s, c.want[i])
				}
			}
			if n := m.runs.Load(); n != int64(c.runs) {
				t.Errorf("model runs = %d, want %d", n, c.runs)
			}
		})
	}
}

func TestChecklistGate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		checklist string // "" = no file
		want      string
	}{
		{"empty checklist", "# Heartbeat\n\n<!-- add checks below -->\n- [ ]\n", "skip/empty-checklist"},
		{"no checklist file", "", "skip/no-checklist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := newModel(answer(notifyReply("should never be sent")))
			got := wakeN(t, heartbeat.Config{}, m, c.checklist, 1)
			if len(got) != 1 || strings.TrimSuffix(got[0].String(), " manual") != c.want {
				t.Fatalf("events = %v, want [%s]", got, c.want)
			}
			if got[0].Result.Detail == "" || !strings.Contains(got[0].Result.Detail, "HEARTBEAT.md") {
				t.Errorf("detail = %q, want it to name the file", got[0].Result.Detail)
			}
			if n := m.calls.Load(); n != 0 {
				t.Errorf("model called %d times, want 0: heartbeats with nothing to check must cost nothing", n)
			}
		})
	}
}

// TestChecklistEditsApply: the checklist is read at each fire.
func TestChecklistEditsApply(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(monday)
	dir := t.TempDir()
	writeChecklist(t, dir, "# Heartbeat\n")
	h := newHeartbeat(t, b, heartbeat.Config{}, clk, dir)
	m := newModel(answer(notifyReply("the backup failed")))
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	if _, err := h.Wake(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := s.wait(1)[0]; got.Result.Reason != agentwork.ReasonEmptyList {
		t.Fatalf("first run = %v, want skip/empty-checklist", got)
	}
	waitIdle(t, b)
	writeChecklist(t, dir, "# Heartbeat\n- check the backup\n")
	if _, err := h.Wake(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := s.wait(2)[1]; got.Result.Outcome != bus.OutcomeDone || m.runs.Load() != 1 {
		t.Fatalf("second run = %v (model runs %d), want done after the edit", got, m.runs.Load())
	}
	if !strings.Contains(m.lastPrompt(), "- check the backup") {
		t.Errorf("prompt lacks the edited checklist:\n%s", m.lastPrompt())
	}
}

func TestOKTokenMode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reply string
		want  string
	}{
		{"HEARTBEAT_OK", "skip/ack"},
		{"Nothing to report. HEARTBEAT_OK", "skip/ack"},
		{"**HEARTBEAT_OK** all quiet", "skip/ack"},
		{"   ", "skip/empty"},
		{"The backup failed; I would not say HEARTBEAT_OK today.", `done "The backup failed; I would not say HEARTBEAT_OK today."`},
		{"The backup failed: check the backup host.", `done "The backup failed: check the backup host."`},
	}
	for _, c := range cases {
		t.Run(c.reply, func(t *testing.T) {
			t.Parallel()
			m := newModel(answer(model.Reply{Text: c.reply}))
			got := wakeN(t, heartbeat.Config{OutputMode: heartbeat.ModeOKToken}, m, checklistText, 1)
			if len(got) != 1 || strings.TrimSuffix(got[0].String(), " manual") != c.want {
				t.Fatalf("reply %q: events = %v, want [%s]", c.reply, got, c.want)
			}
			if !strings.Contains(m.lastPrompt(), "HEARTBEAT_OK") || strings.Contains(m.lastPrompt(), "notify_user") {
				t.Errorf("ok_token prompt should teach HEARTBEAT_OK, not notify_user:\n%s", m.lastPrompt())
			}
		})
	}
}

// publishTick publishes a scheduled heartbeat request as the schedule would.
func publishTick(t *testing.T, b *bus.Bus, name string, at time.Time) string {
	t.Helper()
	req := agentwork.Request{Source: bus.SourceHeartbeat, Name: name, Prompt: "check\n- the backup", Deliver: agentwork.DeliverNotify, ScheduledAt: &at}
	pub, err := agentwork.Publish(t.Context(), b, req, agentwork.PublishOptions{MsgID: heartbeat.MsgID(name, at)})
	if err != nil {
		t.Fatal(err)
	}
	return pub.ID
}

func TestInputGates(t *testing.T) {
	t.Parallel()
	night := activehours.Window{Start: "22:00", End: "06:00", Timezone: "Europe/Berlin"}
	cases := []struct {
		name   string
		cfg    heartbeat.Config
		manual bool
		reqFor string // heartbeat name of the request
		want   string
		calls  bool
	}{
		{"outside active hours", heartbeat.Config{Enabled: true, ActiveHours: night}, false, "default", "skip/outside-active-hours", false},
		{"wake ignores active hours", heartbeat.Config{Enabled: true, ActiveHours: night}, true, "default", "done", true},
		{"disabled", heartbeat.Config{}, false, "default", "skip/disabled", false},
		{"wake runs a disabled heartbeat", heartbeat.Config{}, true, "default", "done", true},
		{"a name this runtime does not have", heartbeat.Config{Enabled: true}, false, "old-name", "skip/disabled", false},
		{"inside active hours", heartbeat.Config{Enabled: true, ActiveHours: activehours.Window{Start: "09:00", End: "17:00", Timezone: "Europe/Berlin"}}, false, "default", "done", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			clk := clock.NewFake(monday) // 11:00 in Berlin
			dir := t.TempDir()
			writeChecklist(t, dir, checklistText)
			h := newHeartbeat(t, b, c.cfg, clk, dir)
			m := newModel(answer(notifyReply("the backup failed")))
			startRunner(t, b, m, h, clk)
			s := watch(t, b)
			if c.manual {
				if _, err := h.Wake(t.Context()); err != nil {
					t.Fatal(err)
				}
			} else {
				publishTick(t, b, c.reqFor, monday)
			}
			got := s.wait(1)[0]
			if kind(got) != c.want {
				t.Fatalf("outcome = %v, want %s", got, c.want)
			}
			if (m.calls.Load() > 0) != c.calls {
				t.Errorf("model calls = %d, want called = %v", m.calls.Load(), c.calls)
			}
			if c.want == "skip/outside-active-hours" && !strings.Contains(got.Result.Detail, "next opening Mon 2026-03-09 22:00 CET") {
				t.Errorf("detail = %q, want it to say when the window opens", got.Result.Detail)
			}
		})
	}
}

// TestLease: one heartbeat at a time, through the runner's overlap lease;
// a lease whose holder is gone is taken over.
func TestLease(t *testing.T) {
	t.Parallel()
	hour := time.Now().Add(time.Hour).UTC()
	cases := []struct {
		name string
		// lease is the stored overlap lease (client: another live
		// instance in this process); nil stores garbage.
		lease   func(client *bus.Bus) *agentwork.OverlapLease
		overlap string
		want    string
	}{
		{"a lease of a process on this data dir that is gone is taken over at once", func(*bus.Bus) *agentwork.OverlapLease {
			return &agentwork.OverlapLease{Lease: bus.Lease{Owner: "crashed-host", Token: "t", Boot: "deadbeef", Expires: hour}, RunID: "run-1"}
		}, "skip", "done"},
		{"a live lease of another instance of this process: busy", func(c *bus.Bus) *agentwork.OverlapLease {
			return &agentwork.OverlapLease{Lease: c.NewLease(hour), RunID: "run-1", Since: time.Now().Add(-time.Minute).UTC()}
		}, "skip", "skip/busy"},
		{"a live lease of an instance elsewhere: busy", func(*bus.Bus) *agentwork.OverlapLease {
			return &agentwork.OverlapLease{Lease: bus.Lease{Owner: "other-host", Token: "t", Expires: hour}, RunID: "run-1"}
		}, "skip", "skip/busy"},
		{"an expired lease is taken over", func(*bus.Bus) *agentwork.OverlapLease {
			return &agentwork.OverlapLease{Lease: bus.Lease{Owner: "dead-host", Token: "t", Expires: time.Now().Add(-time.Second).UTC()}, RunID: "run-1"}
		}, "skip", "done"},
		{"garbage is taken over", func(*bus.Bus) *agentwork.OverlapLease { return nil }, "skip", "done"},
		{"queue: a newer tick has replaced this one", func(*bus.Bus) *agentwork.OverlapLease {
			return &agentwork.OverlapLease{Lease: bus.Lease{Owner: "other-host", Token: "t", Expires: hour}, RunID: "run-1"}
		}, "queue", "skip/busy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			clk := clock.NewFake(monday)
			dir := t.TempDir()
			writeChecklist(t, dir, checklistText)
			h := newHeartbeat(t, b, heartbeat.Config{Enabled: true, Overlap: c.overlap}, clk, dir)
			lease := c.lease(bustest.Client(t, b))
			raw := []byte("not json")
			if lease != nil {
				raw, _ = json.Marshal(lease)
			}
			if _, err := b.Locks.Put(t.Context(), agentwork.OverlapKey(bus.SourceHeartbeat, "default"), raw); err != nil {
				t.Fatal(err)
			}
			m := newModel(answer(notifyReply("the backup failed")))
			startRunner(t, b, m, h, clk)
			s := watch(t, b)
			// A tick scheduled 30m ago: with overlap queue it is overtaken.
			publishTick(t, b, "default", monday.Add(-30*time.Minute))
			got := s.wait(1)[0]
			if kind(got) != c.want {
				t.Fatalf("outcome = %v, want %s", got, c.want)
			}
			if c.want == "skip/busy" && !strings.Contains(got.Result.Detail, lease.Owner) {
				t.Errorf("detail = %q, want it to name the instance running the heartbeat (%s)", got.Result.Detail, lease.Owner)
			}
			if c.overlap == "queue" && !strings.Contains(got.Result.Detail, "a newer heartbeat tick has replaced this one") {
				t.Errorf("detail = %q, want it to say a newer tick replaced it", got.Result.Detail)
			}
			if c.want == "done" {
				// The lease is released after the run (just before its event).
				waitIdle(t, b)
			}
		})
	}
}
