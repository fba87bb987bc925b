package bus

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestNeedsUpdate: a stream as the server reports it back (defaults filled
// in) needs no update for the config it was made from; a changed setting
// does.
func TestNeedsUpdate(t *testing.T) {
	t.Parallel()
	want := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, MaxAge: time.Hour, Duplicates: time.Minute, Storage: jetstream.FileStorage, Replicas: 1}
	have := want
	have.MaxMsgs, have.MaxBytes, have.MaxMsgsPerSubject, have.Discard = -1, -1, -1, jetstream.DiscardOld
	if needsUpdate(have, want) {
		t.Error("needsUpdate(server's copy of the same config) = true, want false")
	}
	changed := want
	changed.MaxAge = 2 * time.Hour
	if !needsUpdate(have, changed) {
		t.Error("needsUpdate(another max age) = false, want true")
	}
}
