package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Stream and bucket names (fixed by the design).
const (
	StreamRequests   = "AGENTWORK_REQUESTS"
	StreamEvents     = "AGENTWORK_EVENTS"
	StreamDeliveries = "AGENTWORK_DELIVERIES"
	StreamTimers     = "AGENTWORK_TIMERS"
	// StreamWorkflows holds the workflow engine's commands: start, cancel,
	// retry and a child run's end (package workflow).
	StreamWorkflows = "AGENTWORK_WORKFLOWS"

	BucketJobs  = "agentwork_jobs"
	BucketState = "agentwork_state"
	BucketDedup = "agentwork_dedup"
	BucketLocks = "agentwork_locks"
	// BucketDeadLetters holds the notifications a connector failed to
	// deliver for good, for a user to list and send again.
	BucketDeadLetters = "agentwork_deadletters"
	// BucketUsage holds the model tokens of runs summed per day, source,
	// name and model (package agentwork/usage folds them in).
	BucketUsage = "agentwork_usage"
	// BucketMemory holds the agent's memory: long-term memory, daily logs
	// and the heartbeat checklist, one key each (tools/memory).
	BucketMemory = "agentwork_memory"
	// BucketWorkflowRuns holds the workflow runs, one key per run id: the
	// run's state and the engine's outbox (package workflow).
	BucketWorkflowRuns = "agentwork_workflow_runs"
	// BucketApprovals holds the approvals, one key per approval id
	// (package approval).
	BucketApprovals = "agentwork_approvals"
	// BucketConsoleSessions holds the web console's sessions, one key per
	// session (package console): no cookie, no token, each key expiring
	// by a per-key TTL at its idle time.
	BucketConsoleSessions = "agentwork_console_sessions"
)

