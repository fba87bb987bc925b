package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// fire is one fired timer as a consumer saw it.
type fire struct {
	bus.Timer
	seq    uint64    // stream sequence of the fired copy
	stored time.Time // when the server stored the fired copy
	got    time.Time // when the consumer received it
	ttl    string    // the copy's Nats-TTL header
}

// watchFired consumes the fired timers of b (every one in the stream, then
// new ones) with an ordered consumer and sends each on the channel.
func watchFired(t testing.TB, b *bus.Bus, buf int) <-chan fire {
	t.Helper()
	cons, err := b.JetStream().OrderedConsumer(t.Context(), bus.StreamTimers, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subjects.TimersFired()},
	})
	if err != nil {
		t.Fatalf("OrderedConsumer: %v", err)
	}
	return consumeFired(t, b, cons, buf)
}

// consumeFired receives the fired timers from cons, acks them, and sends
// each on the channel.
func consumeFired(t testing.TB, b *bus.Bus, cons jetstream.Consumer, buf int, opts ...jetstream.PullConsumeOpt) <-chan fire {
	t.Helper()
	tm := bus.NewTimers(b)
	ch := make(chan fire, buf)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		got := time.Now()
		tmr, err := tm.DecodeTimer(m.Subject(), m.Data())
		if err != nil {
			t.Errorf("DecodeTimer(%s) = %v", m.Subject(), err)
			return
		}
		md, err := m.Metadata()
		if err != nil {
			t.Errorf("Metadata: %v", err)
			return
		}
		ch <- fire{Timer: tmr, seq: md.Sequence.Stream, stored: md.Timestamp, got: got, ttl: m.Headers().Get(jetstream.MsgTTLHeader)}
		_ = m.Ack()
	}, opts...)
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	t.Cleanup(cc.Stop)
	return ch
}

// waitFires waits for n fires on ch, at most d.
func waitFires(t testing.TB, ch <-chan fire, n int, d time.Duration) []fire {
	t.Helper()
	timeout := time.After(d)
	var out []fire
	for len(out) < n {
		select {
		case f := <-ch:
			out = append(out, f)
		case <-timeout:
			t.Fatalf("%d of %d timers fired within %s", len(out), n, d)
		}
	}
	return out
}

// onlySentinel sets a "sentinel" timer due at `at` and checks that it is
// the next fire (nothing else fired before it, a timer already fired did
// not fire again) and that the stream then holds wantSeq messages (each Set
// stores one, each fire one).
func onlySentinel(t testing.TB, b *bus.Bus, tm *bus.Timers, fired <-chan fire, at time.Time, wantSeq uint64) {
	t.Helper()
	if err := tm.Set(t.Context(), "sentinel", at, nil); err != nil {
		t.Fatal(err)
	}
	if f := waitFires(t, fired, 1, 10*time.Second)[0]; f.Key != "sentinel" {
		t.Errorf("%s fired, want only the sentinel", f.Key)
	}
	if last, _ := lastSeq(t, b); last != wantSeq {
		t.Errorf("stream last sequence = %d, want %d (one per Set and per fire)", last, wantSeq)
	}
}

// armAll sets timers keyed key(i) due at due(i) with `workers` concurrent
// Set calls and returns how long it took.
func armAll(t *testing.T, tm *bus.Timers, n, workers int, key func(int) string, due func(int) time.Time) time.Duration {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := tm.Set(context.Background(), key(i), due(i), nil); err != nil {
					t.Errorf("Set(%s): %v", key(i), err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// lastSeq is the timers stream's last sequence: every stored message (a Set
// or a fire) takes one; purges and roll-ups take none. So after n Sets it is
// n plus the number of fires, whatever the stream still holds.
func lastSeq(t testing.TB, b *bus.Bus) (last, msgs uint64) {
	t.Helper()
	st, err := b.JetStream().Stream(t.Context(), bus.StreamTimers)
	if err != nil {
		t.Fatalf("Stream(%s): %v", bus.StreamTimers, err)
	}
	return st.CachedInfo().State.LastSeq, st.CachedInfo().State.Msgs
}

func TestTimerKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"heartbeat", true},
		{"cron.daily-report", true},
		{"at.0190b1e2_x.y", true},
		{"a.b.c.d.e.f.g.h", true},
		{"a.b.c.d.e.f.g.h.i", false},
		{"", false},
		{".a", false},
		{"a.", false},
		{"a..b", false},
		{"A", false},
		{"a b", false},
		{"a.*", false},
		{"a.>", false},
		{strings.Repeat("a", 200), false}, // a token is at most 64
		{strings.Repeat(strings.Repeat("a", 49)+".", 4) + "b", false},
		{strings.Repeat(strings.Repeat("a", 49)+".", 3) + strings.Repeat("b", 50), true},
	} {
		if err := bus.CheckTimerKey(tc.key); (err == nil) != tc.ok {
			t.Errorf("CheckTimerKey(%q) = %v, want ok %v", tc.key, err, tc.ok)
		}
	}
}

