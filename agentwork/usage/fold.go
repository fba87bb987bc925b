package usage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// ConsumerName is the durable consumer of the run events that the Folders
// of every instance share.
const ConsumerName = "usage"

// Defaults of FolderConfig.
const (
	DefaultConcurrency = 64
	DefaultRetry       = 2 * time.Second
)

// FolderConfig configures a Folder.
type FolderConfig struct {
	// Concurrency is how many run events one instance holds at once; the
	// events it holds are folded together, one write per key. Default 64.
	Concurrency int
	// Retry is when an event whose fold failed (bus trouble) is handed
	// out again. Default 2s.
	Retry time.Duration
	// Log is the logger. Default zap.NewNop().
	Log *zap.Logger
}

// Folder adds the usage of every run event to its record in
// agentwork_usage. Run events are consumed through the durable consumer
// ConsumerName (every instance's Folder shares it, so each event goes to
// one of them) with the bus worker; the events an instance holds at once
// are folded together, one compare-and-set (bus.Update) per key, so a burst
// of runs of one job costs one write, and a quiet system one write per run
// event, off the runs' own path.
//
// Exactly once: an event is acked only after its record is written, and a
// record remembers which events it holds: Seqs, the stream sequences
// folded into it above Floor, where Floor is the consumer's ack floor when
// the record was written (every event at or below it has been acked, so
// folded). An event handed out again (its ack lost, its instance gone
// before the ack) whose sequence is at or below Floor or in Seqs is not
// added again. Seqs stays short: it holds only what was folded above the
// ack floor, which moves up as events are acked. Events stored twice in
// the stream (a run's event emitted again after the stream's duplicate
// window) are two events and count twice.
type Folder struct {
	bus *bus.Bus
	cfg FolderConfig
	log *zap.Logger

	mu      sync.Mutex
	pending []*entry
	kick    chan struct{}

	wrap func(bus.Handler) bus.Handler // test seam: wraps the handler
}

// entry is one run event waiting to be folded.
type entry struct {
	key  string
	rec  Record // Day, Source, Name, Model and this event's counts
	seq  uint64
	done chan error
}

// NewFolder returns a Folder on b. It does no I/O.
func NewFolder(b *bus.Bus, cfg FolderConfig) *Folder {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	return &Folder{bus: b, cfg: cfg, log: cfg.Log, kick: make(chan struct{}, 1)}
}

// Run folds run events until ctx is done. It returns nil after a clean
// stop, an error when the consumer cannot be created or was lost.
func (f *Folder) Run(ctx context.Context) error {
	subj := f.bus.Subjects
	w, err := bus.NewWorker(f.bus.JetStream(), bus.WorkerConfig{
		Stream: bus.StreamEvents,
		Consumer: jetstream.ConsumerConfig{
			Durable:     ConsumerName,
			Description: "agentwork usage: the model tokens of run events, summed in " + bus.BucketUsage,
			FilterSubjects: []string{
				subj.Event("*", bus.OutcomeDone), subj.Event("*", bus.OutcomeSkip), subj.Event("*", bus.OutcomeError),
			},
			AckPolicy:  jetstream.AckExplicitPolicy,
			MaxDeliver: -1,
		},
		Concurrency: f.cfg.Concurrency,
		PullMax:     f.cfg.Concurrency,
		DoubleAck:   true,
		Log:         f.log,
	}, f.handler())
	if err != nil {
		return err
	}
	// The flusher outlives the worker's shutdown: the handlers still in
	// flight wait for it.
	flushCtx, stopFlush := context.WithCancel(context.WithoutCancel(ctx))
	flushed := make(chan struct{})
	go func() { defer close(flushed); f.flushLoop(flushCtx) }()
	err = w.Run(ctx)
	stopFlush()
	<-flushed
	return err
}

func (f *Folder) handler() bus.Handler {
	if f.wrap != nil {
		return f.wrap(f.handle)
	}
	return f.handle
}

// handle queues a run event's usage for the next flush and waits for it.
func (f *Folder) handle(ctx context.Context, m jetstream.Msg) bus.Verdict {
	e, err := entryOf(m)
	if err != nil {
		f.log.Error("run event unreadable; not counted", zap.String("subject", m.Subject()), zap.Error(err))
		return bus.Terminate()
	}
	if e == nil {
		return bus.Done() // no usage: the run did not reach the model
	}
	f.mu.Lock()
	f.pending = append(f.pending, e)
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
	select {
	case err := <-e.done:
		if err != nil {
			f.log.Warn("usage not folded (bus trouble?); handed out again", zap.String("key", e.key), zap.Duration("retry_in", f.cfg.Retry), zap.Error(err))
			return bus.Retry(f.cfg.Retry)
		}
		return bus.Done()
	case <-ctx.Done():
		// Shutdown: another instance folds it (once: it may be folded
		// meanwhile, and then it is found in the record).
		return bus.Defer(0)
	}
}

