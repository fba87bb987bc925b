package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/triggers/activehours"
)

// Heartbeat fires one heartbeat on a schedule and owns its policy, state
// and control surface (NATS service, HTTP routes). Its schedule is one
// timer of the time engine (bus.Timers, key heartbeat.<name>), armed for
// the next tick. Run one per instance: N instances on one bus share the
// timer's fires, so each tick fires once, and run one heartbeat at a time.
type Heartbeat struct {
	bus       *bus.Bus
	cfg       Config
	hours     activehours.Schedule
	checklist string     // resolved path
	memory    Memory     // where the checklist lives with ChecklistInMemory
	fileMu    sync.Mutex // WriteChecklist of a file: one at a time
	log       *zap.Logger
	clock     clock.Clock
	queuePoll time.Duration
	timers    *bus.Timers
}

// Option configures New.
type Option func(*Heartbeat)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option {
	return func(h *Heartbeat) {
		if l != nil {
			h.log = l
		}
	}
}

// WithClock sets the time source of the schedule, the gates and the state
// (default the real clock). Give the runner the same clock in tests.
func WithClock(c clock.Clock) Option {
	return func(h *Heartbeat) {
		if c != nil {
			h.clock = c
		}
	}
}

// WithBaseDir is the directory a relative checklist path is resolved
// against: the config file's directory. Default: the working directory.
func WithBaseDir(dir string) Option { return func(h *Heartbeat) { h.checklist = dir } }

// WithMemory gives the heartbeat the agent's memory, where its checklist
// lives when Config.ChecklistInMemory is set (required then).
func WithMemory(m Memory) Option { return func(h *Heartbeat) { h.memory = m } }

// WithEvery sets the interval in place of Config.Every, below the 1m
// floor that Config enforces (each heartbeat is a model call, so an
// operator never wants less): it is for tests and benchmarks that need
// heartbeats of the real clock within seconds. d <= 0 keeps the config's.
func WithEvery(d time.Duration) Option {
	return func(h *Heartbeat) {
		if d > 0 {
			h.cfg.Every = d
		}
	}
}

// New checks cfg and returns a heartbeat. It does no I/O and starts nothing.
func New(b *bus.Bus, cfg Config, opts ...Option) (*Heartbeat, error) {
	if b == nil {
		return nil, errors.New("heartbeat: nil bus")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	hours, err := activehours.Parse("heartbeat.active_hours", cfg.ActiveHours)
	if err != nil {
		return nil, err
	}
	h := &Heartbeat{bus: b, cfg: cfg, hours: hours, log: zap.NewNop(), clock: clock.Real{}, queuePoll: 2 * time.Second, timers: bus.NewTimers(b)}
	for _, o := range opts {
		o(h)
	}
	base := h.checklist
	h.checklist = cfg.Checklist
	if !filepath.IsAbs(h.checklist) && base != "" {
		h.checklist = filepath.Join(base, h.checklist)
	}
	if cfg.ChecklistInMemory && h.memory == nil {
		return nil, errors.New("heartbeat.checklist_in_memory: the heartbeat has no memory to read it from (WithMemory)")
	}
	h.log = h.log.With(zap.String("heartbeat", cfg.Name))
	return h, nil
}

// Config returns the effective configuration (defaults filled).
func (h *Heartbeat) Config() Config { return h.cfg }

// ChecklistPath is the resolved path of the checklist.
func (h *Heartbeat) ChecklistPath() string { return h.checklist }

// Run, when the heartbeat is enabled, fires the schedule until ctx is
// done: it makes sure the heartbeat's timer is armed and handles its fires
// (with every other instance on the bus, through one durable consumer).
// It returns nil on cancellation, an error when the consumer of the
// timer's fires is lost (the NATS API is Service, served beside Run).
func (h *Heartbeat) Run(ctx context.Context) error {
	if !h.cfg.Enabled {
		h.log.Info("heartbeat disabled; it runs only on wake")
		if err := h.timers.Cancel(ctx, h.timerKey()); err != nil && ctx.Err() == nil {
			h.log.Warn("timer not cancelled", zap.Error(err))
		}
		if err := h.updateState(ctx, func(st *State) bool {
			changed := !st.NextFire.IsZero()
			st.NextFire = time.Time{}
			return changed
		}); err != nil && ctx.Err() == nil {
			h.log.Warn("state not written", zap.Error(err))
		}
		<-ctx.Done()
		return nil
	}
	if _, _, status, detail, err := h.checklistNow(ctx); err != nil || status != "" {
		h.log.Warn("heartbeats will be skipped until the checklist has items", zap.String("reason", status), zap.String("detail", detail), zap.Error(err))
	}
	w, err := bus.NewWorker(h.bus.JetStream(), bus.WorkerConfig{
		Stream: bus.StreamTimers,
		Consumer: jetstream.ConsumerConfig{
			Durable:       "heartbeat-" + h.cfg.Name,
			Description:   "agentwork heartbeat " + h.cfg.Name + ": its timer's fires",
			FilterSubject: h.bus.Subjects.TimerFired(h.timerKey()),
			AckPolicy:     jetstream.AckExplicitPolicy,
			MaxDeliver:    -1,
		},
		Log: h.log,
	}, h.handle)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	h.log.Info("heartbeat scheduled", zap.Duration("every", h.cfg.Every), zap.String("active_hours", h.hours.String()), zap.String("checklist", h.checklist))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Run(gctx) })
	g.Go(func() error { h.arm(gctx); return nil })
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// timerKey is the heartbeat's timer in the time engine.
func (h *Heartbeat) timerKey() string { return "heartbeat." + h.cfg.Name }