func TestTimersStreamConfig(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	st, err := b.JetStream().Stream(t.Context(), bus.StreamTimers)
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	if !c.AllowMsgSchedules || !c.AllowMsgTTL || c.MaxAge != 0 || c.MaxMsgsPerSubject != 1 || c.Duplicates != bus.TimersDuplicates || c.Retention != jetstream.LimitsPolicy {
		t.Errorf("timers stream: schedules %v, msg TTL %v, max age %s, max per subject %d, duplicates %s, retention %s; want true, true, 0, 1, %s, limits",
			c.AllowMsgSchedules, c.AllowMsgTTL, c.MaxAge, c.MaxMsgsPerSubject, c.Duplicates, c.Retention, bus.TimersDuplicates)
	}
	want := []string{"agentwork.timer.pending.>", "agentwork.timer.fired.>"}
	if fmt.Sprint(c.Subjects) != fmt.Sprint(want) {
		t.Errorf("timers stream subjects = %v, want %v", c.Subjects, want)
	}
}

func TestTimerSetRejectsBadInput(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	at := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name string
		key  string
		at   time.Time
		data json.RawMessage
	}{
		{"bad key", "Cron.x", at, nil},
		{"wildcard key", "cron.>", at, nil},
		{"zero time", "cron.x", time.Time{}, nil},
		{"data not JSON", "cron.x", at, json.RawMessage("{")},
	} {
		if err := tm.Set(t.Context(), tc.key, tc.at, tc.data); err == nil {
			t.Errorf("%s: Set(%q, %v, %q) = nil, want an error", tc.name, tc.key, tc.at, tc.data)
		}
	}
	if last, _ := lastSeq(t, b); last != 0 {
		t.Errorf("stream last sequence = %d after rejected Sets, want 0", last)
	}
}

// A timer fires once, at or after its due time to the nanosecond (not the
// whole second before it), carrying its key, due time, id and data; its
// pending schedule is gone afterwards and the fired copy carries the TTL.
func TestTimerFiresOnce(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	fired := watchFired(t, b, 8)
	// 900 ms past a whole second: a whole-second schedule would fire 900 ms early.
	due := time.Now().Truncate(time.Second).Add(2*time.Second + 900*time.Millisecond)
	data := json.RawMessage(`{"job":"daily"}`)
	if err := tm.Set(t.Context(), "cron.daily", due, data); err != nil {
		t.Fatal(err)
	}
	p, err := tm.Pending(t.Context(), "cron.daily")
	if err != nil || !p.Due.Equal(due) || string(p.Data) != string(data) {
		t.Fatalf("Pending(cron.daily) = %+v, %v; want due %s data %s", p, err, due, data)
	}
	f := waitFires(t, fired, 1, 10*time.Second)[0]
	if f.Key != "cron.daily" || !f.Due.Equal(due) || f.ID != p.ID || string(f.Data) != string(data) {
		t.Errorf("fired %+v, want key cron.daily, due %s, id %s, data %s", f.Timer, due, p.ID, data)
	}
	if late := f.stored.Sub(due); late < 0 || late > time.Second {
		t.Errorf("stored %s after its due time, want 0 to 1s", late)
	}
	if f.ttl != bus.TimerFiredTTL.String() {
		t.Errorf("fired copy Nats-TTL = %q, want %q", f.ttl, bus.TimerFiredTTL.String())
	}
	if _, err := tm.Pending(t.Context(), "cron.daily"); !errors.Is(err, bus.ErrNoTimer) {
		t.Errorf("Pending after the fire = %v, want ErrNoTimer", err)
	}
	// A sentinel set after the first fire shows there is no second fire of
	// cron.daily before it.
	onlySentinel(t, b, tm, fired, time.Now().Add(time.Second), 4)
}

