package cron

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools/schedule"
)

// Error is an error of the jobs API: what the NATS service replies (see
// bus.Service) and what HTTP serves as RFC 9457 problem details, with its
// status and code. Compare with errors.Is against the sentinels below
// (same Code).
type Error = bus.ServiceError

// Sentinel API errors.
var (
	ErrNotFound   = &Error{Status: 404, Code: "not_found", Detail: "job not found"}
	ErrExists     = &Error{Status: 409, Code: "exists", Detail: "a job with this id exists"}
	ErrConfigJob  = &Error{Status: 409, Code: "config_job", Detail: "the job is defined in the config file"}
	ErrInvalid    = &Error{Status: 400, Code: "invalid", Detail: "invalid job"}
	ErrNotReady   = &Error{Status: 503, Code: "not_ready", Detail: "the scheduler is still loading"}
	ErrBadRequest = &Error{Status: 400, Code: "bad_request", Detail: "bad request"}
	ErrForbidden  = &Error{Status: 403, Code: "forbidden", Detail: "the job is not the caller's"}
	// ErrConflict: the job is not at the revision the change was made at
	// (If-Match); the code is that of a memory document's conflict.
	ErrConflict = &Error{Status: 412, Code: "conflict", Detail: "the job changed since it was read"}
)

// mayChange checks that the caller of ctx may change or run j. A webhook
// credential acting through the MCP server (an api.Actor via mcp with a
// credential) changes and runs only the jobs it created (Creator's
// credential is its own): a token whose grant allows its jobs only some
// tools and targets could otherwise patch or run a job that has others.
// The admin (also through MCP), the console and the CLI may change any
// job (see mayEdit for what a job does).
func mayChange(ctx context.Context, j Job) error {
	a, ok := api.ActorFrom(ctx)
	if !ok || a.Via != OriginMCP || a.Credential == "" {
		return nil
	}
	return ownedBy(a, j)
}

// mayEdit checks that the caller of ctx may change what j does (its
// prompt, tools, targets, schedule): a webhook credential, through MCP or
// the console, edits only the jobs it created; what a job does is its
// creator's (the console's pause, resume, run and delete of any job stay
// with console: write).
func mayEdit(ctx context.Context, j Job) error {
	a, ok := api.ActorFrom(ctx)
	if !ok || a.Credential == "" {
		return nil
	}
	return ownedBy(a, j)
}

// ownedBy is nil when j was created by a's credential.
func ownedBy(a api.Actor, j Job) error {
	if j.Creator != nil && j.Creator.Credential == a.Credential {
		return nil
	}
	return apiErr(ErrForbidden, "job %q was not created by credential %q: a token (through MCP or the console) changes and runs only its own jobs, so nothing changed; create a job of your own, or ask the operator", j.ID, a.Credential)
}

func apiErr(base *Error, format string, args ...any) *Error {
	return &Error{Status: base.Status, Code: base.Code, Detail: fmt.Sprintf(format, args...)}
}

// Status is a job with its state, as the API shows it.
type Status struct {
	Job   Job   `json:"job"`
	State State `json:"state"`
	// Status is active, paused, disabled, expired, completed or invalid.
	Status string `json:"status"`
	// Next is the next tick (nil when the job will not fire).
	Next *time.Time `json:"next,omitempty"`
	// Error says why an invalid job cannot be scheduled.
	Error string `json:"error,omitempty"`
}

// Job statuses.
const (
	StatusActive    = "active"
	StatusPaused    = "paused"
	StatusDisabled  = "disabled"
	StatusExpired   = "expired"
	StatusCompleted = "completed"
	StatusInvalid   = "invalid"
)

func (s *Scheduler) status(j Job, st State) Status {
	out := Status{Job: j, State: st}
	now := s.clock.Now()
	sched, err := j.Sched()
	if err == nil {
		err = s.validate(j)
	}
	switch {
	case err != nil:
		out.Status, out.Error = StatusInvalid, err.Error()
		return out
	case !j.IsEnabled():
		out.Status = StatusDisabled
	case st.pausedAt(now):
		out.Status = StatusPaused
	case j.MaxRuns > 0 && st.Fires >= j.MaxRuns:
		out.Status = StatusCompleted
	case j.ExpiresAt != nil && !now.Before(*j.ExpiresAt):
		out.Status = StatusExpired
	default:
		out.Status = StatusActive
	}
	if out.Status == StatusActive || (out.Status == StatusPaused && st.PausedUntil != nil) {
		a := anchor(j, st)
		if a.Before(now) {
			a = now
		}
		if n := sched.Next(a); !n.IsZero() && (j.ExpiresAt == nil || !n.After(*j.ExpiresAt)) {
			out.Next = ptr(n.Add(jitter(j.ID, n, time.Duration(j.Jitter))))
		} else if j.At != nil {
			out.Status = StatusCompleted
		}
	}
	return out
}

