package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// counter is a value updated by read-modify-write.
type counter struct {
	N int `json:"n"`
}

// record is a lease record as callers define them: the Lease embedded.
type record struct {
	bus.Lease
	Note string `json:"note,omitempty"`
}

func put(t *testing.T, kv jetstream.KeyValue, key string, v any) uint64 {
	t.Helper()
	raw, ok := v.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := kv.Put(t.Context(), key, raw)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func get[T any](t *testing.T, kv jetstream.KeyValue, key string) (T, uint64) {
	t.Helper()
	var v T
	e, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		t.Fatal(err)
	}
	return v, e.Revision()
}

func TestIsConflict(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx, kv := t.Context(), b.State
	rev := put(t, kv, "k", counter{})
	_, createErr := kv.Create(ctx, "k", []byte(`{}`))
	_, updateErr := kv.Update(ctx, "k", []byte(`{}`), rev+10)
	deleteErr := kv.Delete(ctx, "k", jetstream.LastRevision(rev+10))
	_, missingErr := kv.Get(ctx, "missing")
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"create of an existing key", createErr, true},
		{"update at an old revision", updateErr, true},
		{"delete at an old revision", deleteErr, true},
		{"key not found", missingErr, false},
		{"timeout", context.DeadlineExceeded, false},
		{"nil", nil, false},
	} {
		if got := bus.IsConflict(tt.err); got != tt.want {
			t.Errorf("IsConflict(%s: %v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestUpdate(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx, kv := t.Context(), b.State
	inc := func(c *counter, _ bool) (bool, error) { c.N++; return true, nil }

	v, rev, err := bus.Update(ctx, kv, "k", func(c *counter, found bool) (bool, error) {
		if found {
			t.Error("fn found a key that does not exist")
		}
		return inc(c, found)
	})
	if err != nil || v.N != 1 || rev == 0 {
		t.Fatalf("Update of an absent key = %+v, %d, %v; want it created with n 1", v, rev, err)
	}
	if v, rev2, err := bus.Update(ctx, kv, "k", func(*counter, bool) (bool, error) { return false, nil }); err != nil || v.N != 1 || rev2 != rev {
		t.Fatalf("a declined Update = %+v, %d, %v; want the stored value at revision %d", v, rev2, err, rev)
	}
	errNo := errors.New("no")
	if _, _, err := bus.Update(ctx, kv, "k", func(*counter, bool) (bool, error) { return true, errNo }); !errors.Is(err, errNo) {
		t.Fatalf("Update whose fn fails = %v, want its error", err)
	}

	// Writers racing on one key: every increment lands once.
	const writers, each = 4, 10
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				if _, _, err := bus.Update(ctx, kv, "k", inc); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got, _ := get[counter](t, kv, "k"); got.N != 1+writers*each {
		t.Fatalf("n = %d after %d racing increments, want %d", got.N, writers*each, 1+writers*each)
	}

	// UpdateAt writes first and reads only when that conflicts.
	cur, rev := get[counter](t, kv, "k")
	if v, _, err := bus.UpdateAt(ctx, kv, "k", counter{N: cur.N + 100}, rev, inc); err != nil || v.N != cur.N+100 {
		t.Fatalf("UpdateAt at the latest revision = %+v, %v; want the value given", v, err)
	}
	if v, _, err := bus.UpdateAt(ctx, kv, "k", counter{N: -1}, rev, inc); err != nil || v.N != cur.N+101 {
		t.Fatalf("UpdateAt at an old revision = %+v, %v; want fn applied to the stored value (n %d)", v, err, cur.N+101)
	}

	// A value that does not decode is reported with its revision, and
	// can be written over at that revision.
	bad := put(t, kv, "bad", []byte("not json"))
	_, _, err = bus.Update(ctx, kv, "bad", inc)
	var ce *bus.CorruptError
	if !errors.As(err, &ce) || ce.Revision != bad || ce.Key != "bad" {
		t.Fatalf("Update of a corrupt value = %v, want a *CorruptError at revision %d", err, bad)
	}
	if _, _, err := bus.UpdateAt(ctx, kv, "bad", counter{N: 7}, ce.Revision, inc); err != nil {
		t.Fatalf("UpdateAt over the corrupt value: %v", err)
	}
	if got, _ := get[counter](t, kv, "bad"); got.N != 7 {
		t.Fatalf("n = %d, want 7", got.N)
	}
}

func TestAcquire(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	other := bustest.Client(t, b) // another instance in this process: alive
	ctx, kv := t.Context(), b.Locks
	now := time.Now().UTC()
	for _, tt := range []struct {
		name string
		// stored is written before the take (nil: none).
		stored any
		// supersede is passed to Acquire.
		supersede func(*record) bool
		wantHeld  bool
	}{
		{name: "absent"},
		{name: "expired", stored: record{Lease: bus.Lease{Owner: "gone", Token: "t", Expires: now.Add(-time.Second)}}},
		{name: "released (settled) record", stored: record{Lease: bus.Lease{Owner: "gone", Token: "t"}}},
		{name: "unreadable", stored: []byte("not json")},
		{name: "a live external holder (no boot): the expiry decides", stored: record{Lease: bus.Lease{Owner: "elsewhere", Token: "t", Expires: now.Add(time.Hour)}}, wantHeld: true},
		{name: "a dead boot on this data dir is free at once", stored: record{Lease: bus.Lease{Owner: "killed", Token: "t", Boot: "deadbeef", Expires: now.Add(time.Hour)}}},
		{name: "a live Client of this process holds it", stored: record{Lease: other.NewLease(now.Add(time.Hour))}, wantHeld: true},
		{name: "superseded", stored: record{Lease: other.NewLease(now.Add(time.Hour)), Note: "same work"},
			supersede: func(h *record) bool { return h.Note == "same work" }},
		{name: "not superseded", stored: record{Lease: other.NewLease(now.Add(time.Hour)), Note: "other work"},
			supersede: func(h *record) bool { return h.Note == "same work" }, wantHeld: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "lease." + bus.Token(tt.name)
			if tt.stored != nil {
				put(t, kv, key, tt.stored)
			}
			mine := record{Note: "mine"}
			rev, err := bus.Acquire(ctx, b, kv, key, time.Minute, &mine, tt.supersede)
			var he *bus.HeldError
			if tt.wantHeld {
				if !errors.As(err, &he) || he.Key != key {
					t.Fatalf("Acquire = %d, %v; want a *HeldError", rev, err)
				}
				if want := tt.stored.(record).Lease; he.Holder != want {
					t.Errorf("holder = %+v, want %+v", he.Holder, want)
				}
				if got, _ := get[record](t, kv, key); got.Note == "mine" {
					t.Error("the held record was overwritten")
				}
				return
			}
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			got, grev := get[record](t, kv, key)
			if grev != rev || got != mine || got.Owner != b.Instance() || got.Token == "" || !b.Held(got.Lease, time.Now()) {
				t.Fatalf("stored %+v at %d, want %+v at %d, held by %s", got, grev, mine, rev, b.Instance())
			}
		})
	}
}

// A lease of the Bus that Open returned is held for its Clients (the same
// process) and free for the next process on the data dir at once, whatever
// its expiry; on an external connection only the expiry counts.
func TestLeaseOfAStoppedProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := func(c *bus.Config) { c.DataDir = dir; c.Listen = "127.0.0.1:0" }
	first := bustest.New(t, cfg)
	client := bustest.Client(t, first)
	l := first.NewLease(time.Now().Add(time.Hour))
	if !first.Held(l, time.Now()) || !client.Held(l, time.Now()) {
		t.Fatal("a live lease of this process is not held for it and its Client")
	}
	if first.Held(l, l.Expires) {
		t.Fatal("a lease is held at its expiry")
	}
	mine := record{Note: "first"}
	if _, err := bus.Acquire(t.Context(), first, first.Locks, "l", time.Hour, &mine, nil); err != nil {
		t.Fatal(err)
	}
	_ = client.Close()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second := bustest.New(t, cfg)
	if second.Held(l, time.Now()) {
		t.Fatal("the next process on the data dir finds the lease of the stopped one held")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	external, err := bus.Dial(ctx, bus.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer external.Close()
	if !external.Held(l, time.Now()) {
		t.Fatal("an external connection, which cannot know the process is gone, finds the lease free before it expires")
	}
	if el := external.NewLease(time.Now().Add(time.Hour)); el.Boot != "" || !second.Held(el, time.Now()) {
		t.Fatalf("an external taker's lease %+v is not held for the embedded owner until it expires", el)
	}
	next := record{Note: "second"}
	if _, err := bus.Acquire(ctx, second, second.Locks, "l", time.Hour, &next, nil); err != nil {
		t.Fatalf("Acquire of the stopped process's unexpired lease: %v", err)
	}
}

func TestRenew(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx, kv := t.Context(), b.Locks
	mine := record{Note: "v1"}
	rev1, err := bus.Acquire(ctx, b, kv, "r", time.Minute, &mine, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := mine.Expires
	mine.Note = "v2"
	rev2, err := bus.Renew(ctx, kv, "r", &mine, rev1, time.Hour)
	if err != nil || !mine.Expires.After(before) {
		t.Fatalf("Renew = %d, %v, expires %s; want a later expiry than %s", rev2, err, mine.Expires, before)
	}
	// The reply of that renewal was lost: the next one still names rev1.
	mine.Note = "v3"
	rev3, err := bus.Renew(ctx, kv, "r", &mine, rev1, time.Hour)
	if err != nil || rev3 <= rev2 {
		t.Fatalf("Renew after a lost reply = %d, %v; want it to adopt revision %d and write", rev3, err, rev2)
	}
	if got, rev := get[record](t, kv, "r"); got != mine || rev != rev3 {
		t.Fatalf("stored %+v at %d, want %+v at %d", got, rev, mine, rev3)
	}

	// Another take has it now: the renewal fails and names it.
	theirs := record{Lease: bus.Lease{Owner: "other", Token: "theirs", Expires: time.Now().Add(time.Hour).UTC()}}
	put(t, kv, "r", theirs)
	_, err = bus.Renew(ctx, kv, "r", &mine, rev3, time.Hour)
	var he *bus.HeldError
	if !errors.As(err, &he) || he.Holder != theirs.Lease {
		t.Fatalf("Renew of a lease taken over = %v; want a *HeldError naming %+v", err, theirs.Lease)
	}
	if got, _ := get[record](t, kv, "r"); got != theirs {
		t.Fatalf("stored %+v, want the new holder's record untouched", got)
	}
	if err := kv.Delete(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Renew(ctx, kv, "r", &mine, rev3, time.Hour); !errors.As(err, new(*bus.HeldError)) {
		t.Fatalf("Renew of a deleted lease = %v, want a *HeldError", err)
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx, kv := t.Context(), b.Locks
	take := func(key string) (record, uint64) {
		t.Helper()
		r := record{}
		rev, err := bus.Acquire(ctx, b, kv, key, time.Minute, &r, func(*record) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		return r, rev
	}
	gone := func(key string) bool {
		_, err := kv.Get(ctx, key)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}

	a, revA := take("x")
	b2, revB := take("x") // another take of the same key (supersedes a)
	if err := bus.Release(ctx, kv, "x", a.Token, revA); !errors.As(err, new(*bus.HeldError)) || gone("x") {
		t.Fatalf("Release by an earlier taker = %v; want a *HeldError and the lease kept", err)
	}
	if err := bus.Release(ctx, kv, "x", b2.Token, revB); err != nil || !gone("x") {
		t.Fatalf("Release by its taker = %v; want the lease gone", err)
	}
	if err := bus.Release(ctx, kv, "x", b2.Token, revB); err != nil {
		t.Fatalf("Release of a released lease = %v, want nil", err)
	}

	// A renewal's reply was lost: the taker's revision is old, its token current.
	c, revC := take("y")
	if _, err := bus.Renew(ctx, kv, "y", &c, revC, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := bus.Release(ctx, kv, "y", c.Token, revC); err != nil || !gone("y") {
		t.Fatalf("Release at an old revision of its own take = %v; want the lease gone", err)
	}
}

// Messages an earlier process on the data dir received and never acked
// come again as soon as the bus is opened again, not after the ack wait.
func TestReopenHandsOutWhatAStoppedProcessHadInFlight(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := func(c *bus.Config) { c.DataDir = dir }
	ctx := t.Context()
	consumer := jetstream.ConsumerConfig{Durable: "work", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour}
	fetch := func(b *bus.Bus, n int) []uint64 {
		t.Helper()
		cons, err := b.JetStream().CreateOrUpdateConsumer(ctx, bus.StreamRequests, consumer)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for m := range batch.Messages() {
			md, _ := m.Metadata()
			seqs = append(seqs, md.Sequence.Stream)
			if string(m.Data()) == "done" {
				_ = m.DoubleAck(ctx)
			}
		}
		return seqs
	}
	first := bustest.New(t, cfg)
	for _, body := range []string{"in flight", "done"} {
		if _, err := first.JetStream().Publish(ctx, first.Subjects.Request("task", "x"), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if got := fetch(first, 2); len(got) != 2 {
		t.Fatalf("first process received %v, want both messages", got)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := bustest.New(t, cfg)
	if got := fetch(second, 1); len(got) != 1 || got[0] != 1 {
		t.Fatalf("after reopening, received %v within 5s; want the unacked message 1 at once (ack wait 1h)", got)
	}
}
