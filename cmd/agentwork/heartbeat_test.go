package main

import (
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// A heartbeat paused by its budget shows when it runs again, not the next
// tick, which passes without a run; one paused by hand shows neither.
func TestHeartbeatStatusWhilePaused(t *testing.T) {
	t.Parallel()
	next := time.Date(2026, 5, 4, 10, 30, 0, 0, time.UTC)
	until := time.Date(2026, 5, 5, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name      string
		st        heartbeat.Status
		want, not string
	}{
		{"running", heartbeat.Status{Name: "default", Enabled: true, State: heartbeat.State{NextFire: next}}, "next fire:     2026-05-04 10:30:00 UTC", "next run"},
		{"budget", heartbeat.Status{Name: "default", Enabled: true, State: heartbeat.State{NextFire: next, Paused: true, PausedUntil: &until}}, "next run:      the first tick from 2026-05-05 00:00:00 UTC", "next fire"},
		{"by hand", heartbeat.Status{Name: "default", Enabled: true, State: heartbeat.State{NextFire: next, Paused: true}}, "paused (runs only on wake)", "next"},
	} {
		var b strings.Builder
		hbPrintStatus(&b, tt.st)
		if out := b.String(); !strings.Contains(out, tt.want) || strings.Contains(out, tt.not) {
			t.Errorf("%s: status =\n%s\nwant %q and no %q", tt.name, out, tt.want, tt.not)
		}
	}
}