// Get returns one job, read from the bucket.
func (s *Scheduler) Get(ctx context.Context, id string) (Status, error) {
	st, _, err := s.getRev(ctx, id)
	return st, err
}

// getRev is Get with the revision of the job's record: the ETag of GET
// /v1/jobs/{id}, which a change made at it names (If-Match).
func (s *Scheduler) getRev(ctx context.Context, id string) (Status, uint64, error) {
	j, rev, err := s.readJob(ctx, id)
	if err != nil {
		return Status{}, 0, err
	}
	st, err := readState(ctx, s.bus.State, id)
	if err != nil {
		return Status{}, 0, err
	}
	return s.status(j, st), rev, nil
}

// conflict is the refusal of a change made at revision want of job id,
// which is at revision rev now.
func conflict(id string, want, rev uint64) error {
	return apiErr(ErrConflict, "job %q changed since revision %d was read (it is at revision %d now): nothing was changed; reload it (GET /v1/jobs/%s, whose ETag is its revision) and redo the change", id, want, rev, id)
}

// write says how a change is written: at a revision, or not at all.
type write struct {
	// ifMatch, when set, is the revision the change was made at: the job
	// must still be at it (ErrConflict otherwise).
	ifMatch *uint64
	// dryRun checks the change as the write would, and writes nothing.
	dryRun bool
}

func (s *Scheduler) readJob(ctx context.Context, id string) (Job, uint64, error) {
	var j Job
	if !bus.ValidToken(id) {
		return j, 0, apiErr(ErrNotFound, "job %q not found (ids are 1-64 of a-z, 0-9, _ and -)", id)
	}
	if j, ok, err := s.definedJob(ctx, id); ok {
		return j, 0, err
	}
	e, err := s.bus.Jobs.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return j, 0, apiErr(ErrNotFound, "job %q not found (agentwork cron list shows the jobs)", id)
	}
	if err != nil {
		return j, 0, fmt.Errorf("cron: read job %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return j, 0, fmt.Errorf("cron: job %s is not valid JSON: %w", id, err)
	}
	if j.Origin == OriginConfig || j.Origin == OriginWorkflow {
		// A record an earlier version wrote of a job the config no longer
		// defines (the start removes it): no job. Its timer's stored fire
		// may come before that.
		return Job{}, 0, apiErr(ErrNotFound, "job %q not found: the config file no longer defines it", id)
	}
	return j, e.Revision(), nil
}

// Add creates a job. It fails with ErrExists when the id is taken.
func (s *Scheduler) Add(ctx context.Context, j Job) (Status, error) {
	now := s.clock.Now().UTC()
	if err := s.check(&j, now); err != nil {
		return Status{}, err
	}
	j.Creator, j.IdempotencyKey = nil, "" // the agent's, never the API's
	st, _, err := s.create(ctx, j, OriginAPI, now, false)
	return st, err
}

// add is Add (by nil) or addFor, answering the new record's revision; a
// dry run checks j, and that its id is free, and writes nothing.
func (s *Scheduler) add(ctx context.Context, j Job, by *schedule.Owner, origin string, dry bool) (Status, uint64, error) {
	now := s.clock.Now().UTC()
	if err := s.check(&j, now); err != nil {
		return Status{}, 0, err
	}
	j.Creator, j.IdempotencyKey = nil, ""
	if by != nil {
		o := *by
		o.Source, o.RunID = origin, ""
		j.Creator = &o
	}
	return s.create(ctx, j, origin, now, dry)
}

// AddMCP creates a job through the MCP server for by: origin mcp, Creator
// {Source: "mcp", Name: by.Name, Credential: by.Credential}. Its runs act
// for the credential, and its targets are checked against the
// credential's grant at every fire (WithGrants), like an agent's job that
// a credential's task created.
func (s *Scheduler) AddMCP(ctx context.Context, j Job, by schedule.Owner) (Status, error) {
	return s.addFor(ctx, j, by, OriginMCP)
}

// addFor creates j for by, with origin (mcp, console): Creator names the
// credential, and its runs keep to that credential's grant.
func (s *Scheduler) addFor(ctx context.Context, j Job, by schedule.Owner, origin string) (Status, error) {
	st, _, err := s.add(ctx, j, &by, origin, false)
	return st, err
}

