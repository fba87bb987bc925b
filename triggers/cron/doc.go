// Package cron is the cron trigger: jobs that run a prompt on a schedule.
//
// Jobs of the config file (and the workflows' cron triggers) live in the
// config, their source of truth: a small index in agentwork_state
// (cronconfig.<n>) keeps what a restart needs of them (when each was first
// seen and last changed, a hash of its definition). Jobs added through the
// API (NATS service, HTTP, CLI) live in the agentwork_jobs KV bucket and
// stay across restarts; every instance watches the bucket, so a change
// made through one instance reaches all of them at once.
//
// robfig/cron parses the expressions; ticks follow the job's IANA time zone
// with ISC-cron DST rules (see ParseSchedule). Each job whose next tick is
// within the arm-ahead window (DefaultArmAhead) is one timer of the durable
// time engine (bus.Timers, key cron.<id>), due at that tick plus jitter; an
// arming pass at start and every quarter window (on timers of its own,
// cronahead.<n>, handled by the consumer cron-ahead) arms the ticks that
// come within it. The timer fires once for the cluster, and one instance
// handles the fire (a durable consumer shared by all). It publishes the
// ticks due since the job's last tick as AgentWork requests with
// Nats-Msg-Id <job>:<tick RFC 3339 UTC>, records them in the job's state
// and arms the next tick; a fire that fails is handed out again and
// worked out again from the state. A tick older than the grace period
// (after downtime, or after the bus refused it) follows the job's catch-up
// policy; a tick that is not run is recorded as a skip event with reason
// "missed", so nothing disappears from the history.
//
// The Scheduler is a triggers.Trigger. Its API (Service on NATS, which
// Client and the CLI call; Routes on HTTP) manages the jobs; Ready says
// whether it has loaded them. Its Policy gates the runs (deleted, disabled, paused,
// expired), gives each its job's overlap mode (the runner's overlap lease
// applies it) and observes their outcomes: each job's state in
// agentwork_state (key cron.<id>) shows the last run's model outcome,
// consecutive failures, and whether the job paused itself.
package cron
