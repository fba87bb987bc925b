package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers/budget"
)

// Status is what `agentwork heartbeat status` shows.
type Status struct {
	Name    string `json:"name"`
	Enabled bool   `json:"enabled"`
	// Every is the interval, e.g. "30m0s".
	Every string `json:"every"`
	// ActiveHours is the window, e.g. "09:00-22:00 Europe/Berlin mon,tue", or "always".
	ActiveHours string `json:"active_hours"`
	// ActiveNow reports whether now is inside the active hours.
	ActiveNow  bool     `json:"active_now"`
	Checklist  string   `json:"checklist"`
	OutputMode string   `json:"output_mode"`
	Overlap    string   `json:"overlap"`
	Targets    []string `json:"targets,omitempty"`
	// Tools are heartbeat.tools (empty: runner.tools).
	Tools []string `json:"tools,omitempty"`
	// Budget is heartbeat.budget; BudgetZone the zone of its day (the
	// active hours' zone, UTC by default).
	Budget     budget.Budget `json:"budget,omitzero"`
	BudgetZone string        `json:"budget_zone"`
	// Running is the lease of the heartbeat running now, if one is.
	Running *Lease `json:"running,omitempty"`
	// State: last and next fire, last run, consecutive errors, the pause,
	// and the tokens of the budget's day (spent: absent when nothing was
	// spent today; a pause that lifted itself by now is shown lifted).
	State
}

// Status reports the configuration of this instance and the shared state.
func (h *Heartbeat) Status(ctx context.Context) (Status, error) {
	st, _, err := h.loadState(ctx)
	if err != nil {
		return Status{}, err
	}
	run, err := h.running(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("heartbeat: read lease: %w", err)
	}
	if !h.cfg.Enabled {
		st.NextFire = time.Time{}
	}
	now := h.clock.Now()
	if st.Paused && !st.pausedAt(now) {
		st.unpause() // its next tick lifts it in the state
	}
	loc := h.hours.Location()
	if st.Spent != nil && st.Spent.Day != now.In(loc).Format(time.DateOnly) {
		st.Spent = nil
	}
	checklist := h.checklist
	if abs, err := filepath.Abs(checklist); err == nil {
		checklist = abs // the CLI may run elsewhere than the server
	}
	if h.cfg.ChecklistInMemory {
		checklist = "memory: checklist (filled from " + checklist + " if never written)"
	}
	return Status{
		Name: h.cfg.Name, Enabled: h.cfg.Enabled, Every: h.cfg.Every.String(),
		ActiveHours: h.hours.String(), ActiveNow: h.hours.Contains(now),
		Checklist: checklist, OutputMode: h.cfg.OutputMode, Overlap: h.cfg.Overlap, Targets: h.cfg.Targets, Tools: h.cfg.Tools,
		Budget: h.cfg.Budget, BudgetZone: loc.String(),
		Running: run, State: st,
	}, nil
}

// Pause passes over the scheduled heartbeats until Resume, on every
// instance (a wake still runs), with a reason shown in its status. It
// replaces a pause of the budget: this one does not lift itself.
func (h *Heartbeat) Pause(ctx context.Context, reason string) (Status, error) {
	if reason == "" {
		reason = "paused by hand"
	}
	now := h.clock.Now().UTC()
	if err := h.updateState(ctx, func(st *State) bool {
		st.Paused, st.PausedReason, st.PausedAt, st.PausedUntil = true, reason, &now, nil
		return true
	}); err != nil {
		return Status{}, err
	}
	h.log.Info("heartbeat paused", zap.String("reason", reason))
	return h.Status(ctx)
}

// Resume lifts a pause (by hand or the budget's) and starts the day's
// count of tokens afresh: a heartbeat its budget paused may spend its
// budget once more today. The next tick of its rhythm runs; the ticks of
// the pause are not caught up.
func (h *Heartbeat) Resume(ctx context.Context) (Status, error) {
	if err := h.updateState(ctx, func(st *State) bool {
		if !st.Paused {
			return false
		}
		st.unpause()
		st.Spent.Reset()
		return true
	}); err != nil {
		return Status{}, err
	}
	h.log.Info("heartbeat resumed")
	return h.Status(ctx)
}

// Service verbs: <prefix>.api.heartbeat.<verb>.
const (
	VerbStatus  = "status"
	VerbWake    = "wake"
	VerbHistory = "history"
	VerbPause   = "pause"
	VerbResume  = "resume"
	// VerbChecklist answers the checklist (a ChecklistView) as the
	// instance that answers reads it.
	VerbChecklist = "checklist"
)

// ServiceRequest is the JSON body of a request to the heartbeat service.
// Every field is optional.
type ServiceRequest struct {
	// Name of the heartbeat. Default "default".
	Name string `json:"name,omitempty"`
	// Limit of history entries. Default 20, at most 500.
	Limit int `json:"limit,omitempty"`
	// Reason of a pause, shown in the status. Default "paused by hand".
	Reason string `json:"reason,omitempty"`
}

// WakeResult is the reply to wake.
type WakeResult struct {
	Name string `json:"name"`
	// ID is the request id: the causationid of the run's event.
	ID string `json:"id"`
}

// HistoryResult is the reply to history.
type HistoryResult struct {
	Runs []agentwork.Record `json:"runs"`
}

// serviceTimeout bounds the work of one service request.
const serviceTimeout = 10 * time.Second

