package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/triggers/activehours"
)

// Heartbeat fires one heartbeat on a schedule and owns its policy, state
// and control surface (NATS service, HTTP routes). Run one per instance: N
// instances on one bus fire each tick once and run one heartbeat at a time.
type Heartbeat struct {
	bus       *bus.Bus
	cfg       Config
	hours     activehours.Schedule
	checklist string // resolved path
	log       *zap.Logger
	clock     clock.Clock
	queuePoll time.Duration
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
	h := &Heartbeat{bus: b, cfg: cfg, hours: hours, log: zap.NewNop(), clock: clock.Real{}, queuePoll: 2 * time.Second}
	for _, o := range opts {
		o(h)
	}
	base := h.checklist
	h.checklist = cfg.Checklist
	if !filepath.IsAbs(h.checklist) && base != "" {
		h.checklist = filepath.Join(base, h.checklist)
	}
	h.log = h.log.With(zap.String("heartbeat", cfg.Name))
	return h, nil
}

// Config returns the effective configuration (defaults filled).
func (h *Heartbeat) Config() Config { return h.cfg }

// ChecklistPath is the resolved path of the checklist.
func (h *Heartbeat) ChecklistPath() string { return h.checklist }

// Run fires the schedule, when enabled, until ctx is done, and returns nil
// (the NATS API is Service, served beside Run).
func (h *Heartbeat) Run(ctx context.Context) error {
	if !h.cfg.Enabled {
		h.log.Info("heartbeat disabled; it runs only on wake")
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
	if _, status, detail := readChecklist(h.checklist); status != "" {
		h.log.Warn("heartbeats will be skipped until the checklist has items", zap.String("reason", status), zap.String("detail", detail))
	}
	h.log.Info("heartbeat scheduled", zap.Duration("every", h.cfg.Every), zap.String("active_hours", h.hours.String()), zap.String("checklist", h.checklist))
	h.loop(ctx)
	return nil
}

// loop fires ticks until ctx is done.
func (h *Heartbeat) loop(ctx context.Context) {
	var last time.Time
	for attempt := 0; ; attempt++ {
		st, _, err := h.loadState(ctx)
		if err == nil {
			last = st.LastFire
			break
		}
		h.log.Warn("cannot read heartbeat state; retrying", zap.Error(err))
		if !h.wait(ctx, backoff(attempt)) {
			return
		}
	}
	for {
		tick := h.plan(last, h.clock.Now())
		if err := h.updateState(ctx, func(st *State) bool {
			changed := !st.NextFire.Equal(tick)
			st.NextFire = tick
			return changed
		}); err != nil && ctx.Err() == nil {
			h.log.Warn("state not written", zap.Error(err))
		}
		if !h.sleepUntil(ctx, tick) {
			return
		}
		h.fire(ctx, tick)
		last = tick
	}
}

// plan returns the next tick after the last fire. Every instance computes
// the same ticks from the same state, so the tick claim and the message id
// make each fire once:
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

// maxSleep caps one timer so a suspended machine or a stepped clock is
// noticed within a minute.
const maxSleep = time.Minute

// sleepUntil waits until the clock reaches t; false when ctx ended first.
func (h *Heartbeat) sleepUntil(ctx context.Context, t time.Time) bool {
	for {
		d := t.Sub(h.clock.Now())
		if d <= 0 {
			return true
		}
		if !h.wait(ctx, min(d, maxSleep)) {
			return false
		}
	}
}

// wait waits d on the clock; false when ctx ended first.
func (h *Heartbeat) wait(ctx context.Context, d time.Duration) bool {
	tm := h.clock.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C():
		return true
	}
}

func backoff(attempt int) time.Duration {
	return min(time.Second<<min(attempt, 5), 30*time.Second)
}

// fire publishes the tick unless another instance did, retrying a failed
// publish a few times. A tick that cannot be published is logged as lost.
func (h *Heartbeat) fire(ctx context.Context, tick time.Time) {
	const attempts = 5
	for attempt := range attempts {
		wait, err := h.fireOnce(ctx, tick)
		if ctx.Err() != nil || (err == nil && wait == 0) {
			return
		}
		if err == nil {
			// Another instance claimed the tick but has not published it
			// yet: look again when its claim expires (taken over then if
			// that instance died).
			if !h.wait(ctx, wait) {
				return
			}
			continue
		}
		if attempt == attempts-1 {
			h.log.Error("heartbeat tick lost: it could not be published", zap.Time("tick", tick), zap.Error(err))
			return
		}
		h.log.Warn("heartbeat tick not published; retrying", zap.Time("tick", tick), zap.Error(err))
		if !h.wait(ctx, backoff(attempt)) {
			return
		}
	}
}