// create writes the checked job j of origin as new, and answers the
// revision of its record; dry writes nothing (and checks that the id is
// free).
func (s *Scheduler) create(ctx context.Context, j Job, origin string, now time.Time, dry bool) (Status, uint64, error) {
	if _, ok := s.defined[j.ID]; ok {
		return Status{}, 0, apiErr(ErrExists, "job %q exists: the config file defines it", j.ID)
	}
	j.Origin, j.CreatedAt, j.UpdatedAt = origin, now, now
	data, err := json.Marshal(j)
	if err != nil {
		return Status{}, 0, err
	}
	exists := func() error { return apiErr(ErrExists, "job %q exists (use update, or delete it first)", j.ID) }
	if dry {
		_, err := s.bus.Jobs.Get(ctx, j.ID)
		switch {
		case err == nil:
			return Status{}, 0, exists()
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return Status{}, 0, fmt.Errorf("cron: read job %s: %w", j.ID, err)
		}
		return s.status(j, State{}), 0, nil
	}
	rev, err := s.bus.Jobs.Create(ctx, j.ID, data)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return Status{}, 0, exists()
		}
		return Status{}, 0, fmt.Errorf("cron: add job %s: %w", j.ID, err)
	}
	// A new job starts with a clean state (a deleted job of the same id
	// may have left one).
	if _, err := s.bus.State.Get(ctx, stateKey(j.ID)); err == nil {
		_ = s.bus.State.Delete(ctx, stateKey(j.ID))
	}
	return s.status(j, State{}), rev, nil
}

// validate checks j, and that the models it names are ours (WithModels).
func (s *Scheduler) validate(j Job) error {
	err := j.Validate()
	if s.models != nil {
		err = errors.Join(err, agentwork.CheckModels("", j.Model, j.Fallback, s.models))
	}
	return err
}

