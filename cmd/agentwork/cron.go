package main

import (
	"context"
	"errors"
)

// cmdCron is filled in by the cron trigger's owner.
func cmdCron(_ context.Context, _ *env, _ []string) error {
	return errors.New("cron: not available yet")
}
