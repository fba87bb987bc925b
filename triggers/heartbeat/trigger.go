package heartbeat

import (
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers"
)

var (
	_ triggers.Trigger  = (*Heartbeat)(nil)
	_ triggers.Servicer = (*Heartbeat)(nil)
	_ api.Router        = (*Heartbeat)(nil)
)

// Sources is the one source the heartbeat publishes: heartbeat.
func (h *Heartbeat) Sources() []string { return []string{bus.SourceHeartbeat} }
