package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// Service verbs: the NATS request-reply API on <prefix>.api.cron.<verb>.
// Requests and replies are JSON; a reply is {"data": ...} or
// {"error": {"status": 404, "code": "not_found", "detail": "..."}}.
const (
	VerbList    = "list"    // {} → [Status]
	VerbGet     = "get"     // {"id"} → Status
	VerbAdd     = "add"     // Job → Status
	VerbUpdate  = "update"  // {"id", "patch": {merge patch}} → Status
	VerbDelete  = "delete"  // {"id"} → {}
	VerbPause   = "pause"   // {"id", "reason"} → Status
	VerbResume  = "resume"  // {"id"} → Status
	VerbRun     = "run"     // {"id"} → RunResult
	VerbHistory = "history" // {"id", "limit"} → [agentwork.Record]
)

// ServiceQueue is the queue group of the service: one instance answers.
const ServiceQueue = "agentwork-cron"

// ServiceRequest is the body of the id-based verbs.
type ServiceRequest struct {
	ID     string          `json:"id,omitempty"`
	Reason string          `json:"reason,omitempty"`
	Limit  int             `json:"limit,omitempty"`
	Patch  json.RawMessage `json:"patch,omitempty"`
}

// ServiceReply is the body of every reply.
type ServiceReply struct {
	Data  json.RawMessage `json:"data,omitempty"`
	Error *Error          `json:"error,omitempty"`
}

// serve answers the NATS API until ctx ends.
func (s *Scheduler) serve(ctx context.Context) error {
	nc := s.bus.Conn()
	var subs []*nats.Subscription
	defer func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}()
	for _, verb := range []string{VerbList, VerbGet, VerbAdd, VerbUpdate, VerbDelete, VerbPause, VerbResume, VerbRun, VerbHistory} {
		sub, err := nc.QueueSubscribe(s.bus.Subjects.Service(bus.SourceCron, verb), ServiceQueue, func(m *nats.Msg) {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			data, err := s.dispatch(rctx, verb, m.Data)
			reply := ServiceReply{Data: data}
			if err != nil {
				reply = ServiceReply{Error: toAPIError(err)}
				if reply.Error.Status >= 500 {
					s.log.Warn("cron api", zap.String("verb", verb), zap.Error(err))
				}
			}
			b, _ := json.Marshal(reply)
			if err := m.Respond(b); err != nil {
				s.log.Debug("cron api: reply not sent", zap.Error(err))
			}
		})
		if err != nil {
			return fmt.Errorf("cron: serve %s: %w", verb, err)
		}
		subs = append(subs, sub)
	}
	<-ctx.Done()
	return nil
}

func (s *Scheduler) dispatch(ctx context.Context, verb string, body []byte) (json.RawMessage, error) {
	var r ServiceRequest
	if verb != VerbAdd && len(body) > 0 {
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, apiErr(ErrBadRequest, "request body: %v", err)
		}
	}
	var out any
	var err error
	switch verb {
	case VerbList:
		out, err = s.List(ctx)
	case VerbGet:
		out, err = s.Get(ctx, r.ID)
	case VerbAdd:
		var j Job
		if err := decodeStrict(body, &j); err != nil {
			return nil, apiErr(ErrInvalid, "job: %v", err)
		}
		out, err = s.Add(ctx, j)
	case VerbUpdate:
		out, err = s.Update(ctx, r.ID, r.Patch)
	case VerbDelete:
		err = s.Delete(ctx, r.ID)
		out = struct{}{}
	case VerbPause:
		out, err = s.Pause(ctx, r.ID, r.Reason)
	case VerbResume:
		out, err = s.Resume(ctx, r.ID)
	case VerbRun:
		out, err = s.RunNow(ctx, r.ID)
	case VerbHistory:
		out, err = s.History(ctx, r.ID, r.Limit)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

func toAPIError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: 500, Code: "internal", Detail: err.Error()}
}

// Client talks to the cron service of a running agentwork over NATS.
// Safe for concurrent use.
type Client struct {
	bus *bus.Bus
}

// NewClient returns a client over b (from bus.Dial, or an instance's own bus).
func NewClient(b *bus.Bus) *Client { return &Client{bus: b} }

func (c *Client) call(ctx context.Context, verb string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	subject := c.bus.Subjects.Service(bus.SourceCron, verb)
	m, err := c.bus.Conn().RequestWithContext(ctx, subject, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("cron: nothing answers on %s: is `agentwork serve` running (with the cron trigger)?", subject)
	}
	if err != nil {
		return fmt.Errorf("cron: %s: %w", verb, err)
	}
	var reply ServiceReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return fmt.Errorf("cron: %s: unreadable reply: %w", verb, err)
	}
	if reply.Error != nil {
		return reply.Error
	}
	if out == nil || len(reply.Data) == 0 {
		return nil
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("cron: %s: unreadable reply: %w", verb, err)
	}
	return nil
}

// List returns every job with its state.
func (c *Client) List(ctx context.Context) ([]Status, error) {
	var out []Status
	return out, c.call(ctx, VerbList, struct{}{}, &out)
}

// Get returns one job.
func (c *Client) Get(ctx context.Context, id string) (Status, error) {
	var out Status
	return out, c.call(ctx, VerbGet, ServiceRequest{ID: id}, &out)
}

// Add creates a job.
func (c *Client) Add(ctx context.Context, j Job) (Status, error) {
	var out Status
	return out, c.call(ctx, VerbAdd, j, &out)
}

// Update applies a JSON merge patch to a job.
func (c *Client) Update(ctx context.Context, id string, patch json.RawMessage) (Status, error) {
	var out Status
	return out, c.call(ctx, VerbUpdate, ServiceRequest{ID: id, Patch: patch}, &out)
}

// Delete removes a job.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.call(ctx, VerbDelete, ServiceRequest{ID: id}, nil)
}

// Pause pauses a job with a reason.
func (c *Client) Pause(ctx context.Context, id, reason string) (Status, error) {
	var out Status
	return out, c.call(ctx, VerbPause, ServiceRequest{ID: id, Reason: reason}, &out)
}

// Resume resumes a paused job.
func (c *Client) Resume(ctx context.Context, id string) (Status, error) {
	var out Status
	return out, c.call(ctx, VerbResume, ServiceRequest{ID: id}, &out)
}

// Run fires a job now without moving its schedule.
func (c *Client) Run(ctx context.Context, id string) (RunResult, error) {
	var out RunResult
	return out, c.call(ctx, VerbRun, ServiceRequest{ID: id}, &out)
}

// History returns a job's latest events, newest first.
func (c *Client) History(ctx context.Context, id string, limit int) ([]agentwork.Record, error) {
	var out []agentwork.Record
	return out, c.call(ctx, VerbHistory, ServiceRequest{ID: id, Limit: limit}, &out)
}
