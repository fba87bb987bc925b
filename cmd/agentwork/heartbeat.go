package main

import (
	"context"
	"errors"
)

// cmdHeartbeat is filled in by the heartbeat trigger's owner.
func cmdHeartbeat(_ context.Context, _ *env, _ []string) error {
	return errors.New("heartbeat: not available yet")
}
