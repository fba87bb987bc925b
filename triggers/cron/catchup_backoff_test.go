package cron

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
)

// A catch-up whose publish fails is handed out again with backoff, like
// any fire. The timer of the job's next tick, which a catch-up arms
// before its writes, must not bring it back meanwhile: its fire replaced
// the one handed out again (one fired copy a key), so the catch-up was
// tried again as a first attempt each time that timer fired (a job of a
// tick a second: about every 250 ms, for as long as the bus failed,
// whatever the backoff).
func TestFailedCatchupKeepsItsBackoff(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	// A tick a second, three of them due (two late: a catch-up), on a
	// clock a second or two ahead of the server's: the next tick's timer
	// fires about then.
	at := time.Now().UTC().Add(2 * time.Second).Truncate(time.Second)
	j := Job{ID: "persec", Schedule: "* * * * * *", Prompt: "p", Catchup: Catchup{Policy: CatchupRunAll, Max: 10}}
	seed(t, b, j, at.Add(-time.Hour), State{LastTick: ptr(at.Add(-3 * time.Second))})
	core, logs := observer.New(zap.InfoLevel)
	startScheduler(t, b, Config{}, make(chan TickResult, 100), func(s *Scheduler) {
		s.clock, s.log = clock.NewFake(at.Add(500*time.Millisecond)), zap.New(core)
		s.retryBase, s.retryMax = 3*time.Second, 3*time.Second
		s.publishReq = func(context.Context, *bus.Bus, agentwork.Request, agentwork.PublishOptions) (agentwork.Published, error) {
			return agentwork.Published{}, errors.New("injected: the requests stream is full")
		}
	})
	failed := func() []observer.LoggedEntry { return logs.FilterMessageSnippet("cron fire failed").All() }
	eventually(t, func() bool { return len(failed()) >= 2 })
	for i, e := range failed()[:2] {
		if got := e.ContextMap()["attempt"]; got != int64(i+1) {
			t.Errorf("try %d of the failed catch-up: attempt %v, want %d (the fire handed out again after its backoff)", i+1, got, i+1)
		}
	}
}