// Retention of the streams and buckets. Each window is sized to what it
// protects: the server keeps every message id of a duplicate window and
// every key of a bucket in memory, so a window of a day costs gigabytes
// at 20 runs a second. docs/configuration.md (Retention) says why each is
// what it is.
const (
	RequestsMaxAge = 7 * 24 * time.Hour
	// RequestsDuplicates covers the re-publishes of one request under its
	// Nats-Msg-Id: a webhook caller retrying a task the bus did not confirm
	// (the answer says Retry-After: 5), a tick published again within the
	// timer's ack wait. The runner never publishes a request again. Later
	// copies of a request are caught by its run claim (SettledTTL) and, for
	// webhook tasks with an idempotency key, by their record (7 days).
	RequestsDuplicates = 5 * time.Minute
	EventsMaxAge       = 30 * 24 * time.Hour
	// EventsDuplicates covers an event emitted again: a run's done event
	// when a retry resumes from its checkpoint (within the runner's
	// backoff), a delivered event when a redelivery finds the send claim
	// sent (while the claim lives: SettledTTL).
	EventsDuplicates = 5 * time.Minute
	DeliveriesMaxAge = 7 * 24 * time.Hour
	// DeliveriesDuplicate covers a notification queued again when a run's
	// retry resumes from its checkpoint (within the runner's backoff).
	// Later copies are caught by the send claim (SettledTTL).
	DeliveriesDuplicate = 5 * time.Minute
	// LocksTTL is the age at which any record of agentwork_locks goes:
	// idempotency records of webhook tasks (their documented period),
	// retry states, delete markers. Leases are rewritten while held.
	LocksTTL = 7 * 24 * time.Hour
	// SettledTTL is how long a finished run claim (done) and a sent send
	// claim stay, each from its settle. They answer a redelivery of their
	// request or notification, which after its ack comes only from a
	// duplicate publish (within the duplicate windows above, no longer
	// than this) or from the reset to the ack floor after an embedded
	// restart (redeliverOrphans), which is skipped when a message above
	// the floor may have outlived its claim.
	SettledTTL = 5 * time.Minute
	// ReplayHorizon is how old a request or notification may be for it to
	// be handed out again after it may have been handled: by the reset
	// after an embedded restart (redeliverOrphans) and by a work consumer
	// created anew (WorkerConfig.ReplayHorizon). Its claim, if it was
	// handled, settled after it was stored and so lives while it is
	// younger than SettledTTL; a minute less leaves time for the
	// redelivery to reach the claim.
	ReplayHorizon = SettledTTL - time.Minute
	// LocksMarkerTTL is how long the marker left by an expired key stays:
	// the shortest the server allows. Nothing watches agentwork_locks, and a
	// marker is one more subject in the server's index: kept a minute, the
	// expired claims of the last minute held a sixth of the bucket's keys.
	LocksMarkerTTL = time.Second
	// DeadLettersTTL is how long a failed delivery waits to be sent again:
	// as long as the events stream keeps its delivery.failed event.
	DeadLettersTTL = EventsMaxAge
	// UsageTTL is how long a day's token usage of one source, name and
	// model is kept after its last run: about a quarter, long after the
	// events it sums are gone (EventsMaxAge).
	UsageTTL = 90 * 24 * time.Hour
	// TimersDuplicates is how long the timers stream remembers a Set's
	// message id: long enough to cover Set's own retries after a lost ack
	// (TimerSetRetry), short enough that the ids of a busy schedule (500
	// Sets a second) stay a few MB of server memory.
	TimersDuplicates = 2 * time.Minute
	// TimerFiredTTL is how long a fired timer waits for its consumer. The
	// stream keeps one fired copy per key (MaxMsgsPerSubject 1), so the TTL
	// only bounds keys that are never used again (one-shot timers).
	TimerFiredTTL = 7 * 24 * time.Hour
	// MemoryHistory is how many revisions of a memory document the bucket
	// keeps: the current one and four before it (agentwork memory show
	// --history).
	MemoryHistory = 5
	// MemoryMarkerTTL is how long the marker of an expired daily log stays
	// (daily logs expire by a per-key TTL: memory.keep_days).
	MemoryMarkerTTL = time.Minute
	// WorkflowsMaxAge and WorkflowsDuplicates are those of the workflow
	// commands stream, as for requests: a command is handled within
	// seconds, and a start published again under its run id (an
	// idempotency key repeated) is stored once within the window; after
	// it, the run's record answers.
	WorkflowsMaxAge     = RequestsMaxAge
	WorkflowsDuplicates = RequestsDuplicates
	// WorkflowRunTTL is how long an ended workflow run is kept after its
	// last write, as long as the events stream keeps its events. A run
	// that has not ended has no expiry, however long it waits.
	WorkflowRunTTL = EventsMaxAge
	// WorkflowRunsMarkerTTL is how long the marker of an expired run stays.
	WorkflowRunsMarkerTTL = time.Minute
	// ApprovalTTL is how long a decided (or expired, or cancelled)
	// approval is kept after its last write: as long as the events
	// stream keeps its events. A pending one has no expiry.
	ApprovalTTL = EventsMaxAge
	// ApprovalsMarkerTTL is how long the marker of an expired approval
	// stays.
	ApprovalsMarkerTTL = time.Minute
	// ConsoleSessionsMarkerTTL is how long the marker of an expired or
	// ended console session stays: the shortest the server allows.
	// Nothing watches the bucket.
	ConsoleSessionsMarkerTTL = time.Second
	// ConsoleSessionsMaxBytes bounds the console's sessions bucket (and
	// to a 16th of bus.max_store, since JetStream sets the bound aside
	// from the store): at the bound a new login is refused (the bus
	// answers "maximum bytes exceeded") until sessions expire, instead of
	// logins without end filling the disk.
	ConsoleSessionsMaxBytes = 64 << 20
	// ConsoleSessionMaxSize bounds one session's record (its credential,
	// times and flash message: well under 1 KiB).
	ConsoleSessionMaxSize = 16 << 10
)

// StreamConfigs returns the desired configuration of the streams.
func (b *Bus) StreamConfigs() []jetstream.StreamConfig {
	r := b.cfg.Replicas
	return []jetstream.StreamConfig{
		{
			Name: StreamRequests, Description: "agentwork work requests (heartbeat, cron, task)",
			Subjects: []string{b.Subjects.Requests()}, Retention: jetstream.LimitsPolicy,
			MaxAge: RequestsMaxAge, Duplicates: RequestsDuplicates, Storage: jetstream.FileStorage, Replicas: r,
			MaxMsgsPerSubject: perSubjectUnbounded,
		},
		{
			Name: StreamEvents, Description: "agentwork run outcomes (done/skip/error) and delivery results",
			Subjects: []string{b.Subjects.Events()}, Retention: jetstream.LimitsPolicy,
			MaxAge: EventsMaxAge, Duplicates: EventsDuplicates, Storage: jetstream.FileStorage, Replicas: r,
			MaxMsgsPerSubject: perSubjectUnbounded,
		},
		{
			Name: StreamDeliveries, Description: "agentwork notifications queued per connector",
			Subjects: []string{b.Subjects.Deliveries()}, Retention: jetstream.LimitsPolicy,
			MaxAge: DeliveriesMaxAge, Duplicates: DeliveriesDuplicate, Storage: jetstream.FileStorage, Replicas: r,
			MaxMsgsPerSubject: perSubjectUnbounded,
		},
		timersStreamConfig(b.Subjects, r),
		{
			Name: StreamWorkflows, Description: "agentwork workflow commands (start, cancel, retry, child ended)",
			Subjects: []string{b.Subjects.Workflows()}, Retention: jetstream.LimitsPolicy,
			MaxAge: WorkflowsMaxAge, Duplicates: WorkflowsDuplicates, Storage: jetstream.FileStorage, Replicas: r,
			MaxMsgsPerSubject: perSubjectUnbounded,
		},
	}
}

