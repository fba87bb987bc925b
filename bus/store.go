package bus

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ErrStoreFull is what Ready reports while the JetStream store is full.
var ErrStoreFull = errors.New("bus: the JetStream store is full (bus.max_store, or the disk): new work is refused and accepted work waits; free space or raise bus.max_store")

// JetStream API error codes of a write refused for lack of space
// (nats-server's errors.json).
const (
	errCodeAccountResources jetstream.ErrorCode = 10002 // resource limits exceeded for account
	errCodeStorageExceeded  jetstream.ErrorCode = 10047 // insufficient storage resources available
)

// IsStoreFull reports whether err is a write JetStream refused for lack of
// space: the store reached bus.max_store (or an account limit), or the disk
// is full.
func IsStoreFull(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeInsufficientResources, errCodeStorageExceeded, errCodeAccountResources:
			return true
		}
	}
	return strings.Contains(err.Error(), "no space left on device")
}

// NoteWrite records the outcome of a write to the bus: a write refused for
// lack of space marks the store full (logged once, as an error), and the
// store counts as full until a write succeeds or Ready finds space again.
// Publish calls it; callers that write KV buckets directly may too.
func (b *Bus) NoteWrite(err error) {
	switch {
	case IsStoreFull(err):
		if b.storeFull.CompareAndSwap(false, true) {
			b.log.Error("the JetStream store is full: new work is refused and accepted work waits until space is freed",
				zap.Int64("max_store", b.cfg.MaxStore), zap.Error(err))
		}
	case err == nil:
		b.storeHasSpace()
	}
}

func (b *Bus) storeHasSpace() {
	if b.storeFull.CompareAndSwap(true, false) {
		b.log.Info("the JetStream store has space again; work goes on")
	}
}

// StoreFull reports whether the last write was refused for lack of space.
func (b *Bus) StoreFull() bool { return b.storeFull.Load() }

// probeStore writes one small key to see whether the full store has space
// again.
func (b *Bus) probeStore(ctx context.Context) error {
	_, err := b.Locks.Put(ctx, "probe.store", []byte("1"))
	if err != nil {
		if IsStoreFull(err) {
			return ErrStoreFull
		}
		return err
	}
	b.storeHasSpace()
	return nil
}
