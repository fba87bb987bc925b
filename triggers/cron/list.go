package cron

import (
	"context"
	"maps"
	"slices"
)

// Page sizes of List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListQuery says which page of the jobs List returns.
type ListQuery struct {
	// After: the jobs with an id after it ("" from the first).
	After string
	// Limit: at most this many (DefaultListLimit when 0, at most
	// MaxListLimit).
	Limit int
	// Budget: only the jobs with a daily token budget.
	Budget bool
}

// List returns a page of the jobs with their state, sorted by id (see
// ListQuery). more reports that jobs follow the page. A page costs the
// jobs it holds, not all the jobs: the ids are kept sorted.
func (s *Scheduler) List(ctx context.Context, q ListQuery) (page []Status, more bool, err error) {
	switch {
	case q.Limit == 0:
		q.Limit = DefaultListLimit
	case q.Limit < 0 || q.Limit > MaxListLimit:
		return nil, false, apiErr(ErrBadRequest, "limit %d: want 1 to %d", q.Limit, MaxListLimit)
	}
	var keep func(*held) bool
	if q.Budget {
		keep = func(h *held) bool { return h.more != nil && h.more.budget.DailyTokens > 0 }
	}
	all, more, err := s.pageOf(ctx, q.After, q.Limit, keep)
	if err != nil {
		return nil, false, err
	}
	page = make([]Status, len(all))
	for i, p := range all {
		page[i] = s.status(p.j, p.st)
	}
	return page, more, ctx.Err()
}

type jobState struct {
	j  Job
	st State
}

// pageOf returns the jobs with their state, sorted by id, from the first
// with an id after after: at most limit of them (no limit when 0), and
// only those keep keeps (nil: all). more reports that other such jobs
// follow.
func (s *Scheduler) pageOf(ctx context.Context, after string, limit int, keep func(*held) bool) (page []jobState, more bool, err error) {
	select {
	case <-s.ready:
	default:
		return nil, false, ErrNotReady
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.sorted()
	i, found := slices.BinarySearch(ids, after)
	if found {
		i++
	}
	for _, id := range ids[i:] {
		e := s.entries[id]
		if e.job == nil || (keep != nil && !keep(e.job)) {
			continue // (only its state is known yet)
		}
		if limit > 0 && len(page) == limit {
			return page, true, ctx.Err()
		}
		page = append(page, jobState{e.job.job(), e.st()})
	}
	return page, false, ctx.Err()
}

// sorted returns the ids of the entries, sorted: kept until an entry
// comes or goes. s.mu held.
func (s *Scheduler) sorted() []string {
	if s.order == nil {
		s.order = slices.Sorted(maps.Keys(s.entries))
		if s.order == nil {
			s.order = []string{}
		}
	}
	return s.order
}

// putEntry adds the entry of a job (or of its state) that has none.
// s.mu held.
func (s *Scheduler) putEntry(id string, e *entry) {
	s.entries[id] = e
	s.order = nil
}

// dropEntry removes the entry of id. s.mu held.
func (s *Scheduler) dropEntry(id string) {
	delete(s.entries, id)
	s.order = nil
}
