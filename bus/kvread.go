package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Reading every key of a bucket.
//
// The client's own ways to read a whole bucket (ListKeys, Keys, and the
// nil entry a watch sends once it has handed out every key's value) end
// early while keys are written: the client counts the messages the watch
// has handed out against the count the server gave when the watch began,
// and a key written meanwhile is counted twice while a key not yet handed
// out is not counted at all. The server's own count of what is left ends
// early too. Measured with five keys written without pause: 60% of
// ListKeys calls missed keys, and 3% even when reading on until the
// server said nothing was left.
//
// What does not end early is the server's index of the stream's subjects:
// one request returns every key that has a message (a value or a delete
// marker) at that instant. Latest and Loading check a watch against it.

// keysNow returns the keys of kv matching filter that have a message at
// this instant (a value, a delete or a purge marker): one request, read
// from the server's index. Above 100,000 keys the server answers in pages
// (each of the sorted keys from an offset); a key removed from an earlier
// page meanwhile shifts the next one, and one key may be left out of it.
func (b *Bus) keysNow(ctx context.Context, kv jetstream.KeyValue, filter string) (map[string]bool, error) {
	var s jetstream.Stream
	if v, ok := b.kvStreams.Load(kv.Bucket()); ok {
		s = v.(jetstream.Stream)
	} else {
		var err error
		if s, err = b.js.Stream(ctx, "KV_"+kv.Bucket()); err != nil {
			return nil, err
		}
		b.kvStreams.Store(kv.Bucket(), s)
	}
	prefix := "$KV." + kv.Bucket() + "."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+filter))
	if err != nil {
		return nil, err
	}
	keys := make(map[string]bool, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if k, ok := strings.CutPrefix(subj, prefix); ok {
			keys[k] = true
		}
	}
	return keys, nil
}

// Latest returns the latest entry of every key of kv matching filter (a
// key, or a pattern such as ">" or "cron.*") that holds a value. A key
// that held one when Latest was called, and was not written since, is in
// the map with that value; a key written meanwhile is there with a later
// value, or left out if it was deleted. With metaOnly the entries carry
// no value (keys and revisions only). It reads the server's index of the
// keys, then the bucket in one watch and, for the keys the watch had not
// handed out when it said it was done, one Get each.
func (b *Bus) Latest(ctx context.Context, kv jetstream.KeyValue, filter string, metaOnly bool) (map[string]jetstream.KeyValueEntry, error) {
	l, err := b.Loading(ctx, kv, filter)
	if err != nil {
		return nil, err
	}
	out := map[string]jetstream.KeyValueEntry{}
	if len(l.left) == 0 {
		return out, nil // keys written from now on need not be read
	}
	var opts []jetstream.WatchOpt
	if metaOnly {
		opts = append(opts, jetstream.MetaOnly())
	}
	w, err := kv.Watch(ctx, filter, opts...)
	if err != nil {
		return nil, err
	}
	defer func() {
		_ = w.Stop()
		// Entries still coming are drained: the watch's callback blocks
		// on a full channel, and the channel closes once it returns.
		go func() {
			for range w.Updates() {
			}
		}()
	}()
	for {
		var u jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("the watch of %s ended", kv.Bucket())
			}
			u = e
		}
		if u != nil {
			delete(l.left, u.Key())
			if u.Operation() == jetstream.KeyValuePut {
				out[u.Key()] = u
			} else {
				delete(out, u.Key())
			}
			continue
		}
		// The watch says it is done: the keys it has not handed out
		// are read one by one.
		for _, k := range slices.Sorted(maps.Keys(l.left)) {
			e, err := kv.Get(ctx, k)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
			case err != nil:
				return nil, err
			default:
				out[k] = e
			}
		}
		return out, nil
	}
}

// Keys returns, sorted, the keys of kv matching filter that hold a value,
// as Latest finds them.
func (b *Bus) Keys(ctx context.Context, kv jetstream.KeyValue, filter string) ([]string, error) {
	m, err := b.Latest(ctx, kv, filter, true)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(m)), nil
}

