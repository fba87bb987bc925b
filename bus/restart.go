package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// redeliverOrphans hands out again at once the messages of the work
// streams (requests, deliveries) and the timers' fires that an earlier
// process on this data dir had received and not acknowledged when it
// stopped. That process is gone
// (the data-dir lock proves it), yet JetStream would hold each of them back
// until its ack wait ran out, up to 30 s after the process last signalled
// progress. Each durable consumer of these streams with acks pending is
// reset to its ack floor: what was in flight comes again now, and so do
// the messages acknowledged out of order above the floor, which their run
// and send claims acknowledge at once without running or sending them
// again.
//
// Those claims expire SettledTTL after their settle, which came after the
// message was stored, so after the first message above the floor was
// stored. A consumer is reset only when that message is younger than
// ReplayHorizon: then every claim above the floor is still there. Otherwise
// (a request or notification has waited longer, on a retry or a slow
// model) it is not reset, and what was in flight comes again after its ack
// wait.
//
// A consumer of the timers' fires is reset whatever their age: a fire
// handled again finds what it did in its owner's state (a cron job's last
// tick, the heartbeat's last fire, an approval's record), which does not
// expire. Without it, every cron job whose fire was in hand when the
// process was killed (a job firing each second always has one) waited
// out the ack wait, 30 s, before it fired again. But only when few fires
// were handed out since the ack floor (replayBound): a fire that stayed
// in flight long (one that keeps failing) holds the floor back while
// thousands are handled after it, and the reset would hand all of those
// out again, ahead of the fires due after the restart.
func (b *Bus) redeliverOrphans(ctx context.Context) error {
	for _, stream := range []string{StreamRequests, StreamDeliveries, StreamTimers} {
		s, err := b.js.Stream(ctx, stream)
		if err != nil {
			return fmt.Errorf("bus: stream %s: %w", stream, err)
		}
		list := s.ListConsumers(ctx)
		for ci := range list.Info() {
			if ci.NumAckPending == 0 {
				continue
			}
			log := b.log.With(zap.String("stream", stream), zap.String("consumer", ci.Name), zap.Int("messages", ci.NumAckPending))
			if stream == StreamTimers {
				if n := ci.Delivered.Consumer - ci.AckFloor.Consumer; n > replayBound(ci) {
					log.Info("in-flight timer fires of a stopped process come again after their ack wait: too many were handed out since the oldest of them to hand them all out again",
						zap.Uint64("since", n))
					continue
				}
			} else if age, ok := unackedAge(ctx, s, ci); !ok || age >= b.resetHorizon {
				log.Info("in-flight messages of a stopped process come again after their ack wait: the consumer has waited on a message too long to be reset",
					zap.Duration("oldest", age))
				continue
			}
			if _, err := b.js.ResetConsumer(ctx, stream, ci.Name); err != nil {
				return fmt.Errorf("bus: hand out again what consumer %s of %s had in flight: %w", ci.Name, stream, err)
			}
			log.Info("in-flight messages of a stopped process handed out again")
		}
		if err := list.Err(); err != nil {
			return fmt.Errorf("bus: consumers of %s: %w", stream, err)
		}
	}
	return nil
}

// replayBound is how many deliveries since a timers consumer's ack floor
// a restart hands out again at most (the reset hands out every fire above
// the floor): four times as many as it may have in flight, and 4,096 at
// least (a cron job's fire and a few seconds of re-arming at most).
func replayBound(ci *jetstream.ConsumerInfo) uint64 {
	return uint64(max(4*ci.Config.MaxAckPending, 4096))
}

// unackedAge returns the age of the first message above the consumer's
// ack floor; false when it cannot be read (then nothing is known of the
// messages above the floor).
func unackedAge(ctx context.Context, s jetstream.Stream, ci *jetstream.ConsumerInfo) (time.Duration, bool) {
	// Messages below the stream's first are gone, and with them nothing to
	// redeliver.
	m, err := s.GetMsg(ctx, max(ci.AckFloor.Stream+1, s.CachedInfo().State.FirstSeq))
	if err != nil {
		return 0, false
	}
	return time.Since(m.Time), true
}