// Service is the heartbeat's API on NATS (status, wake, history, pause,
// resume), as every
// instance serves it: the instances of one heartbeat name share a queue
// group, so one of them answers each request for that name.
func (h *Heartbeat) Service() bus.Service {
	handle := func(fn func(ctx context.Context, r ServiceRequest) (any, error)) func(context.Context, []byte) (any, error) {
		return func(ctx context.Context, body []byte) (any, error) {
			var r ServiceRequest
			if len(body) > 0 {
				if err := json.Unmarshal(body, &r); err != nil {
					return nil, &bus.ServiceError{Status: 400, Code: "bad_request", Detail: "the request body is not a JSON object like {\"name\":\"default\"}: " + err.Error()}
				}
			}
			if r.Name == "" {
				r.Name = DefaultName
			}
			if r.Name != h.cfg.Name {
				return nil, bus.ErrNoReply // another heartbeat's instance answers
			}
			out, err := fn(ctx, r)
			if err != nil {
				return nil, &bus.ServiceError{Status: 503, Code: "unavailable", Detail: err.Error()}
			}
			return out, nil
		}
	}
	return bus.Service{
		Name:        bus.SourceHeartbeat,
		Description: "agentwork heartbeat: status, wake, history, pause, resume, checklist",
		QueueGroup:  "agentwork-heartbeat-" + h.cfg.Name,
		Timeout:     serviceTimeout,
		Endpoints: []bus.Endpoint{
			{Verb: VerbStatus, Handle: handle(func(ctx context.Context, _ ServiceRequest) (any, error) { return h.Status(ctx) })},
			{Verb: VerbWake, Handle: handle(func(ctx context.Context, _ ServiceRequest) (any, error) {
				pub, err := h.Wake(ctx)
				return WakeResult{Name: h.cfg.Name, ID: pub.ID}, err
			})},
			{Verb: VerbHistory, Handle: handle(func(ctx context.Context, r ServiceRequest) (any, error) {
				runs, err := History(ctx, h.bus, h.cfg.Name, r.Limit)
				return HistoryResult{Runs: orEmpty(runs)}, err
			})},
			{Verb: VerbPause, Handle: handle(func(ctx context.Context, r ServiceRequest) (any, error) { return h.Pause(ctx, r.Reason) })},
			{Verb: VerbResume, Handle: handle(func(ctx context.Context, _ ServiceRequest) (any, error) { return h.Resume(ctx) })},
			{Verb: VerbChecklist, Handle: handle(func(ctx context.Context, _ ServiceRequest) (any, error) { return h.Checklist(ctx) })},
		},
	}
}

func orEmpty(r []agentwork.Record) []agentwork.Record {
	if r == nil {
		return []agentwork.Record{}
	}
	return r
}

// Client talks to a running heartbeat over NATS (what the CLI uses).
type Client struct {
	b    *bus.Bus
	name string
}

// NewClient returns a client for the heartbeat name ("" is "default").
func NewClient(b *bus.Bus, name string) *Client {
	if name == "" {
		name = DefaultName
	}
	return &Client{b: b, name: name}
}

// ErrNoHeartbeat means no running agentwork instance answered for the heartbeat.
var ErrNoHeartbeat = errors.New("heartbeat: no running agentwork answered")

// Status returns the heartbeat's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.call(ctx, VerbStatus, ServiceRequest{Name: c.name}, &s)
}

// Wake asks for a heartbeat now and returns its request id.
func (c *Client) Wake(ctx context.Context) (WakeResult, error) {
	var w WakeResult
	return w, c.call(ctx, VerbWake, ServiceRequest{Name: c.name}, &w)
}

// History returns the last limit runs, newest first.
func (c *Client) History(ctx context.Context, limit int) ([]agentwork.Record, error) {
	var h HistoryResult
	err := c.call(ctx, VerbHistory, ServiceRequest{Name: c.name, Limit: limit}, &h)
	return h.Runs, err
}

// Pause pauses the scheduled heartbeats with reason ("" for the default).
func (c *Client) Pause(ctx context.Context, reason string) (Status, error) {
	var s Status
	return s, c.call(ctx, VerbPause, ServiceRequest{Name: c.name, Reason: reason}, &s)
}

// Resume lifts a pause and starts the day's count of tokens afresh.
func (c *Client) Resume(ctx context.Context) (Status, error) {
	var s Status
	return s, c.call(ctx, VerbResume, ServiceRequest{Name: c.name}, &s)
}

// Checklist returns the checklist as the answering instance reads it (a
// file checklist is that instance's file).
func (c *Client) Checklist(ctx context.Context) (ChecklistView, error) {
	var v ChecklistView
	return v, c.call(ctx, VerbChecklist, ServiceRequest{Name: c.name}, &v)
}

func (c *Client) call(ctx context.Context, verb string, in ServiceRequest, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, serviceTimeout+5*time.Second)
		defer cancel()
	}
	err := c.b.Call(ctx, bus.SourceHeartbeat, verb, in, out)
	switch {
	case errors.Is(err, bus.ErrNoService):
		return fmt.Errorf("%w (%w): is `agentwork serve` running with a heartbeat section?", ErrNoHeartbeat, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w for heartbeat %q within the timeout: is a heartbeat with heartbeat.name %q configured?", ErrNoHeartbeat, c.name, c.name)
	case err != nil:
		return fmt.Errorf("heartbeat %s: %w", verb, err)
	}
	return nil
}
