package cron

import (
	"context"
	"fmt"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers"
)

var (
	_ triggers.Trigger  = (*Scheduler)(nil)
	_ triggers.Servicer = (*Scheduler)(nil)
	_ api.Router        = (*Scheduler)(nil)
	_ api.Readier       = (*Scheduler)(nil)
)

// Sources is the one source the scheduler publishes: cron.
func (s *Scheduler) Sources() []string { return []string{bus.SourceCron} }

// Ready reports nil once Run has loaded every job and fires them; before,
// an error wrapping ErrNotReady.
func (s *Scheduler) Ready(context.Context) error {
	select {
	case <-s.ready:
		return nil
	default:
		return fmt.Errorf("cron: %w", ErrNotReady)
	}
}
