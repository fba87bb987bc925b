package bus_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// TestReopenUpdatesRetentionOfAnOlderStore: a data dir provisioned by an
// earlier version (24 h duplicate windows, a locks bucket without per-key
// TTLs) gets the current windows and per-key TTLs in place when opened,
// keeping its keys.
func TestReopenUpdatesRetentionOfAnOlderStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg := bus.Config{DataDir: t.TempDir(), Listen: "off", ReadyTimeout: 20 * time.Second}
	b, err := bus.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Lay the store out as the earlier version did.
	js := b.JetStream()
	if err := js.DeleteKeyValue(ctx, bus.BucketLocks); err != nil {
		t.Fatal(err)
	}
	old, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketLocks, Description: "leases and run claims", History: 1, TTL: 7 * 24 * time.Hour, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Put(ctx, "run.kept", []byte(`{"state":"done"}`)); err != nil {
		t.Fatal(err)
	}
	for _, sc := range b.StreamConfigs() {
		if sc.Name == bus.StreamTimers {
			continue
		}
		sc.Duplicates = 24 * time.Hour
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	if info := lockStream(ctx, t, b); info.Config.AllowMsgTTL {
		t.Fatal("the old locks bucket allows per-key TTLs already; the test lays out nothing old")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b, err = bus.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	js = b.JetStream()
	info := lockStream(ctx, t, b)
	if !info.Config.AllowMsgTTL || info.Config.SubjectDeleteMarkerTTL != bus.LocksMarkerTTL || info.Config.MaxAge != bus.LocksTTL {
		t.Errorf("locks bucket after reopen: AllowMsgTTL %v, SubjectDeleteMarkerTTL %s, MaxAge %s; want true, %s, %s",
			info.Config.AllowMsgTTL, info.Config.SubjectDeleteMarkerTTL, info.Config.MaxAge, bus.LocksMarkerTTL, bus.LocksTTL)
	}
	if _, err := b.Locks.Get(ctx, "run.kept"); err != nil {
		t.Errorf("key of the old bucket after reopen: %v", err)
	}
	want := map[string]time.Duration{bus.StreamRequests: bus.RequestsDuplicates, bus.StreamDeliveries: bus.DeliveriesDuplicate, bus.StreamEvents: bus.EventsDuplicates}
	for name, d := range want {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.Duplicates; got != d {
			t.Errorf("%s duplicate window after reopen = %s, want %s", name, got, d)
		}
	}
}

func lockStream(ctx context.Context, t *testing.T, b *bus.Bus) *jetstream.StreamInfo {
	t.Helper()
	s, err := b.JetStream().Stream(ctx, "KV_"+bus.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo()
}

// TestExpiringWritesGo: a key written by UpdateAtExpiring or PutExpiring
// carries its TTL and is gone once it passes; a compare-and-set at a stale
// revision is a conflict, as with UpdateAt.
func TestExpiringWritesGo(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := bustest.New(t)
	rev, err := b.Locks.Create(ctx, "run.a", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	type rec struct{ State string }
	set := func(v *rec, found bool) (bool, error) { v.State = "done"; return true, nil }
	if _, _, err := bus.UpdateAtExpiring(ctx, b, b.Locks, "run.a", rec{State: "done"}, rev, time.Second, set); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutExpiring(ctx, b.Locks, "send.a", []byte(`{}`), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Locks.Create(ctx, "run.b", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Locks.Put(ctx, "run.b", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	// A stale revision: the write conflicts and fn decides again.
	calls := 0
	if _, _, err := bus.UpdateAtExpiring(ctx, b, b.Locks, "run.b", rec{}, 1, time.Second, func(v *rec, found bool) (bool, error) {
		calls++
		return false, nil
	}); err != nil || calls != 1 {
		t.Errorf("UpdateAtExpiring at a stale revision: err %v, fn called %d times; want nil, 1", err, calls)
	}
	s, err := b.JetStream().Stream(ctx, "KV_"+bus.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"run.a", "send.a"} {
		m, err := s.GetLastMsgForSubject(ctx, "$KV."+bus.BucketLocks+"."+key)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get("Nats-TTL"); got != "1s" {
			t.Errorf("%s Nats-TTL = %q, want 1s", key, got)
		}
	}
	// Both go when their TTL passes (the server then leaves a marker).
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := b.Locks.Watch(wctx, "*.a", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for gone := map[string]bool{}; len(gone) < 2; {
		select {
		case e := <-w.Updates():
			if e != nil && e.Operation() != jetstream.KeyValuePut {
				gone[e.Key()] = true
			}
		case <-wctx.Done():
			t.Fatalf("keys gone 10 s after their 1 s TTL: %v, want run.a and send.a", gone)
		}
	}
	if _, err := b.Locks.Get(ctx, "run.b"); err != nil {
		t.Errorf("a key written without a TTL: %v, want it kept", err)
	}
}

// TestReleasedKeysLeaveNoLastingMarker: a lease released and a dedup key
// given back leave a marker that expires within seconds, not one per
// release kept as long as the bucket keeps anything (7 days for locks,
// for ever for dedup keys).
func TestReleasedKeysLeaveNoLastingMarker(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := bustest.New(t)
	var l struct {
		bus.Lease
	}
	rev, err := bus.Acquire(ctx, b, b.Locks, "lease.x", time.Minute, &l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Release(ctx, b.Locks, "lease.x", l.Token, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Dedup.Create(ctx, "dedup.y", []byte("run-1")); err != nil {
		t.Fatal(err)
	}
	if err := bus.ReleaseValue(ctx, b.Dedup, "dedup.y", "run-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Dedup.Get(ctx, "dedup.y"); err != nil {
		t.Fatalf("a dedup key held by another run was given back: %v", err)
	}
	if err := bus.ReleaseValue(ctx, b.Dedup, "dedup.y", "run-1"); err != nil {
		t.Fatal(err)
	}
	// Taken again at once, as a released key must be.
	if _, err := b.Dedup.Create(ctx, "dedup.y", []byte("run-3")); err != nil {
		t.Fatalf("create after the release: %v", err)
	}
	if err := bus.ReleaseValue(ctx, b.Dedup, "dedup.y", "run-3"); err != nil {
		t.Fatal(err)
	}
	for _, bucket := range []string{bus.BucketLocks, bus.BucketDedup} {
		s, err := b.JetStream().Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		eventuallyTrue(t, bucket+" holds no marker", func() bool {
			info, err := s.Info(ctx)
			return err == nil && info.State.Msgs == 0
		})
	}
}

// TestWorkStreamsUseSmallerBlocks: the requests, events and deliveries
// streams are stored in 4 MB blocks, not the 8 MB of a file stream without
// limits (each stream being written holds a cache buffer of its block's
// size: see perSubjectUnbounded). 6 MB of events fill two blocks.
func TestWorkStreamsUseSmallerBlocks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := bustest.New(t, func(c *bus.Config) { c.SyncInterval = time.Minute })
	payload := make([]byte, 1000)
	var acks []jetstream.PubAckFuture
	for i := range 6000 {
		bustest.Throttle(t, b.JetStream())
		f, err := b.JetStream().PublishAsync(b.Subjects.Event("test", "done"), payload, jetstream.WithMsgID(fmt.Sprint("blk-", i)))
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	blocks, err := filepath.Glob(filepath.Join(b.Config().DataDir, "*", "*", "streams", bus.StreamEvents, "msgs", "*.blk"))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) < 2 {
		t.Fatalf("6 MB of events in %d block file(s) %v, want at least 2 (4 MB blocks)", len(blocks), blocks)
	}
	for _, name := range []string{bus.StreamRequests, bus.StreamEvents, bus.StreamDeliveries} {
		s, err := b.JetStream().Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.MaxMsgsPerSubject; got <= 1<<32 {
			t.Errorf("%s: max messages per subject %d, want a limit never reached", name, got)
		}
	}
}

// TestConsoleSessionsBounded: the console's sessions bucket is bounded in
// bytes and in the size of a session, so logins without end fill no disk.
func TestConsoleSessionsBounded(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, err := b.JetStream().Stream(t.Context(), "KV_"+bus.BucketConsoleSessions)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if cfg.MaxBytes != bus.ConsoleSessionsMaxBytes || cfg.MaxMsgSize != bus.ConsoleSessionMaxSize || cfg.MaxBytes <= 0 || cfg.MaxMsgSize <= 0 {
		t.Errorf("the sessions bucket: MaxBytes %d, MaxMsgSize %d; want %d and %d", cfg.MaxBytes, cfg.MaxMsgSize, bus.ConsoleSessionsMaxBytes, bus.ConsoleSessionMaxSize)
	}
}
