package api

import (
	"context"
	"net/http"
	"time"

	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
)

// RunCounts is the body of GET /v1/runs/counts: the runs stored since
// Since (nil: all the events stream holds), by outcome.
type RunCounts struct {
	Since  *time.Time        `json:"since,omitempty"`
	Counts map[string]uint64 `json:"counts"`
}

// runCounts answers how many runs ended, by outcome, exactly and without
// reading them (bus.CountSince): GET /v1/runs/counts[?since=&source=&outcome=].
// name is refused: a glob on the event's subject attribute is no filter
// subject, and counting by it would read every run.
func (s *Server) runCounts(w http.ResponseWriter, r *http.Request) {
	outcomes := []string{bus.OutcomeDone, bus.OutcomeSkip, bus.OutcomeError}
	q, errs := parseQuery(r.URL.Query(), s.now(), false, outcomes)
	if len(q.names) > 0 {
		errs = append(errs, problem.FieldError{Field: "name", Detail: "runs are counted by source and outcome only; list them by name with GET /v1/runs?name=..."})
	}
	if len(errs) > 0 {
		problem.Invalid(w, "invalid run count filter", errs...)
		return
	}
	if len(q.outcomes) > 0 {
		outcomes = q.outcomes
	}
	sources := q.sources
	if len(sources) == 0 {
		sources = []string{"*"}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	reply := RunCounts{Counts: make(map[string]uint64, len(outcomes))}
	if !q.since.IsZero() {
		since := q.since.UTC()
		reply.Since = &since
	}
	for _, o := range outcomes {
		subjects := make([]string, len(sources))
		for i, src := range sources {
			subjects[i] = s.deps.Bus.Subjects.Event(src, o)
		}
		n, err := s.deps.Bus.CountSince(ctx, bus.StreamEvents, subjects, q.since)
		if err != nil {
			problem.Unavailable(w, 5*time.Second, "cannot count the runs: "+err.Error())
			return
		}
		reply.Counts[o] = n
	}
	writeJSON(w, http.StatusOK, reply)
}