// timerData is what the heartbeat's timer carries: the tick it is due for.
type timerData struct {
	Tick time.Time `json:"tick"`
}

// arm makes sure at start that the timer is armed for the next tick, as
// the state's last fire says: it sets it when none is pending or the
// pending one is due at another time (the interval or active hours
// changed). Every instance does this; the time engine keeps one timer per
// key, and a fire that finds nothing due re-arms, so two instances arming
// at once cost at most a spare fire. It retries until it succeeds or ctx
// ends.
func (h *Heartbeat) arm(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		err := h.armOnce(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		wait := backoff(attempt + 1)
		h.log.Warn("heartbeat timer not armed; retrying", zap.Duration("retry_in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (h *Heartbeat) armOnce(ctx context.Context) error {
	st, _, err := h.loadState(ctx)
	if err != nil {
		return err
	}
	tick := h.plan(st.rhythm(), h.clock.Now())
	p, err := h.timers.Pending(ctx, h.timerKey())
	switch {
	case errors.Is(err, bus.ErrNoTimer):
	case err != nil:
		return err
	case p.Due.Equal(tick):
		return h.setNext(ctx, tick)
	}
	if err := h.setTimer(ctx, tick); err != nil {
		return err
	}
	return h.setNext(ctx, tick)
}

func (h *Heartbeat) setTimer(ctx context.Context, tick time.Time) error {
	data, err := json.Marshal(timerData{Tick: tick.UTC()})
	if err != nil {
		return err
	}
	return h.timers.Set(ctx, h.timerKey(), tick, data)
}

// setNext records the next fire in the state.
func (h *Heartbeat) setNext(ctx context.Context, tick time.Time) error {
	return h.updateState(ctx, func(st *State) bool {
		changed := !st.NextFire.Equal(tick)
		st.NextFire = tick.UTC()
		return changed
	})
}

// handle is the handler of the timer's fires: it publishes the tick that
// is due (with the message id heartbeat:<name>:<tick>, so a repeat is
// stored once), records it as the last fire, and arms the timer for the
// next tick. Any bus failure retries the whole fire: each step is
// idempotent, and the tick is worked out again from the state.
func (h *Heartbeat) handle(ctx context.Context, m jetstream.Msg) bus.Verdict {
	t, err := h.timers.DecodeTimer(m.Subject(), m.Data())
	if err != nil {
		h.log.Error("not a heartbeat timer; dropped", zap.String("subject", m.Subject()), zap.Error(err))
		return bus.Terminate()
	}
	var d timerData
	if len(t.Data) > 0 {
		if err := json.Unmarshal(t.Data, &d); err != nil {
			h.log.Warn("heartbeat timer data unreadable; the tick is worked out from the state", zap.Error(err))
		}
	}
	if err := h.fire(ctx, d.Tick); err != nil {
		if ctx.Err() != nil {
			return bus.Defer(0)
		}
		n := 1
		if md, merr := m.Metadata(); merr == nil {
			n = int(md.NumDelivered)
		}
		wait := backoff(n)
		h.log.Warn("heartbeat fire failed; retrying", zap.Time("tick", d.Tick), zap.Int("attempt", n), zap.Duration("retry_in", wait), zap.Error(err))
		return bus.Retry(wait)
	}
	return bus.Done()
}

// fire publishes the tick due now, if any (armed is the tick the timer was
// set for), records it and arms the timer for the next one. While the
// heartbeat is paused the tick is passed over instead: recorded, not
// published. The first tick at or after the end of a pause that lifts
// itself (the budget's: the next midnight) lifts it and runs.
func (h *Heartbeat) fire(ctx context.Context, armed time.Time) error {
	st, _, err := h.loadState(ctx)
	if err != nil {
		return err
	}
	now := h.clock.Now()
	if st.Paused && st.PausedUntil != nil && !now.Before(*st.PausedUntil) {
		if st, err = h.lift(ctx, *st.PausedUntil); err != nil {
			return err
		}
		if !st.Paused {
			h.log.Info("heartbeat resumed: its pause ended")
		}
	}
	last := st.rhythm()
	var fired, passed time.Time
	if tick, ok := h.due(last, armed, now); ok {
		if st.pausedAt(now) {
			h.log.Debug("heartbeat tick passed over: paused", zap.Time("tick", tick), zap.String("reason", st.PausedReason))
			passed = tick
		} else {
			req, err := h.request(ctx, tick, false)
			if err != nil {
				return err
			}
			pub, err := agentwork.Publish(ctx, h.bus, req, agentwork.PublishOptions{MsgID: MsgID(h.cfg.Name, tick), Now: now})
			if err != nil {
				return fmt.Errorf("publish the tick of %s: %w", tick.Format(time.RFC3339), err)
			}
			h.log.Info("heartbeat fired", zap.Time("tick", tick), zap.String("request", pub.ID), zap.Bool("duplicate", pub.Duplicate))
			fired = tick
		}
		last = tick
	}
	next := h.plan(last, now)
	if err := h.updateState(ctx, func(st *State) bool {
		if fired.After(st.LastFire) {
			st.LastFire = fired.UTC()
		}
		if passed.After(st.Passed) {
			st.Passed = passed.UTC()
		}
		st.NextFire = next.UTC()
		return true
	}); err != nil {
		return err
	}
	return h.setTimer(ctx, next)
}

// lift ends a pause that was until until (the budget's) and returns the
// state: unchanged when it was resumed, or paused again, meanwhile.
func (h *Heartbeat) lift(ctx context.Context, until time.Time) (State, error) {
	var out State
	err := h.updateState(ctx, func(st *State) bool {
		out = *st
		if !st.Paused || st.PausedUntil == nil || !st.PausedUntil.Equal(until) {
			return false
		}
		st.unpause()
		out = *st
		return true
	})
	return out, err
}

// due returns the tick to fire at now, if one is due: the one plan gives
// after the last fire (after downtime the latest missed tick: missed ticks
// collapse into one), or, before the first fire, the tick the timer was
// armed for (the latest of its rhythm when the fire is that late too).
func (h *Heartbeat) due(last, armed, now time.Time) (time.Time, bool) {
	tick := armed
	switch every := h.cfg.Every; {
	case !last.IsZero():
		tick = h.plan(last, now)
	case !armed.IsZero() && !armed.Add(every).After(now):
		tick = armed.Add(now.Sub(armed) / every * every)
	}
	if tick.IsZero() || tick.After(now) || !tick.After(last) {
		return time.Time{}, false
	}
	return tick, true
}

// plan returns the next tick after the last fire. Every instance computes
// the same ticks from the same state, and the message id makes each fire
// once:
//
//   - no fire yet: the next multiple of Every (since the zero time, i.e.
//     aligned to UTC midnight for intervals that divide a day);
//   - otherwise last + Every; after downtime (that is past), the most
//     recent missed tick, at once: missed ticks collapse into one;
//   - a tick outside the active hours is kept once per closed window (its
//     run skips "outside-active-hours", so history shows the pause); later
//     ones are replaced by the instant the window opens.
func (h *Heartbeat) plan(last, now time.Time) time.Time {
	every := h.cfg.Every
	var t time.Time
	switch {
	case last.IsZero():
		t = now.Truncate(every)
		if t.Before(now) {
			t = t.Add(every)
		}
	case last.Add(every).After(now):
		t = last.Add(every)
	default:
		t = last.Add(now.Sub(last) / every * every)
	}
	if h.hours.Contains(t) {
		return t.UTC()
	}
	if last.IsZero() || h.hours.Contains(last) || !h.hours.Next(last).After(t) {
		return t.UTC() // the first tick since the window closed: record it
	}
	return h.hours.Next(t).UTC()
}

// backoff is the wait before the attempt after attempt n (1: the first).
func backoff(n int) time.Duration {
	return min(time.Second<<min(max(n-1, 0), 5), 30*time.Second)
}

// MsgID is the Nats-Msg-Id of the request of a tick:
// heartbeat:<name>:<scheduled time, RFC 3339 UTC>.
func MsgID(name string, tick time.Time) string {
	return "heartbeat:" + name + ":" + tick.UTC().Format(time.RFC3339)
}

// Wake publishes a heartbeat to run now (Manual). It does not move the
// schedule. It runs even when the heartbeat is disabled or outside its
// active hours (it is an explicit act); the checklist, overlap and dedup
// gates still apply.
func (h *Heartbeat) Wake(ctx context.Context) (agentwork.Published, error) {
	now := h.clock.Now()
	req, err := h.request(ctx, now, true)
	if err != nil {
		return agentwork.Published{}, fmt.Errorf("heartbeat: wake: %w", err)
	}
	pub, err := agentwork.Publish(ctx, h.bus, req, agentwork.PublishOptions{Now: now})
	if err != nil {
		return pub, fmt.Errorf("heartbeat: wake: %w", err)
	}
	h.log.Info("heartbeat woken", zap.String("request", pub.ID))
	return pub, nil
}

// Metadata keys of a request whose checklist cannot be used; the input gate
// skips it.
const (
	metaChecklist       = "heartbeat_checklist"
	metaChecklistDetail = "heartbeat_checklist_detail"
)

// request builds the request of a heartbeat at `at`, reading the checklist
// now (edits apply without a restart). An error is the memory's, when the
// checklist lives there and cannot be read.
func (h *Heartbeat) request(ctx context.Context, at time.Time, manual bool) (agentwork.Request, error) {
	c, name, status, detail, err := h.checklistNow(ctx)
	if err != nil {
		return agentwork.Request{}, err
	}
	instr, deliver := h.cfg.Prompt, agentwork.DeliverNotify
	if h.cfg.OutputMode == ModeOKToken {
		deliver = agentwork.DeliverReply
		if instr == "" {
			instr = DefaultOKTokenPrompt
		}
	} else if instr == "" {
		instr = DefaultPrompt
	}
	loc := time.Local
	if !h.hours.IsAlways() {
		loc = h.hours.Location()
	}
	req := agentwork.Request{
		Source:  bus.SourceHeartbeat,
		Name:    h.cfg.Name,
		Prompt:  buildPrompt(instr, at, loc, name, c),
		Targets: h.cfg.Targets,
		Deliver: deliver,
		Manual:  manual,
	}
	if !manual {
		tick := at.UTC()
		req.ScheduledAt = &tick
	}
	if status != "" {
		req.Metadata = map[string]string{metaChecklist: status, metaChecklistDetail: detail}
	}
	return req, nil
}