// perSubjectUnbounded is the per-subject limit of the work and events
// streams: one never reached, set for what it makes the server do. A file
// stream with a per-subject limit (and no MaxBytes or MaxMsgs) is stored
// in 4 MB blocks, as KV buckets are, instead of 8 MB (nats-server's
// stream.autoTuneFileStorageBlockSize). Each stream being written holds
// its last block's cache in a buffer of the block's size, taken from and
// given back to a pool as the cache comes and goes; with 8 MB buffers
// the process's memory swung by tens of MB from one minute to the next
// (docs/BENCHMARKS.md, "Soak"). It applies to a stream when it is
// created: a store provisioned before keeps its blocks.
const perSubjectUnbounded = 1 << 40

// consoleSessionsMaxBytes is ConsoleSessionsMaxBytes, or a 16th of the
// store when that is less: a bus with a small max_store still starts.
func (b *Bus) consoleSessionsMaxBytes() int64 {
	if s := b.cfg.MaxStore; s > 0 {
		return min(ConsoleSessionsMaxBytes, max(s/16, 64<<10))
	}
	return ConsoleSessionsMaxBytes
}

func (b *Bus) bucketConfigs() []jetstream.KeyValueConfig {
	r := b.cfg.Replicas
	return []jetstream.KeyValueConfig{
		{Bucket: BucketJobs, Description: "cron job definitions", History: 5, Storage: jetstream.FileStorage, Replicas: r},
		{Bucket: BucketState, Description: "heartbeat and cron state", History: 1, Storage: jetstream.FileStorage, Replicas: r},
		{Bucket: BucketDedup, Description: "notification dedup keys (per-key TTL)", History: 1, Storage: jetstream.FileStorage, Replicas: r, LimitMarkerTTL: time.Minute},
		{Bucket: BucketLocks, Description: "leases and run claims (per-key TTL once settled)", History: 1, TTL: LocksTTL, Storage: jetstream.FileStorage, Replicas: r, LimitMarkerTTL: LocksMarkerTTL},
		{Bucket: BucketDeadLetters, Description: "notifications that failed delivery for good", History: 1, TTL: DeadLettersTTL, Storage: jetstream.FileStorage, Replicas: r},
		{Bucket: BucketUsage, Description: "model tokens per day, source, name and model", History: 1, TTL: UsageTTL, Storage: jetstream.FileStorage, Replicas: r},
		{Bucket: BucketMemory, Description: "the agent's memory: long-term memory, daily logs (per-key TTL), the checklist", History: MemoryHistory, Storage: jetstream.FileStorage, Replicas: r, LimitMarkerTTL: MemoryMarkerTTL},
		{Bucket: BucketWorkflowRuns, Description: "workflow runs: state and outbox (ended runs expire by a per-key TTL)", History: 1, Storage: jetstream.FileStorage, Replicas: r, LimitMarkerTTL: WorkflowRunsMarkerTTL},
		{Bucket: BucketApprovals, Description: "approvals (ended ones expire by a per-key TTL)", History: 1, Storage: jetstream.FileStorage, Replicas: r, LimitMarkerTTL: ApprovalsMarkerTTL},
		{Bucket: BucketConsoleSessions, Description: "web console sessions (each expires by a per-key TTL)", History: 1, Storage: jetstream.FileStorage, Replicas: r, LimitMarkerTTL: ConsoleSessionsMarkerTTL,
			MaxBytes: b.consoleSessionsMaxBytes(), MaxValueSize: ConsoleSessionMaxSize},
	}
}

