package bus_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// A key of Loading's snapshot that still holds a value when the watch's
// nil entry comes, but whose messages then go without a message (a purge
// of its subject, as the cron scheduler's dropRecords does in the jobs
// bucket, or an expiry without a marker) before the watch handed it out,
// never comes on the watch. Loading must then notice that it no longer
// exists: it only looks (Gets) when the nil entry comes, so it waits for
// the key forever, and the cron scheduler's start (watchJobs) never closes
// its loaded channel.
//
// The nil entry that comes before a key is handed out is nats.go's (it
// counts a key written during the watch twice); it cannot be made to come
// early on demand, so the watch is played by hand: Saw gets k0, the nil,
// then later writes of k0; never k1.
func TestLoadingNoticesAKeyPurgedAfterTheWatchEnd(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx := t.Context()
	kv := b.Jobs
	for _, k := range []string{"k0", "k1"} {
		if _, err := kv.PutString(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	e0, err := kv.Get(ctx, "k0")
	if err != nil {
		t.Fatal(err)
	}
	// Two watches: one that goes on with later writes, one that sees no
	// write (its caller checks from time to time).
	var ls [2]*bus.Loading
	for i := range ls {
		if ls[i], err = b.Loading(ctx, kv, ">"); err != nil {
			t.Fatal(err)
		}
		if loaded, err := ls[i].Saw(ctx, e0); loaded || err != nil {
			t.Fatalf("Saw(k0) = %v, %v; want not loaded (k1 not handed out)", loaded, err)
		}
		if loaded, err := ls[i].Saw(ctx, nil); loaded || err != nil {
			t.Fatalf("Saw(nil) = %v, %v; want not loaded (k1 holds a value, not handed out)", loaded, err)
		}
		if loaded, err := ls[i].Check(ctx); loaded || err != nil {
			t.Fatalf("Check() = %v, %v; want not loaded (k1 holds a value, not handed out)", loaded, err)
		}
	}
	l := ls[0]
	// k1's messages go, leaving none (triggers/cron/defined.go dropRecords).
	st, err := b.JetStream().Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject("$KV."+kv.Bucket()+".k1")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "k1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("Get(k1) after the purge: %v; want not found", err)
	}
	if loaded, err := ls[1].Check(ctx); !loaded || err != nil {
		t.Fatalf("Check() after k1 was purged = %v, %v; want loaded", loaded, err)
	}
	// The watch goes on with later writes; k1 never comes again.
	for i := range 5 {
		if _, err := kv.PutString(ctx, "k0", fmt.Sprint("w", i)); err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, "k0")
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := l.Saw(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if loaded {
			return
		}
	}
	t.Fatal("Loading never reports loaded: it waits for k1, purged after the watch's nil entry, which no watch will hand out (the cron scheduler's start would hang)")
}