// entryOf reads the usage of a run event: nil when it has none.
func entryOf(m jetstream.Msg) (*entry, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, err
	}
	ev, err := bus.DecodeEvent(m.Data())
	if err != nil {
		return nil, err
	}
	var res agentwork.Result
	if err := ev.DecodeData(&res); err != nil {
		return nil, err
	}
	if res.Usage == nil {
		return nil, nil
	}
	r := Record{
		Day: ev.Time.UTC().Format(DayLayout), Source: res.Source, Name: res.Name, Model: res.Model,
		Runs: 1, InputTokens: int64(max(res.Usage.InputTokens, 0)), OutputTokens: int64(max(res.Usage.OutputTokens, 0)),
		CachedInputTokens: int64(max(res.Usage.CachedInputTokens, 0)),
	}
	return &entry{key: Key(r.Day, r.Source, r.Name, r.Model), rec: r, seq: md.Sequence.Stream, done: make(chan error, 1)}, nil
}

// flushLoop folds what is pending whenever a handler queued something,
// until ctx ends; then it fails what is left.
func (f *Folder) flushLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			for _, e := range f.take() {
				e.done <- ctx.Err()
			}
			return
		case <-f.kick:
		}
		if batch := f.take(); len(batch) > 0 {
			f.flush(ctx, batch)
		}
	}
}

func (f *Folder) take() []*entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	batch := f.pending
	f.pending = nil
	return batch
}

// flush folds a batch: one compare-and-set per key. Each entry learns
// whether its key was written.
func (f *Folder) flush(ctx context.Context, batch []*entry) {
	floor := f.ackFloor(ctx)
	byKey := map[string][]*entry{}
	for _, e := range batch {
		byKey[e.key] = append(byKey[e.key], e)
	}
	var g errgroup.Group
	g.SetLimit(8)
	for key, es := range byKey {
		g.Go(func() error {
			err := fold(ctx, f.bus.Usage, key, es, floor)
			for _, e := range es {
				e.done <- err
			}
			return nil
		})
	}
	_ = g.Wait()
}

// ackFloor is the shared consumer's ack floor: every run event at or
// below it was acked, so folded. 0 when it cannot be read (the records
// then keep more sequences until a later flush reads it).
func (f *Folder) ackFloor(ctx context.Context) uint64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := f.bus.JetStream().Consumer(ctx, bus.StreamEvents, ConsumerName)
	if err != nil {
		f.log.Debug("usage consumer's ack floor not read", zap.Error(err))
		return 0
	}
	return c.CachedInfo().AckFloor.Stream
}

// fold adds the entries of one key to its record, each at most once (see
// Folder), and raises the record's floor to floor.
func fold(ctx context.Context, kv jetstream.KeyValue, key string, es []*entry, floor uint64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _, err := bus.Update(ctx, kv, key, func(r *Record, found bool) (bool, error) {
		if !found {
			first := es[0].rec
			*r = Record{Day: first.Day, Source: first.Source, Name: first.Name, Model: first.Model}
		}
		added := false
		for _, e := range es {
			if e.seq <= r.Floor || slices.Contains(r.Seqs, e.seq) {
				continue
			}
			r.Runs += e.rec.Runs
			r.InputTokens += e.rec.InputTokens
			r.OutputTokens += e.rec.OutputTokens
			r.CachedInputTokens += e.rec.CachedInputTokens
			r.Seqs = append(r.Seqs, e.seq)
			added = true
		}
		if !added {
			return false, nil
		}
		r.Floor = max(r.Floor, floor)
		r.Seqs = slices.DeleteFunc(r.Seqs, func(s uint64) bool { return s <= r.Floor })
		slices.Sort(r.Seqs)
		return true, nil
	})
	var corrupt *bus.CorruptError
	if errors.As(err, &corrupt) {
		return fmt.Errorf("usage: %s in %s is not a usage record (delete it to count afresh): %w", key, bus.BucketUsage, err)
	}
	return err
}
