package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agentwork/agentwork/bus"
)

// ExternalServer starts a NATS server of one's own (JetStream, loopback,
// a temporary store) that takes messages of up to maxPayload bytes (0:
// the server's default, 1 MB), as bus.url names one, and returns its URL.
// It shuts down when the test ends.
func ExternalServer(t testing.TB, maxPayload int32) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		MaxPayload: maxPayload, NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(20 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	return srv.ClientURL()
}

// External starts an ExternalServer and opens a bus on it, as an instance
// with bus.url does.
func External(t testing.TB, maxPayload int32) *bus.Bus {
	t.Helper()
	url := ExternalServer(t, maxPayload)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: url, ReadyTimeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("bus.Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
