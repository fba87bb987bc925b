package bus_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// (c) On a 3-node cluster with R3 streams, timers fall due every second for
// 20 s while the timers stream's leader is stepped down six times (each
// within a few milliseconds of a second's fires) and the leader node is
// stopped and started again: every timer fires once, none twice, none lost.
// Two kinds: 20 one-shot timers a second set up front, and 10 chains that
// the consumer re-arms for the next second on each fire, as cron will.
func TestTimersClusterFireOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a 3-node cluster for about 30s")
	}
	const (
		secs   = 20
		perSec = 20
		chains = 10
	)
	c := bustest.NewCluster(t, 3)
	b := c.Open()
	tm := bus.NewTimers(b)
	ctx := t.Context()
	// A durable consumer, replicated like the stream, as the runtime's
	// worker will use; short pulls, so a pull lost with a consumer leader
	// is re-sent within a second or two.
	cons, err := b.JetStream().CreateOrUpdateConsumer(ctx, bus.StreamTimers, jetstream.ConsumerConfig{
		Durable: "timers-test", FilterSubject: b.Subjects.TimersFired(), AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	fired := consumeFired(t, b, cons, 4096, jetstream.PullExpiry(2*time.Second))

	// Far enough ahead that every Set is stored before the first is due,
	// also on a loaded machine (6 s was not, with the suite's other
	// packages running beside it).
	base := time.Now().Truncate(time.Second).Add(14 * time.Second)
	due := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	armAll(t, tm, secs*perSec, 16, func(i int) string { return fmt.Sprintf("once.s%d.k%d", i/perSec, i%perSec) },
		func(i int) time.Time { return due(i / perSec) })
	armAll(t, tm, chains, chains, func(j int) string { return fmt.Sprintf("chain.c%d", j) }, func(int) time.Time { return due(0) })
	sets := secs*perSec + chains
	if t.Failed() {
		t.FailNow()
	}
	if time.Now().After(base) {
		t.Fatalf("setting %d timers took until %v after the first was due", sets, time.Since(base))
	}

	// The disruptions, each at its time: step-downs just after a second's
	// fires were proposed, and a stop and start of the leader node.
	var wg sync.WaitGroup
	dctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	at := func(d time.Duration, what string, fn func() error) {
		wg.Go(func() {
			select {
			case <-dctx.Done():
				return
			case <-time.After(time.Until(base.Add(d))):
			}
			for attempt := 0; ; attempt++ {
				err := fn()
				if err == nil {
					t.Logf("%v: %s", time.Since(base).Round(time.Millisecond), what)
					return
				}
				if attempt == 50 || dctx.Err() != nil {
					t.Errorf("%s: %v", what, err)
					return
				}
				<-time.After(100 * time.Millisecond)
			}
		})
	}
	stepDown := func() error {
		sctx, cancel := context.WithTimeout(dctx, 2*time.Second)
		defer cancel()
		return bustest.StepDown(sctx, b.Conn(), bus.StreamTimers)
	}
	for i, s := range []int{3, 5, 7, 13, 15, 17} {
		at(time.Duration(s)*time.Second+[]time.Duration{0, 3, 10, 30}[i%4]*time.Millisecond, "stream leader stepped down", stepDown)
	}
	stopped := make(chan int, 1)
	at(9*time.Second, "leader node stopped", func() error {
		sctx, cancel := context.WithTimeout(dctx, 2*time.Second)
		defer cancel()
		leader, err := bustest.StreamLeader(sctx, b.Conn(), bus.StreamTimers)
		if err != nil {
			return err
		}
		i := c.Index(leader)
		c.Stop(i)
		stopped <- i
		return nil
	})
	at(11*time.Second, "node started again", func() error {
		select {
		case i := <-stopped:
			c.Start(i)
		case <-dctx.Done():
		}
		return nil
	})

	// Consume every fire; re-arm the chains; count by stream sequence (a
	// redelivered sequence is not a second fire).
	want := secs*perSec + chains*secs
	seqs := map[uint64]bool{}
	byTimer := map[string][]uint64{}
	// Lateness: when the server stored the fire, after its due time. The
	// chains' also include the consumer's: a chain is re-armed once its
	// fire is consumed, so a slow consumer makes the next fire late.
	late := map[string][]time.Duration{}
	worst := make([]time.Duration, secs) // per due second
	var delivery, slowestSet time.Duration
	timeout := time.After(time.Until(due(secs)) + 30*time.Second)
	for len(seqs) < want {
		var f fire
		select {
		case f = <-fired:
		case <-timeout:
			t.Fatalf("%d of %d timers fired", len(seqs), want)
		}
		if seqs[f.seq] {
			continue
		}
		seqs[f.seq] = true
		id := f.Key + "@" + f.Due.Format(time.RFC3339Nano)
		byTimer[id] = append(byTimer[id], f.seq)
		late[strings.Split(f.Key, ".")[0]] = append(late[strings.Split(f.Key, ".")[0]], f.stored.Sub(f.Due))
		if s := int(f.Due.Sub(base) / time.Second); s >= 0 && s < secs {
			worst[s] = max(worst[s], f.stored.Sub(f.Due))
		}
		delivery = max(delivery, f.got.Sub(f.stored))
		if next := f.Due.Add(time.Second); strings.HasPrefix(f.Key, "chain.") && next.Before(due(secs)) {
			start := time.Now()
			if err := tm.Set(ctx, f.Key, next, nil); err != nil {
				t.Fatal(err)
			}
			slowestSet = max(slowestSet, time.Since(start))
			sets++
		}
	}
	stop()
	wg.Wait()

	for id, s := range byTimer {
		if len(s) > 1 {
			t.Errorf("%s fired %d times (stream sequences %v)", id, len(s), s)
		}
	}
	for s := range secs {
		for k := range perSec {
			if id := fmt.Sprintf("once.s%d.k%d@%s", s, k, due(s).UTC().Format(time.RFC3339Nano)); len(byTimer[id]) == 0 {
				t.Errorf("%s did not fire", id)
			}
		}
		for j := range chains {
			if id := fmt.Sprintf("chain.c%d@%s", j, due(s).UTC().Format(time.RFC3339Nano)); len(byTimer[id]) == 0 {
				t.Errorf("%s did not fire", id)
			}
		}
	}
	// Nothing fires after the last: a sentinel is the next fire, and the
	// stream stored exactly one copy per timer.
	if err := tm.Set(ctx, "sentinel", time.Now().Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	sets++
	if f := waitFires(t, fired, 1, 20*time.Second)[0]; f.Key != "sentinel" {
		t.Errorf("%s fired after the last timer, want the sentinel", f.Key)
	}
	if last, _ := lastSeq(t, b); last != uint64(sets+want+1) {
		t.Errorf("stream last sequence = %d, want %d (%d sets, %d fires)", last, sets+want+1, sets, want+1)
	}
	for _, kind := range []string{"once", "chain"} {
		l := late[kind]
		slices.Sort(l)
		t.Logf("%d %s fires: stored after due p50 %v, p99 %v, max %v", len(l), kind,
			l[len(l)/2].Round(time.Millisecond), l[len(l)*99/100].Round(time.Millisecond), l[len(l)-1].Round(time.Millisecond))
	}
	for s, w := range worst {
		worst[s] = w.Round(time.Millisecond)
	}
	t.Logf("latest fire of each second: %v", worst)
	t.Logf("slowest delivery (stored to consumed) %v, slowest chain Set %v", delivery.Round(time.Millisecond), slowestSet.Round(time.Millisecond))
}
