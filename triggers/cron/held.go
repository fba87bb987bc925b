package cron

import (
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/tools/schedule"
	"github.com/agentwork/agentwork/triggers/budget"
)

// held is a job as the scheduler keeps it between its uses, in a third
// of a Job's memory: a scheduler of 100,000 jobs holds every one of them
// all the time, and most jobs set few of Job's fields. It keeps the
// fields most jobs set inline, the policies that have a few values as
// small numbers, and the other fields in more, which is nil when all of
// them are zero. job gives the Job back, equal to the one held.
type held struct {
	id, name, schedule, timezone, prompt string
	targets                              []string
	createdAt, updatedAt                 time.Time
	enabled                              *bool // shared with the Job held, as a copy of it would
	more                                 *heldMore
	// The index+1 of the value in its table; 0: the value is more's.
	deliver, overlap, catchup, origin uint8
}

// heldMore is the rest of a held job: every field of Job that held does
// not keep inline (TestHeldJobRoundTrip fails for a field of Job that is
// in neither), and the policies whose values are not in their tables.
type heldMore struct {
	at, expiresAt                 *time.Time
	memoryFlush                   *bool
	creator                       *schedule.Owner
	metadata                      map[string]string
	tools, approval, fallback     []string
	memory, idempotencyKey, model string
	workflow                      string
	deliver, overlap, catchup     string
	origin                        string
	maxRuns, catchupMax           int
	alertAfter, pauseAfter        int
	maxSteps                      int
	jitter, dedupWindow, timeout  Duration
	retry                         Retry
	budget                        budget.Budget
	deleteAfterRun                bool
}

// The values the small numbers of held stand for.
var (
	delivers = []string{agentwork.DeliverAuto, agentwork.DeliverReply, agentwork.DeliverNotify, agentwork.DeliverNone}
	overlaps = []string{OverlapSkip, OverlapQueue, OverlapAllow}
	catchups = []string{CatchupRunOnce, CatchupSkip, CatchupRunAll}
	origins  = []string{OriginConfig, OriginAPI, OriginAgent, OriginWorkflow, OriginMCP, OriginConsole}
)

// hold returns j as the scheduler keeps it.
func hold(j *Job) *held {
	h := &held{
		id: j.ID, name: j.Name, schedule: j.Schedule, timezone: j.Timezone, prompt: j.Prompt,
		targets: j.Targets, createdAt: j.CreatedAt, updatedAt: j.UpdatedAt, enabled: j.Enabled,
	}
	m := heldMore{
		at: j.At, expiresAt: j.ExpiresAt, memoryFlush: j.MemoryFlush, creator: j.Creator,
		metadata: j.Metadata, tools: j.Tools, approval: j.Approval, fallback: j.Fallback,
		memory: j.Memory, idempotencyKey: j.IdempotencyKey, model: j.Model, workflow: j.Workflow,
		maxRuns: j.MaxRuns, catchupMax: j.Catchup.Max, alertAfter: j.AlertAfter, pauseAfter: j.PauseAfter,
		maxSteps: j.MaxSteps, jitter: j.Jitter, dedupWindow: j.DedupWindow, timeout: j.Timeout,
		retry: j.Retry, budget: j.Budget, deleteAfterRun: j.DeleteAfterRun,
	}
	h.deliver, m.deliver = code(delivers, j.Deliver)
	h.overlap, m.overlap = code(overlaps, j.Overlap)
	h.catchup, m.catchup = code(catchups, j.Catchup.Policy)
	h.origin, m.origin = code(origins, j.Origin)
	if !m.isZero() {
		h.more = &m
	}
	return h
}

// isZero reports whether every field of m is zero (a slice or map empty
// but not nil is not: the job is given back with it).
func (m *heldMore) isZero() bool {
	return m.at == nil && m.expiresAt == nil && m.memoryFlush == nil && m.creator == nil &&
		m.metadata == nil && m.tools == nil && m.approval == nil && m.fallback == nil &&
		m.memory == "" && m.idempotencyKey == "" && m.model == "" && m.workflow == "" &&
		m.deliver == "" && m.overlap == "" && m.catchup == "" && m.origin == "" &&
		m.maxRuns == 0 && m.catchupMax == 0 && m.alertAfter == 0 && m.pauseAfter == 0 &&
		m.maxSteps == 0 && m.jitter == 0 && m.dedupWindow == 0 && m.timeout == 0 &&
		m.retry == Retry{} && m.budget == budget.Budget{} && !m.deleteAfterRun
}

// job returns the job held.
func (h *held) job() Job {
	j := Job{
		ID: h.id, Name: h.name, Schedule: h.schedule, Timezone: h.timezone, Prompt: h.prompt,
		Targets: h.targets, CreatedAt: h.createdAt, UpdatedAt: h.updatedAt, Enabled: h.enabled,
	}
	var m heldMore
	if h.more != nil {
		m = *h.more
	}
	j.At, j.ExpiresAt, j.MemoryFlush, j.Creator = m.at, m.expiresAt, m.memoryFlush, m.creator
	j.Metadata, j.Tools, j.Approval, j.Fallback = m.metadata, m.tools, m.approval, m.fallback
	j.Memory, j.IdempotencyKey, j.Model, j.Workflow = m.memory, m.idempotencyKey, m.model, m.workflow
	j.MaxRuns, j.Catchup.Max, j.AlertAfter, j.PauseAfter = m.maxRuns, m.catchupMax, m.alertAfter, m.pauseAfter
	j.MaxSteps, j.Jitter, j.DedupWindow, j.Timeout = m.maxSteps, m.jitter, m.dedupWindow, m.timeout
	j.Retry, j.Budget, j.DeleteAfterRun = m.retry, m.budget, m.deleteAfterRun
	j.Deliver = value(delivers, h.deliver, m.deliver)
	j.Overlap = value(overlaps, h.overlap, m.overlap)
	j.Catchup.Policy = value(catchups, h.catchup, m.catchup)
	j.Origin = value(origins, h.origin, m.origin)
	return j
}

// originOf returns the job's origin (h.job().Origin without the copy).
func (h *held) originOf() string {
	o := ""
	if h.more != nil {
		o = h.more.origin
	}
	return value(origins, h.origin, o)
}

// isDefined reports whether the config defines the job (origin config
// or workflow).
func (h *held) isDefined() bool {
	o := h.originOf()
	return o == OriginConfig || o == OriginWorkflow
}

// code returns the index+1 of v in table, or 0 and v when it is not in it.
func code(table []string, v string) (uint8, string) {
	for i, x := range table {
		if v == x {
			return uint8(i + 1), ""
		}
	}
	return 0, v
}

// value is code's reverse: the value c stands for, else v.
func value(table []string, c uint8, v string) string {
	if c == 0 {
		return v
	}
	return table[c-1]
}
