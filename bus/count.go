package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// CountSince returns how many messages of stream on subjects (filter
// subjects, wildcards allowed, none overlapping) were stored since since
// (zero: all). The count is exact and costs the same however many there
// are: JetStream counts them for a consumer starting at that time (its
// pending messages), and no message is read. The consumers are
// ephemeral, in memory, one per subject (a consumer of several filter
// subjects started at a time counts only some of them: nats-server
// 2.15), and deleted before CountSince returns.
func (b *Bus) CountSince(ctx context.Context, stream string, subjects []string, since time.Time) (uint64, error) {
	var n uint64
	for _, subject := range subjects {
		c, err := b.countSince(ctx, stream, subject, since)
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

func (b *Bus) countSince(ctx context.Context, stream, subject string, since time.Time) (uint64, error) {
	cfg := jetstream.ConsumerConfig{
		FilterSubject: subject, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, InactiveThreshold: 30 * time.Second,
	}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := b.js.CreateConsumer(ctx, stream, cfg)
	if err != nil {
		return 0, fmt.Errorf("bus: count %s in %s: %w", subject, stream, err)
	}
	info := cons.CachedInfo()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = b.js.DeleteConsumer(dctx, stream, info.Name) // else it goes when inactive
	return info.NumPending, nil
}