// provision creates or updates the streams and buckets. A stream whose
// existing configuration cannot be updated in place (for example another
// retention) is reported with what differs.
func (b *Bus) provision(ctx context.Context) error {
	for _, sc := range b.StreamConfigs() {
		attempt := provisionAttempt
		if err := retry(ctx, func() error {
			lctx, cancel := context.WithTimeout(ctx, provisionAttempt)
			st, err := b.js.Stream(lctx, sc.Name)
			cancel()
			// An update of a stream that needs none is not free: the timers
			// stream answers it only once its backlog of due timers fired.
			if err == nil && !needsUpdate(st.CachedInfo().Config, sc) {
				return nil
			}
			// A real create or update may take long (that same backlog):
			// each attempt waits twice as long as the one before.
			uctx, cancel := context.WithTimeout(ctx, attempt)
			defer cancel()
			attempt *= 2
			_, err = b.js.CreateOrUpdateStream(uctx, sc)
			return err
		}); err != nil {
			if hint := b.replicasHint(err); hint != "" {
				return fmt.Errorf("bus: stream %s: %w%s", sc.Name, err, hint)
			}
			if existing, gerr := b.js.Stream(ctx, sc.Name); gerr == nil {
				have := existing.CachedInfo().Config
				return fmt.Errorf("bus: stream %s exists with a configuration that cannot be updated (retention %s, subjects %v; want %s, %v): %w",
					sc.Name, have.Retention, have.Subjects, sc.Retention, sc.Subjects, err)
			}
			return fmt.Errorf("bus: create stream %s: %w", sc.Name, err)
		}
	}
	for _, kc := range b.bucketConfigs() {
		if err := retry(ctx, func() error {
			actx, cancel := context.WithTimeout(ctx, provisionAttempt)
			defer cancel()
			_, err := b.js.CreateOrUpdateKeyValue(actx, kc)
			return err
		}); err != nil {
			return fmt.Errorf("bus: create bucket %s: %w%s", kc.Bucket, err, b.replicasHint(err))
		}
	}
	b.log.Debug("bus provisioned", zap.Int("replicas", b.cfg.Replicas))
	return b.bindBuckets(ctx)
}

func (b *Bus) bindBuckets(ctx context.Context) error {
	var err error
	bind := func(name string) jetstream.KeyValue {
		if err != nil {
			return nil
		}
		var kv jetstream.KeyValue
		kv, err = b.js.KeyValue(ctx, name)
		if err != nil {
			err = fmt.Errorf("bus: bucket %s: %w (was the bus provisioned?)", name, err)
		}
		return kv
	}
	b.Jobs, b.State, b.Dedup, b.Locks = bind(BucketJobs), bind(BucketState), bind(BucketDedup), bind(BucketLocks)
	b.DeadLetters, b.Usage = bind(BucketDeadLetters), bind(BucketUsage)
	b.Memory = bind(BucketMemory)
	b.WorkflowRuns = bind(BucketWorkflowRuns)
	b.Approvals = bind(BucketApprovals)
	b.ConsoleSessions = bind(BucketConsoleSessions)
	return err
}

// JetStream API error codes (nats-server's errors.json) that nats.go does
// not name.
const (
	errCodeInsufficientResources jetstream.ErrorCode = 10023 // e.g. fewer servers than replicas
	errCodeReplicasNotSupported  jetstream.ErrorCode = 10074 // replicas > 1 not supported in non-clustered mode
	errCodeClusterNotAvailable   jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
)

// replicasHint says what to do when the servers cannot hold the replicas
// asked for: "" for any other error.
func (b *Bus) replicasHint(err error) string {
	var apiErr *jetstream.APIError
	if b.cfg.Replicas <= 1 || !errors.As(err, &apiErr) {
		return ""
	}
	switch apiErr.ErrorCode {
	case errCodeReplicasNotSupported, errCodeInsufficientResources:
		return fmt.Sprintf(" (bus.replicas is %d, more than these servers hold: set bus.replicas: 1 for a single server, or at most the cluster's size)", b.cfg.Replicas)
	}
	return ""
}

// provisionAttempt bounds one read of start-up from the JetStream API (and
// the first create or update; each next one waits twice as long): a call
// that gets no answer (a cluster still electing its leader) is asked again
// rather than waited on for the whole ready timeout.
const provisionAttempt = 2 * time.Second

// needsUpdate reports whether the stream's config lacks what want sets:
// the fields want sets (not zero), laid over have, differ from have. The
// server fills in defaults, so a field want leaves zero is not compared.
func needsUpdate(have, want jetstream.StreamConfig) bool {
	merged := have
	m, w := reflect.ValueOf(&merged).Elem(), reflect.ValueOf(want)
	for i := range w.NumField() {
		if f := w.Field(i); !f.IsZero() {
			m.Field(i).Set(f)
		}
	}
	return !reflect.DeepEqual(merged, have)
}

// retry runs fn until it succeeds or ctx ends: on a cluster the JetStream
// meta leader may not be elected yet right after start.
func retry(ctx context.Context, fn func() error) error {
	delay := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil || !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

func retryable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeClusterNotAvailable {
		return true // a leader election in progress: ask again
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.Is(err, errTimeout)
}

var errTimeout = errors.New("nats: timeout")

func jsonMarshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("bus: marshal: %w", err)
	}
	return b, nil
}