// tickKey is the agentwork_locks key that claims one tick.
func (h *Heartbeat) tickKey(tick time.Time) string {
	return fmt.Sprintf("heartbeat.%s.tick.%d", h.cfg.Name, tick.Unix())
}

// MsgID is the Nats-Msg-Id of the request of a tick:
// heartbeat:<name>:<scheduled time, RFC 3339 UTC>.
func MsgID(name string, tick time.Time) string {
	return "heartbeat:" + name + ":" + tick.UTC().Format(time.RFC3339)
}

// tickClaim is the record of a tick claim in agentwork_locks. A claim still
// "claimed" whose lease is no longer held belongs to an instance that died
// between claim and publish; another instance takes it over (the publish is
// idempotent by its message id).
type tickClaim struct {
	State string `json:"state"` // claimed | published
	bus.Lease
}

// claimTTL is how long a claimed tick may stay unpublished before another
// instance takes it over.
const claimTTL = 30 * time.Second

// fireOnce claims and publishes the tick. wait > 0 means another instance
// holds the claim and has not published yet: look again after wait.
func (h *Heartbeat) fireOnce(ctx context.Context, tick time.Time) (wait time.Duration, err error) {
	kv, key := h.bus.Locks, h.tickKey(tick)
	now := h.clock.Now()
	mine := tickClaim{State: "claimed", Lease: h.bus.NewLease(now.Add(claimTTL))}
	var held tickClaim
	took := true // unless the create conflicts
	_, rev, err := bus.UpdateAt(ctx, kv, key, mine, 0, func(c *tickClaim, found bool) (bool, error) {
		held, took = *c, false
		if found && (c.State != "claimed" || h.bus.Held(c.Lease, now)) {
			return false, nil // fired by another instance, or it fires it now
		}
		*c, took = mine, true
		return true, nil
	})
	if errors.As(err, new(*bus.CorruptError)) {
		h.log.Debug("tick fired by another instance", zap.Time("tick", tick))
		return 0, nil // nobody but us writes it: not a claim we could take
	}
	if err != nil {
		return 0, fmt.Errorf("claim tick %s: %w", key, err)
	}
	if !took {
		if held.State != "claimed" {
			h.log.Debug("tick fired by another instance", zap.Time("tick", tick))
			return 0, nil
		}
		return held.Expires.Sub(now), nil
	}
	if held.State == "claimed" {
		h.log.Warn("took over a tick whose instance stopped before publishing it", zap.Time("tick", tick), zap.String("owner", held.Owner))
	}
	req := h.request(tick, false)
	pub, err := agentwork.Publish(ctx, h.bus, req, agentwork.PublishOptions{MsgID: MsgID(h.cfg.Name, tick), Now: now})
	if err != nil {
		// Let a retry (ours or another instance's) claim it again.
		if rerr := bus.Release(context.WithoutCancel(ctx), kv, key, mine.Token, rev); rerr != nil {
			h.log.Warn("release tick claim", zap.Error(rerr))
		}
		return 0, err
	}
	done := tickClaim{State: "published", Lease: bus.Lease{Owner: mine.Owner, Token: mine.Token}}
	if _, _, err := bus.UpdateAt(ctx, kv, key, done, rev, func(c *tickClaim, found bool) (bool, error) {
		if !found || c.Token != mine.Token {
			return false, nil // taken over meanwhile; the message id kept the publish once
		}
		*c = done
		return true, nil
	}); err != nil {
		h.log.Debug("mark tick published", zap.Error(err))
	}
	h.log.Info("heartbeat fired", zap.Time("tick", tick), zap.String("request", pub.ID), zap.Bool("duplicate", pub.Duplicate))
	if err := h.updateState(ctx, func(st *State) bool {
		if !tick.After(st.LastFire) {
			return false
		}
		st.LastFire = tick
		return true
	}); err != nil {
		h.log.Warn("state not written", zap.Error(err))
	}
	return 0, nil
}

// Wake publishes a heartbeat to run now (Manual). It does not move the
// schedule. It runs even when the heartbeat is disabled or outside its
// active hours (it is an explicit act); the checklist, overlap and dedup
// gates still apply.
func (h *Heartbeat) Wake(ctx context.Context) (agentwork.Published, error) {
	now := h.clock.Now()
	pub, err := agentwork.Publish(ctx, h.bus, h.request(now, true), agentwork.PublishOptions{Now: now})
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
// now (edits apply without a restart).
func (h *Heartbeat) request(at time.Time, manual bool) agentwork.Request {
	c, status, detail := readChecklist(h.checklist)
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
		Prompt:  buildPrompt(instr, at, loc, filepath.Base(h.checklist), c),
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
	return req
}
