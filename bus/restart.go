package bus

import (
	"context"
	"fmt"

	"go.uber.org/zap"
)

// redeliverOrphans hands out again at once the messages of the work
// streams (requests, deliveries) that an earlier process on this data dir
// had received and not acknowledged when it stopped. That process is gone
// (the data-dir lock proves it), yet JetStream would hold each of them back
// until its ack wait ran out, up to 30 s after the process last signalled
// progress. Each durable consumer of these streams with acks pending is
// reset to its ack floor: what was in flight comes again now, and so do
// the messages acknowledged out of order above the floor, which their run
// and send claims acknowledge at once without running or sending them
// again.
func (b *Bus) redeliverOrphans(ctx context.Context) error {
	for _, stream := range []string{StreamRequests, StreamDeliveries} {
		s, err := b.js.Stream(ctx, stream)
		if err != nil {
			return fmt.Errorf("bus: stream %s: %w", stream, err)
		}
		list := s.ListConsumers(ctx)
		for ci := range list.Info() {
			if ci.NumAckPending == 0 {
				continue
			}
			if _, err := b.js.ResetConsumer(ctx, stream, ci.Name); err != nil {
				return fmt.Errorf("bus: hand out again what consumer %s of %s had in flight: %w", ci.Name, stream, err)
			}
			b.log.Info("in-flight messages of a stopped process handed out again", zap.String("stream", stream),
				zap.String("consumer", ci.Name), zap.Int("messages", ci.NumAckPending))
		}
		if err := list.Err(); err != nil {
			return fmt.Errorf("bus: consumers of %s: %w", stream, err)
		}
	}
	return nil
}