// Loading tells a watch of kv (on filter, created after Loading) when it
// has handed out every key that had a message when Loading was called: a
// watch's nil entry alone comes too early while keys are written.
type Loading struct {
	kv     jetstream.KeyValue
	left   map[string]bool // keys not handed out yet
	marked bool            // the watch's nil entry came
}

// Loading starts a Loading of kv's keys matching filter.
func (b *Bus) Loading(ctx context.Context, kv jetstream.KeyValue, filter string) (*Loading, error) {
	keys, err := b.keysNow(ctx, kv, filter)
	if err != nil {
		return nil, fmt.Errorf("read the keys of %s: %w", kv.Bucket(), err)
	}
	return &Loading{kv: kv, left: keys}, nil
}

// Saw takes u, the watch's next entry (nil: the watch says it is done),
// and reports whether every key has now been handed out: once the nil
// entry came, and every key left either came since or holds nothing now.
// It reports true once only. When a key left cannot be read it gives up:
// it reports true with the error, and the caller says that the first
// values may be short.
func (l *Loading) Saw(ctx context.Context, u jetstream.KeyValueEntry) (bool, error) {
	if l.left == nil {
		return false, nil // said already
	}
	if u != nil {
		delete(l.left, u.Key())
	} else {
		l.marked = true
	}
	return l.Check(ctx)
}

// Check reports, as Saw, whether every key has been handed out, once the
// nil entry came: it reads the keys left, and drops those that hold
// nothing now. A key whose messages went without a message (a purge of
// its subject, an expiry without a marker) never comes on the watch: a
// caller whose bucket may see that, and may see no write for a while,
// calls Check from time to time until loaded.
func (l *Loading) Check(ctx context.Context) (bool, error) {
	if l.left == nil || !l.marked {
		return false, nil
	}
	for k := range l.left {
		if _, err := l.kv.Get(ctx, k); errors.Is(err, jetstream.ErrKeyNotFound) {
			delete(l.left, k)
		} else if err != nil {
			l.left = nil
			return true, fmt.Errorf("read %s of %s: %w", k, l.kv.Bucket(), err)
		}
	}
	if len(l.left) > 0 {
		return false, nil
	}
	l.left = nil
	return true, nil
}

// followRecheck is how often Follow checks, until loaded, for the keys
// its watch has not handed out (see Loading.Check).
const followRecheck = time.Second

// Follow hands apply every entry of kv's keys matching filter, from each
// key's latest value on, one at a time, until ctx ends (then it returns
// nil) or the watch ends for another reason (an error). It closes loaded
// once every key that had a message when Follow began has been applied
// (Loading), after the entry that completed it; until then it also
// checks every followRecheck for keys gone without a message.
func (b *Bus) Follow(ctx context.Context, kv jetstream.KeyValue, filter string, loaded chan<- struct{}, apply func(jetstream.KeyValueEntry)) error {
	l, err := b.Loading(ctx, kv, filter)
	if err != nil {
		return err
	}
	w, err := kv.Watch(ctx, filter)
	if err != nil {
		return fmt.Errorf("watch %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	recheck := time.NewTicker(followRecheck)
	defer recheck.Stop()
	checks := recheck.C
	// Drained until the watch closes (it does when ctx ends): its
	// callback must never block on a full channel.
	for {
		var done bool
		select {
		case u, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("the watch of %s ended unexpectedly (connection closed?)", kv.Bucket())
			}
			if ctx.Err() != nil {
				continue
			}
			if u != nil {
				apply(u)
			}
			done, err = l.Saw(ctx, u)
		case <-checks:
			if ctx.Err() != nil {
				continue
			}
			done, err = l.Check(ctx)
		}
		if err != nil {
			b.log.Warn("a watch's first values may be short (a key could not be read); the rest come as the watch goes on", zap.String("bucket", kv.Bucket()), zap.Error(err))
		}
		if done {
			close(loaded)
			checks = nil
		}
	}
}