// check validates and normalizes a job from the API.
func (s *Scheduler) check(j *Job, now time.Time) error {
	if j.Workflow != "" {
		return apiErr(ErrInvalid, "workflow: a job that starts a workflow is made from the workflow's cron trigger (on: - cron: {...}) in the config, not through the API")
	}
	if err := s.validate(*j); err != nil {
		return apiErr(ErrInvalid, "%v", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if j.At != nil && !j.At.After(now) {
		return apiErr(ErrInvalid, "at: %s is in the past (now %s)", j.At.UTC().Format(time.RFC3339), now.Format(time.RFC3339))
	}
	j.normalize()
	return nil
}

// Update applies a JSON merge patch (RFC 7396) to a job: only the fields
// it names change; null removes a field. Config jobs cannot be changed.
func (s *Scheduler) Update(ctx context.Context, id string, patch json.RawMessage) (Status, error) {
	st, _, err := s.update(ctx, id, patch, write{})
	return st, err
}

// update is Update as w says (at a revision, or a dry run); it answers
// the revision of the job's record as written.
func (s *Scheduler) update(ctx context.Context, id string, patch json.RawMessage, w write) (Status, uint64, error) {
	for range 5 {
		st, rev, err := s.updateOnce(ctx, id, patch, w)
		if !bus.IsConflict(err) {
			return st, rev, err
		}
		// Changed since it was read: read it again (at If-Match, that
		// is a conflict).
	}
	return Status{}, 0, fmt.Errorf("cron: update job %s: changed concurrently, try again", id)
}

// updateOnce reads job id, applies patch, and writes it at the revision
// read (an error for which bus.IsConflict is true when it changed
// meanwhile).
func (s *Scheduler) updateOnce(ctx context.Context, id string, patch json.RawMessage, w write) (Status, uint64, error) {
	old, rev, err := s.readJob(ctx, id)
	if err != nil {
		return Status{}, 0, err
	}
	if old.Origin == OriginConfig {
		return Status{}, 0, apiErr(ErrConfigJob, "job %q is defined in the config file: change it there (pause and resume work here)", id)
	}
	if old.Origin == OriginWorkflow {
		return Status{}, 0, apiErr(ErrConfigJob, "job %q is a cron trigger of workflow %s: change the workflow's `on` in the config (pause and resume work here)", id, old.Workflow)
	}
	if err := mayEdit(ctx, old); err != nil {
		return Status{}, 0, err
	}
	if w.ifMatch != nil && *w.ifMatch != rev {
		return Status{}, 0, conflict(id, *w.ifMatch, rev)
	}
	cur, _ := json.Marshal(old)
	merged, err := mergePatch(cur, patch)
	if err != nil {
		return Status{}, 0, apiErr(ErrBadRequest, "patch: %v", err)
	}
	var j Job
	dec := json.NewDecoder(bytes.NewReader(merged))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return Status{}, 0, apiErr(ErrInvalid, "%v", err)
	}
	if j.ID != id {
		return Status{}, 0, apiErr(ErrInvalid, "id: cannot be changed (add a new job and delete this one)")
	}
	now := s.clock.Now().UTC()
	if err := s.check(&j, now); err != nil {
		return Status{}, 0, err
	}
	j.Origin, j.CreatedAt, j.UpdatedAt = OriginAPI, old.CreatedAt, now
	if credentialed(old.Origin) {
		// An agent's job stays its creator's, whoever changes it.
		j.Origin, j.Creator, j.IdempotencyKey = old.Origin, old.Creator, old.IdempotencyKey
	} else {
		j.Creator, j.IdempotencyKey = nil, ""
	}
	if !w.dryRun {
		data, _ := json.Marshal(j)
		if rev, err = s.bus.Jobs.Update(ctx, id, data, rev); err != nil {
			if bus.IsConflict(err) {
				return Status{}, 0, err
			}
			return Status{}, 0, fmt.Errorf("cron: update job %s: %w", id, err)
		}
	}
	st, err := readState(ctx, s.bus.State, id)
	if err != nil {
		return Status{}, 0, err
	}
	return s.status(j, st), rev, nil
}

// Delete removes a job and its state (its history stays in the events
// stream). Config jobs cannot be deleted here.
func (s *Scheduler) Delete(ctx context.Context, id string) error {
	return s.delete(ctx, id, nil)
}

// delete is Delete; with ifMatch, only while the job's record is at that
// revision (ErrConflict otherwise).
func (s *Scheduler) delete(ctx context.Context, id string, ifMatch *uint64) error {
	j, rev, err := s.readJob(ctx, id)
	if err != nil {
		return err
	}
	if err := mayChange(ctx, j); err != nil {
		return err
	}
	if ifMatch != nil && *ifMatch != rev {
		return conflict(id, *ifMatch, rev)
	}
	if j.Origin == OriginConfig {
		return apiErr(ErrConfigJob, "job %q is defined in the config file: remove it there, or pause it", id)
	}
	if j.Origin == OriginWorkflow {
		return apiErr(ErrConfigJob, "job %q is a cron trigger of workflow %s: remove the trigger from the workflow's `on` in the config, or pause it", id, j.Workflow)
	}
	err = s.deleteAt(ctx, id, rev)
	if ifMatch != nil && bus.IsConflict(err) {
		// Changed between the read and the delete.
		if _, now, rerr := s.readJob(ctx, id); rerr == nil {
			return conflict(id, *ifMatch, now)
		}
	}
	return err
}

// deleteAt removes job id at revision rev of its definition, and its state.
func (s *Scheduler) deleteAt(ctx context.Context, id string, rev uint64) error {
	if err := s.bus.Jobs.Delete(ctx, id, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("cron: delete job %s: %w", id, err)
	}
	if err := s.bus.State.Delete(ctx, stateKey(id)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("cron: delete state of %s: %w", id, err)
	}
	return nil
}

// Pause stops a job from firing, with a reason shown in its status.
func (s *Scheduler) Pause(ctx context.Context, id, reason string) (Status, error) {
	if reason == "" {
		reason = "paused by hand"
	}
	return s.pause(ctx, id, reason, PausedByOperator)
}

// pause pauses job id for by (PausedBy*). The agent does not take over
// another's pause: that would let it lift the pause.
func (s *Scheduler) pause(ctx context.Context, id, reason, by string) (Status, error) {
	j, _, err := s.readJob(ctx, id)
	if err != nil {
		return Status{}, err
	}
	if err := mayChange(ctx, j); err != nil {
		return Status{}, err
	}
	now := s.clock.Now().UTC()
	var refused error
	st, err := updateState(ctx, s.bus.State, id, func(st *State) bool {
		refused = nil
		if by == PausedByAgent && st.pausedAt(now) && st.PausedBy != PausedByAgent {
			refused = fmt.Errorf("job %q is already paused, by %s (%s): it stays paused until an operator resumes it (agentwork cron resume %s)", id, st.pausedBy(), st.PausedReason, id)
			return false
		}
		st.Paused, st.PausedReason, st.PausedAt, st.PausedUntil, st.PausedBy = true, reason, &now, nil, by
		return true
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return Status{}, err
	}
	return s.status(j, st), nil
}

// Resume lets a paused job fire again from its next tick (ticks during the
// pause are not caught up) and resets its failure count and today's count
// of tokens: a job its budget paused may spend its budget once more today.
func (s *Scheduler) Resume(ctx context.Context, id string) (Status, error) {
	return s.resume(ctx, id, PausedByOperator)
}

// resume lifts the pause of job id for by. The agent (PausedByAgent) lifts
// only its own pause, and leaves the failure count and the day's tokens.
func (s *Scheduler) resume(ctx context.Context, id, by string) (Status, error) {
	j, _, err := s.readJob(ctx, id)
	if err != nil {
		return Status{}, err
	}
	if err := mayChange(ctx, j); err != nil {
		return Status{}, err
	}
	now := s.clock.Now().UTC()
	var refused error
	st, err := updateState(ctx, s.bus.State, id, func(st *State) bool {
		refused = nil
		if !st.Paused {
			return false
		}
		if by == PausedByAgent && st.PausedBy != PausedByAgent && st.pausedAt(now) {
			refused = fmt.Errorf("job %q was paused by %s (%s), not with schedule_pause: the schedule tools resume only their own pauses; an operator can resume it with agentwork cron resume %s", id, st.pausedBy(), st.PausedReason, id)
			return false
		}
		st.Paused, st.PausedReason, st.PausedAt, st.PausedUntil, st.PausedBy, st.ResumedAt = false, "", nil, nil, "", &now
		if by != PausedByAgent {
			st.ConsecutiveFailures = 0
			st.Spent.Reset()
		}
		return true
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return Status{}, err
	}
	return s.status(j, st), nil
}

// RunResult is what RunNow published.
type RunResult struct {
	RequestID string    `json:"request_id"`
	Job       string    `json:"job"`
	At        time.Time `json:"at"`
	// Duplicate: the idempotency key ran the job already; nothing new ran.
	Duplicate bool `json:"duplicate,omitempty"`
}

// keyID is the request id of a manual run of job with idempotency key: a
// UUID (version 8) of their digest.
func keyID(job, key string) string {
	sum := sha256.Sum256([]byte("cron.run\x00" + job + "\x00" + key))
	sum[6] = sum[6]&0x0f | 0x80
	sum[8] = sum[8]&0x3f | 0x80
	return uuid.UUID(sum[:16]).String()
}

// RunNow fires the job now, as a manual run: its schedule does not move,
// and it runs even when the job is paused or disabled (overlap still
// applies).
func (s *Scheduler) RunNow(ctx context.Context, id string) (RunResult, error) {
	return s.RunNowKey(ctx, id, "")
}

// RunNowKey is RunNow with an idempotency key: the same key again (for
// the same job, within the requests stream's duplicate window) runs
// nothing more and answers the first run's request id. "" is RunNow.
func (s *Scheduler) RunNowKey(ctx context.Context, id, key string) (RunResult, error) {
	j, _, err := s.readJob(ctx, id)
	if err != nil {
		return RunResult{}, err
	}
	if err := mayChange(ctx, j); err != nil {
		return RunResult{}, err
	}
	now := s.clock.Now().UTC()
	if j.Workflow != "" {
		run, err := s.startWorkflow(ctx, j, now, true)
		if err != nil {
			return RunResult{}, fmt.Errorf("cron: run %s: %w", id, err)
		}
		return RunResult{RequestID: run, Job: id, At: now}, nil
	}
	req := s.request(j, now, true)
	opts := agentwork.PublishOptions{Producer: Producer, Now: now}
	if key != "" {
		// The request's id is the key's, so that a repeat publishes the
		// same request, which the stream's duplicate window stores once.
		opts.EventID, opts.MsgID = keyID(id, key), "cron.run."+id+"."+keyID(id, key)
	}
	p, err := agentwork.Publish(ctx, s.bus, req, opts)
	if err != nil {
		return RunResult{}, fmt.Errorf("cron: run %s: %w", id, err)
	}
	return RunResult{RequestID: p.ID, Job: id, At: now, Duplicate: p.Duplicate}, nil
}

// mergePatch applies an RFC 7396 JSON merge patch to doc.
func mergePatch(doc, patch []byte) ([]byte, error) {
	var d, p any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, ok := p.(map[string]any); !ok {
		return nil, errors.New("want a JSON object with the fields to change")
	}
	return json.Marshal(merge(d, p))
}

func merge(d, p any) any {
	pm, ok := p.(map[string]any)
	if !ok {
		return p
	}
	dm, ok := d.(map[string]any)
	if !ok {
		dm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(dm, k)
		} else {
			dm[k] = merge(dm[k], v)
		}
	}
	return dm
}
