package cron

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// Service verbs: the NATS request-reply API on <prefix>.api.cron.<verb>,
// a bus.Service. Requests and replies are JSON; an error comes back as a
// bus.ServiceError (an Error) in the NATS micro error headers and body.
const (
	VerbList    = "list"    // {"after", "limit"} → [Status], a page
	VerbPage    = "page"    // {"after", "limit"} → ServicePage (see pageBytes)
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
	After  string          `json:"after,omitempty"`
	Reason string          `json:"reason,omitempty"`
	Limit  int             `json:"limit,omitempty"`
	Patch  json.RawMessage `json:"patch,omitempty"`
}

// Service is the jobs API on NATS, as every instance serves it.
func (s *Scheduler) Service() bus.Service {
	svc := bus.Service{
		Name:        bus.SourceCron,
		Description: "agentwork cron jobs: list, page, get, add, update, delete, pause, resume, run, history",
		QueueGroup:  ServiceQueue,
	}
	for _, verb := range []string{VerbList, VerbPage, VerbGet, VerbAdd, VerbUpdate, VerbDelete, VerbPause, VerbResume, VerbRun, VerbHistory} {
		svc.Endpoints = append(svc.Endpoints, bus.Endpoint{Verb: verb, Handle: func(ctx context.Context, body []byte) (any, error) {
			return s.dispatch(ctx, verb, body)
		}})
	}
	return svc
}

func (s *Scheduler) dispatch(ctx context.Context, verb string, body []byte) (any, error) {
	var r ServiceRequest
	if verb != VerbAdd && len(body) > 0 {
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, apiErr(ErrBadRequest, "request body: %v", err)
		}
	}
	switch verb {
	case VerbList:
		page, _, err := s.List(ctx, ListQuery{After: r.After, Limit: r.Limit})
		return page, err
	case VerbPage:
		return s.servicePage(ctx, r.After, r.Limit)
	case VerbGet:
		return s.Get(ctx, r.ID)
	case VerbAdd:
		var j Job
		if err := decodeStrict(body, &j); err != nil {
			return nil, apiErr(ErrInvalid, "job: %v", err)
		}
		return s.Add(ctx, j)
	case VerbUpdate:
		return s.Update(ctx, r.ID, r.Patch)
	case VerbDelete:
		return struct{}{}, s.Delete(ctx, r.ID)
	case VerbPause:
		return s.Pause(ctx, r.ID, r.Reason)
	case VerbResume:
		return s.Resume(ctx, r.ID)
	case VerbRun:
		return s.RunNow(ctx, r.ID)
	case VerbHistory:
		return s.History(ctx, r.ID, r.Limit)
	}
	return nil, apiErr(ErrBadRequest, "unknown verb %q", verb)
}

// ServicePage is the reply of the page verb: jobs with their state,
// sorted by id, and whether more follow the last.
type ServicePage struct {
	Jobs []Status `json:"jobs"`
	More bool     `json:"more"`
}

// pageBytes bounds a reply of the page verb: it ends before the job
// that would take it past this size, or past half the largest message
// the NATS server takes, and holds one job at least. Without it, a
// thousand jobs with long prompts would not fit in a message (1 MB by
// default on a NATS server of one's own).
const pageBytes = 512 << 10

// servicePage answers the page verb: up to limit jobs (MaxListLimit
// when 0) after the id after, encoded here, as many as fit in pageBytes.
func (s *Scheduler) servicePage(ctx context.Context, after string, limit int) (json.RawMessage, error) {
	switch {
	case limit == 0:
		limit = MaxListLimit
	case limit < 0 || limit > MaxListLimit:
		return nil, apiErr(ErrBadRequest, "limit %d: want 1 to %d", limit, MaxListLimit)
	}
	budget := s.bus.HalfPayload(pageBytes)
	page, more, err := s.pageOf(ctx, after, limit, nil)
	if err != nil {
		return nil, err
	}
	const end = len(`],"more":false}`)
	out := []byte(`{"jobs":[`)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a prompt's < > & as they are, not six bytes each
	for i, p := range page {
		b.Reset()
		if err := enc.Encode(s.status(p.j, p.st)); err != nil {
			return nil, err
		}
		status := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
		if i > 0 {
			if len(out)+1+len(status)+end > budget {
				more = true
				break
			}
			out = append(out, ',')
		}
		out = append(out, status...)
	}
	if more {
		return append(out, `],"more":true}`...), nil
	}
	return append(out, `],"more":false}`...), nil
}

// Client talks to the cron service of a running agentwork over NATS.
// Safe for concurrent use.
type Client struct {
	bus *bus.Bus
}

// NewClient returns a client over b (from bus.Dial, or an instance's own bus).
func NewClient(b *bus.Bus) *Client { return &Client{bus: b} }

// call makes one request; an error the service answered is an *Error.
// Without a deadline on ctx it waits bus.DefaultServiceTimeout.
func (c *Client) call(ctx context.Context, verb string, req, out any) error {
	err := c.bus.Call(ctx, bus.SourceCron, verb, req, out)
	if errors.Is(err, bus.ErrNoService) {
		return fmt.Errorf("cron: %w: is `agentwork serve` running (with the cron trigger)?", err)
	}
	return err
}

// List returns every job with its state, asking for them a page at a
// time: pages of up to MaxListLimit (the page verb), or of
// DefaultListLimit from instances that do not serve it (an earlier
// version). Such a server that does not page at all answers everything
// at once; the listing then ends when a page does not move past the last
// one.
func (c *Client) List(ctx context.Context) ([]Status, error) {
	var pages [][]Status // put together once at the end: a status is 1 KB
	for after := ""; ; {
		var page ServicePage
		err := c.bus.Call(ctx, bus.SourceCron, VerbPage, ServiceRequest{After: after, Limit: MaxListLimit}, &page)
		if errors.Is(err, bus.ErrNoService) {
			// No instance serves it (or none does any more): on from
			// after through the list verb.
			return c.listPages(ctx, after, pages)
		}
		if err != nil {
			return slices.Concat(pages...), err
		}
		pages = append(pages, page.Jobs)
		if !page.More || len(page.Jobs) == 0 {
			return slices.Concat(pages...), nil
		}
		after = page.Jobs[len(page.Jobs)-1].Job.ID
	}
}

// listPages is List through the list verb, DefaultListLimit a page,
// from the job after after on, after the pages listed so far.
func (c *Client) listPages(ctx context.Context, after string, pages [][]Status) ([]Status, error) {
	for {
		var page []Status
		if err := c.call(ctx, VerbList, ServiceRequest{After: after, Limit: DefaultListLimit}, &page); err != nil {
			return slices.Concat(pages...), err
		}
		if len(page) > 0 && after != "" && page[0].Job.ID <= after {
			// Not paged: every job again; those after after are new here.
			if i := slices.IndexFunc(page, func(st Status) bool { return st.Job.ID > after }); i >= 0 {
				pages = append(pages, page[i:])
			}
			return slices.Concat(pages...), nil
		}
		pages = append(pages, page)
		if len(page) < DefaultListLimit {
			return slices.Concat(pages...), nil
		}
		after = page[len(page)-1].Job.ID
	}
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

// History returns a job's latest run events, newest first.
func (c *Client) History(ctx context.Context, id string, limit int) ([]agentwork.Record, error) {
	var out []agentwork.Record
	return out, c.call(ctx, VerbHistory, ServiceRequest{ID: id, Limit: limit}, &out)
}
