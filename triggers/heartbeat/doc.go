// Package heartbeat is the heartbeat trigger: every `every` (30m by
// default), within its active hours, it asks the model to go through a
// checklist (HEARTBEAT.md) and tell the user only what needs attention.
//
// A Heartbeat publishes one agentwork.Request per tick on
// agentwork.request.heartbeat.<name>; the shared agentwork.Runner runs it
// under the heartbeat's Policy:
//
//   - input gates: enabled, active hours, checklist (an effectively empty
//     checklist skips "empty-checklist" without calling the model; a missing
//     one skips "no-checklist"), then the runner's overlap lease so that one
//     heartbeat runs at a time across all instances (skip "busy", or wait);
//   - output gates: fail-closed notify_user (no call: skip "ack"; blank:
//     "empty"; the first call wins), or the HEARTBEAT_OK token for models
//     without tool calling, then dedup of the same text within dedup_window.
//
// The schedule is one timer of the durable time engine (bus.Timers, key
// heartbeat.<name>), armed for the next tick; every instance shares its
// fires through one durable consumer, so each tick fires once, and the
// message id heartbeat:<name>:<tick> keeps a retried publish stored once.
// The rhythm continues from the last fire kept in the agentwork_state
// bucket, so a restart does not reset it; missed ticks collapse into one
// fire.
//
// Outside the active hours the heartbeat does not spin: the first tick
// after the window closes is published once (its run skips
// "outside-active-hours", so history shows the pause), and the next fire is
// the instant the window opens.
//
// Wake runs one heartbeat now without moving the schedule; Status and
// History report it. Checklist reads the checklist as the next run would,
// with its revision; WriteChecklist replaces it only at that revision (a
// file atomically, at its content hash; in memory by the store's
// compare-and-set). They are served over NATS (Service; Client and the
// CLI call it) and HTTP (Routes). A Heartbeat is a triggers.Trigger.
package heartbeat