// Fired reads the newest fired copy of a key, whether a consumer took it
// or not; a key that never fired has none.
func TestTimerFired(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	fired := watchFired(t, b, 8)
	if _, err := tm.Fired(t.Context(), "cron.never"); !errors.Is(err, bus.ErrNoTimer) {
		t.Errorf("Fired(never fired) = %v, want ErrNoTimer", err)
	}
	data := json.RawMessage(`{"tick":"x"}`)
	if err := tm.Set(t.Context(), "cron.a", time.Now(), data); err != nil {
		t.Fatal(err)
	}
	p, err := tm.Pending(t.Context(), "cron.a")
	if err != nil {
		t.Fatal(err)
	}
	waitFires(t, fired, 1, 10*time.Second)
	f, err := tm.Fired(t.Context(), "cron.a")
	if err != nil || f.ID != p.ID || string(f.Data) != string(data) {
		t.Errorf("Fired(cron.a) = %+v, %v; want the timer %s with data %s", f, err, p.ID, data)
	}
	if _, err := tm.Fired(t.Context(), "cron.a.retry"); !errors.Is(err, bus.ErrNoTimer) {
		t.Errorf("Fired(cron.a.retry) = %v, want ErrNoTimer (another key)", err)
	}
}

// A fired copy's Seq against the consumer's AckFloor tells whether the
// consumer has handled it: above the floor until acked, at or below after.
func TestTimerFiredAckFloor(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	if floor, err := tm.AckFloor(t.Context(), "nobody"); err != nil || floor != 0 {
		t.Fatalf("AckFloor(no consumer) = %d, %v; want 0, nil", floor, err)
	}
	cons, err := b.JetStream().CreateOrUpdateConsumer(t.Context(), bus.StreamTimers, jetstream.ConsumerConfig{
		Durable: "floor", FilterSubject: b.Subjects.TimersFired(), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.Set(t.Context(), "cron.a", time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := <-batch.Messages()
	if !ok {
		t.Fatalf("no fire: %v", batch.Error())
	}
	f, err := tm.Fired(t.Context(), "cron.a")
	if err != nil {
		t.Fatal(err)
	}
	if md, _ := m.Metadata(); f.Seq == 0 || md == nil || md.Sequence.Stream != f.Seq {
		t.Fatalf("Fired(cron.a).Seq = %d, want the delivered copy's sequence (%v)", f.Seq, md)
	}
	if floor, err := tm.AckFloor(t.Context(), "floor"); err != nil || floor >= f.Seq {
		t.Errorf("AckFloor before the ack = %d, %v; want below %d", floor, err, f.Seq)
	}
	if err := m.DoubleAck(t.Context()); err != nil {
		t.Fatal(err)
	}
	if floor, err := tm.AckFloor(t.Context(), "floor"); err != nil || floor < f.Seq {
		t.Errorf("AckFloor after the ack = %d, %v; want at least %d", floor, err, f.Seq)
	}
}

// (a) One pending timer per key: a second Set replaces the first, also when
// the first falls due before the second.
func TestTimerSetReplaces(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	fired := watchFired(t, b, 8)
	now := time.Now()
	if err := tm.Set(t.Context(), "heartbeat.default", now.Add(time.Second), json.RawMessage(`"first"`)); err != nil {
		t.Fatal(err)
	}
	if err := tm.Set(t.Context(), "heartbeat.default", now.Add(2*time.Second), json.RawMessage(`"second"`)); err != nil {
		t.Fatal(err)
	}
	if _, msgs := lastSeq(t, b); msgs != 1 {
		t.Errorf("stream holds %d messages after two Sets of one key, want 1", msgs)
	}
	if err := tm.Set(t.Context(), "sentinel", now.Add(2500*time.Millisecond), nil); err != nil {
		t.Fatal(err)
	}
	got := waitFires(t, fired, 2, 10*time.Second)
	if got[0].Key != "heartbeat.default" || string(got[0].Data) != `"second"` || got[1].Key != "sentinel" {
		t.Errorf("fired %s %s then %s, want heartbeat.default \"second\" then sentinel", got[0].Key, got[0].Data, got[1].Key)
	}
	if last, _ := lastSeq(t, b); last != 5 {
		t.Errorf("stream last sequence = %d, want 5 (3 sets, 2 fires)", last)
	}
}

func TestTimerCancel(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	fired := watchFired(t, b, 8)
	now := time.Now()
	if err := tm.Set(t.Context(), "at.reminder", now.Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if err := tm.Cancel(t.Context(), "at.reminder"); err != nil {
		t.Fatal(err)
	}
	if err := tm.Cancel(t.Context(), "at.never-set"); err != nil {
		t.Errorf("Cancel of a key with no timer = %v, want nil", err)
	}
	if _, err := tm.Pending(t.Context(), "at.reminder"); !errors.Is(err, bus.ErrNoTimer) {
		t.Errorf("Pending after Cancel = %v, want ErrNoTimer", err)
	}
	onlySentinel(t, b, tm, fired, now.Add(1500*time.Millisecond), 3) // at.reminder was cancelled
}

// A due time in the past, or closer than the server's 250 ms scheduling
// interval, fires soon after Set: not lost, not early.
func TestTimerDueNowOrPast(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	fired := watchFired(t, b, 8)
	for _, tc := range []struct {
		key string
		due time.Duration
	}{{"past", -time.Hour}, {"now", 0}, {"soon", 100 * time.Millisecond}} {
		set := time.Now()
		if err := tm.Set(t.Context(), tc.key, set.Add(tc.due), nil); err != nil {
			t.Fatal(err)
		}
		f := waitFires(t, fired, 1, 10*time.Second)[0]
		after := f.stored.Sub(set)
		t.Logf("due %v: stored %v after Set", tc.due, after)
		if f.Key != tc.key || after < max(tc.due, 0) || after > 2*time.Second {
			t.Errorf("due %v: %s fired %v after Set, want %s, %v to 2s", tc.due, f.Key, after, tc.key, max(tc.due, 0))
		}
	}
}

// Fired copies do not pile up: the stream keeps the newest fired copy of a
// key, and none of the pending schedule once fired.
func TestTimerFiredCopiesKeepOnePerKey(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	fired := watchFired(t, b, 8)
	for i := range 3 {
		if err := tm.Set(t.Context(), "cron.every", time.Now().Add(300*time.Millisecond), json.RawMessage(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if f := waitFires(t, fired, 1, 10*time.Second)[0]; string(f.Data) != fmt.Sprint(i) {
			t.Fatalf("fire %d carried %s", i, f.Data)
		}
	}
	last, msgs := lastSeq(t, b)
	if last != 6 || msgs != 1 {
		t.Errorf("after 3 fires of one key: last sequence %d, messages %d; want 6, 1", last, msgs)
	}
}

// (b) Timers that fall due while the server is down fire exactly once when
// it is back.
func TestTimersPastDueAfterRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("restarts a server and waits for timers to fall due")
	}
	dir := t.TempDir()
	open := func() *bus.Bus {
		return bustest.New(t, func(c *bus.Config) { c.DataDir = dir })
	}
	b := open()
	tm := bus.NewTimers(b)
	const n = 500
	// Far enough ahead that 500 synced Sets end before the first is due
	// on a loaded machine (3 s was not: CI with other builds running).
	lastDue := time.Now().Add(8 * time.Second)
	for i := range n {
		due := lastDue.Add(-time.Duration(i) * time.Millisecond)
		if err := tm.Set(t.Context(), fmt.Sprintf("t.%d", i), due, nil); err != nil {
			t.Fatal(err)
		}
	}
	if last, _ := lastSeq(t, b); last != n {
		t.Fatalf("stream last sequence = %d before the shutdown, want %d: timers fired while the server was up (Set too slow?)", last, n)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	if time.Now().Before(lastDue) {
		// Let every timer fall due while the server is down.
		<-time.After(time.Until(lastDue) + 100*time.Millisecond)
	}
	up := time.Now()
	b = open()
	fired := watchFired(t, b, n+1)
	got := waitFires(t, fired, n, 30*time.Second)
	seen := map[string]bool{}
	var latest time.Time
	for _, f := range got {
		if seen[f.Key] {
			t.Errorf("%s fired twice", f.Key)
		}
		seen[f.Key] = true
		if f.stored.After(latest) {
			latest = f.stored
		}
	}
	t.Logf("%d timers past due: down %v, all fired %v after the restart began", n, up.Sub(down).Round(time.Millisecond), latest.Sub(up).Round(time.Millisecond))
	tm = bus.NewTimers(b)
	onlySentinel(t, b, tm, fired, time.Now().Add(time.Second), uint64(2*n+2))
}

// A Set that arrives while the key's previous timer is firing is not lost:
// 500 timers fall due together and each key is set again, in random order,
// while they are being fired. Every re-armed timer fires, once.
func TestTimerSetWhileFiring(t *testing.T) {
	t.Parallel()
	const n = 500
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	fired := watchFired(t, b, 2*n+1)
	at := time.Now().Truncate(time.Second).Add(2 * time.Second)
	for i := range n {
		if err := tm.Set(t.Context(), fmt.Sprintf("r.%d", i), at, nil); err != nil {
			t.Fatal(err)
		}
	}
	<-time.After(time.Until(at)) // the server starts firing them now
	again := at.Add(2 * time.Second)
	var wg sync.WaitGroup
	for _, i := range rand.Perm(n) {
		wg.Go(func() {
			if err := tm.Set(t.Context(), fmt.Sprintf("r.%d", i), again, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := tm.Set(t.Context(), "sentinel", again.Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	first, second := map[string]int{}, map[string]int{}
	for {
		f := waitFires(t, fired, 1, 30*time.Second)[0]
		if f.Key == "sentinel" {
			break
		}
		if f.Due.Equal(again) {
			second[f.Key]++
		} else {
			first[f.Key]++
		}
	}
	t.Logf("%d keys: %d fired at %s before they were set again", n, len(first), at.Format(time.TimeOnly))
	for i := range n {
		k := fmt.Sprintf("r.%d", i)
		if second[k] != 1 || first[k] > 1 {
			t.Errorf("%s: fired %d times as first set, %d times as set again; want at most 1, exactly 1", k, first[k], second[k])
		}
	}
}

// PendingKeys lists the keys with a pending timer under a prefix, and no
// other: not fired ones, not cancelled ones, not those of another prefix.
func TestTimerPendingKeys(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	ctx := t.Context()
	later := time.Now().Add(time.Hour)
	for _, key := range []string{"cron.a", "cron.a.retry", "cron.b", "cron.c", "heartbeat.default"} {
		if err := tm.Set(ctx, key, later, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := tm.Set(ctx, "cron.b", later.Add(time.Minute), nil); err != nil { // replaced: still one key
		t.Fatal(err)
	}
	if err := tm.Cancel(ctx, "cron.c"); err != nil {
		t.Fatal(err)
	}
	fired := watchFired(t, b, 1)
	if err := tm.Set(ctx, "cron.d", time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	waitFires(t, fired, 1, 5*time.Second)
	got, err := tm.PendingKeys(ctx, "cron")
	if err != nil {
		t.Fatalf("PendingKeys: %v", err)
	}
	want := map[string]bool{"cron.a": true, "cron.a.retry": true, "cron.b": true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("PendingKeys(cron) = %v, want %v", got, want)
	}
	if _, err := tm.PendingKeys(ctx, "cron.*"); err == nil {
		t.Error("PendingKeys(cron.*) = nil error, want a bad key")
	}
}

// A Set purges the key's older timers only when there are some: arming
// a key whose timer fired (a cron job's next tick) or a new key is one
// stored message, not also a purge (a synced write on the stream every
// timer shares). A Cancel of a key with nothing pending purges nothing.
func TestSetPurgesOnlyWhenAnOlderTimerIsPending(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tm := bus.NewTimers(b)
	var purges atomic.Int32
	sub, err := b.Conn().Subscribe("$JS.API.STREAM.PURGE."+bus.StreamTimers, func(*nats.Msg) { purges.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(time.Hour)
	for i := range 5 {
		if err := tm.Set(t.Context(), fmt.Sprintf("fresh.k%d", i), far, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := tm.Cancel(t.Context(), "fresh.none"); err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if n := purges.Load(); n != 0 {
		t.Fatalf("%d purges for 5 Sets of new keys and a Cancel of a key with no timer; want none", n)
	}
	// Replacing a pending timer still removes the older one.
	if err := tm.Set(t.Context(), "fresh.k0", far.Add(time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	p, err := tm.Pending(t.Context(), "fresh.k0")
	if err != nil || !p.Due.Equal(far.Add(time.Minute).UTC()) {
		t.Fatalf("Pending = %+v, %v; want the replacing timer", p, err)
	}
	keys, err := tm.PendingKeys(t.Context(), "fresh")
	if err != nil || len(keys) != 5 {
		t.Fatalf("PendingKeys = %v, %v; want 5 keys", keys, err)
	}
	st, err := b.JetStream().Stream(t.Context(), bus.StreamTimers)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(b.Subjects.TimersPending()))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 5 {
		t.Fatalf("%d pending timers stored, want 5 (the replaced one purged)", len(info.State.Subjects))
	}
}
