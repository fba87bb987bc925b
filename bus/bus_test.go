package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOpenProvisionsStreamsAndBuckets(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx := t.Context()
	for _, name := range []string{bus.StreamRequests, bus.StreamEvents, bus.StreamDeliveries} {
		s, err := b.JetStream().Stream(ctx, name)
		if err != nil {
			t.Fatalf("Stream(%s): %v", name, err)
		}
		if got := s.CachedInfo().Config.Retention; got != jetstream.LimitsPolicy {
			t.Errorf("%s retention = %v, want limits", name, got)
		}
	}
	req, _ := b.JetStream().Stream(ctx, bus.StreamRequests)
	if got := req.CachedInfo().Config.Duplicates; got != bus.RequestsDuplicates {
		t.Errorf("requests duplicates = %s, want %s", got, bus.RequestsDuplicates)
	}
	for _, kv := range []jetstream.KeyValue{b.Jobs, b.State, b.Dedup, b.Locks} {
		if kv == nil {
			t.Fatal("bucket not bound")
		}
	}
}

func TestPublishDedupsByMsgID(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ev, err := bus.NewEvent("agentwork/test", bus.TypeOf("task", "requested"), "x", time.Now(), map[string]string{"prompt": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	subj := b.Subjects.Request("task", "x")
	a1, err := b.Publish(t.Context(), subj, ev, "")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := b.Publish(t.Context(), subj, ev, "")
	if err != nil {
		t.Fatal(err)
	}
	if a1.Duplicate || !a2.Duplicate || a1.Sequence != a2.Sequence {
		t.Fatalf("publish twice: first dup=%v seq=%d, second dup=%v seq=%d; want second to be a duplicate of the first", a1.Duplicate, a1.Sequence, a2.Duplicate, a2.Sequence)
	}
}

func TestSecondOpenOnSameDataDirFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := bustest.New(t, func(c *bus.Config) { c.DataDir = dir })
	_ = b
	_, err := bus.Open(t.Context(), bus.Config{DataDir: dir, Listen: "off", ReadyTimeout: 5 * time.Second})
	if !errors.Is(err, bus.ErrLocked) {
		t.Fatalf("second Open on the same data dir: err = %v, want ErrLocked", err)
	}
}

func TestReopenKeepsDataAndDedup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := t.Context()
	cfg := bus.Config{DataDir: dir, Listen: "off"}
	b, err := bus.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := bus.NewEvent("agentwork/test", "agentwork.task.requested", "x", time.Now(), nil)
	if _, err := b.Publish(ctx, b.Subjects.Request("task", "x"), ev, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	b2, err := bus.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer b2.Close()
	ack, err := b2.Publish(ctx, b2.Subjects.Request("task", "x"), ev, "")
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate {
		t.Fatal("after restart the same Nats-Msg-Id was stored again; want duplicate")
	}
}

func TestListenerRequiresGeneratedCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := bustest.New(t, func(c *bus.Config) { c.DataDir = dir; c.Listen = "127.0.0.1:0" })
	info, err := bus.ReadClientInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "nats.json"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("credentials mode = %v, want 0600", st.Mode().Perm())
	}
	if _, err := nats.Connect(info.URL, nats.MaxReconnects(0)); err == nil {
		t.Fatal("connect without credentials succeeded; want authorization error")
	}
	c, err := bus.Dial(t.Context(), bus.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("Dial with generated credentials: %v", err)
	}
	defer c.Close()
	if err := c.Ready(t.Context()); err != nil {
		t.Fatal(err)
	}
	_ = b
}

func TestEventEnvelope(t *testing.T) {
	t.Parallel()
	ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf("cron", "done"), "daily", time.Now(), map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	ev.RunID, ev.CausationID = "r1", "c1"
	raw, _ := json.Marshal(ev)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"specversion", "id", "source", "type", "subject", "time", "data", "runid", "causationid"} {
		if _, ok := m[k]; !ok {
			t.Errorf("envelope lacks %q: %s", k, raw)
		}
	}
	if _, err := bus.DecodeEvent([]byte(`{"specversion":"0.3"}`)); err == nil {
		t.Error("DecodeEvent accepted an invalid envelope")
	}
}

func TestParseRequestSubject(t *testing.T) {
	t.Parallel()
	s := bus.Subjects{Prefix: "agentwork"}
	tests := []struct {
		in, source, name string
		ok               bool
	}{
		{"agentwork.request.cron.daily", "cron", "daily", true},
		{"agentwork.request.cron", "", "", false},
		{"agentwork.event.cron.done", "", "", false},
		{"agentwork.request.a.b.c", "", "", false},
	}
	for _, tt := range tests {
		src, name, err := s.ParseRequest(tt.in)
		if (err == nil) != tt.ok || src != tt.source || name != tt.name {
			t.Errorf("ParseRequest(%q) = %q, %q, %v; want %q, %q, ok=%v", tt.in, src, name, err, tt.source, tt.name, tt.ok)
		}
	}
	_ = context.Background
}

func TestListenStaysOnLoopbackUnlessAllowed(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		listen string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:4222", false, true},
		{"localhost:4222", false, true},
		{"[::1]:4222", false, true},
		{"off", false, true},
		{":4222", false, false},
		{"0.0.0.0:4222", false, false},
		{"10.1.2.3:4222", false, false},
		{"0.0.0.0:4222", true, true},
	} {
		err := bus.Config{Listen: tt.listen, AllowRemote: tt.remote}.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("Validate(listen %q, allow_remote %v) = %v, want ok=%v", tt.listen, tt.remote, err, tt.ok)
		}
	}
}

// An instance configured with bus.url is a client of an existing server: it
// provisions idempotently and shares the streams and buckets.
func TestExternalURLSharesTheBus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	owner := bustest.New(t, func(c *bus.Config) { c.DataDir = dir; c.Listen = "127.0.0.1:0" })
	info, err := bus.ReadClientInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := bus.Open(ctx, bus.Config{URL: info.URL, Replicas: 1, ReadyTimeout: 5 * time.Second}); err == nil {
		t.Fatal("Open with the URL but no credentials succeeded; want an authorization error")
	}
	client, err := bus.Open(ctx, bus.Config{URL: info.URL, User: info.User, Password: info.Password, Replicas: 1})
	if err != nil {
		t.Fatalf("Open(url): %v", err)
	}
	defer client.Close()
	if client.Server() != nil {
		t.Error("a bus.url instance started a server of its own")
	}
	if _, err := client.Locks.Put(ctx, "shared", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if e, err := owner.Locks.Get(ctx, "shared"); err != nil || string(e.Value()) != "x" {
		t.Fatalf("owner reads the client's key: %v, %v", e, err)
	}
}

// TestGeneratedPasswordSuitsEveryClient: the password is letters and digits
// only (a leading '-' broke natscli's --password), and one an older version
// wrote with a leading '-' is replaced at the next start.
func TestGeneratedPasswordSuitsEveryClient(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old := `{"user":"agentwork","password":"-Xy_old-base64url-password"}`
	if err := os.WriteFile(filepath.Join(dir, "nats.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	b := bustest.New(t, func(c *bus.Config) { c.DataDir = dir; c.Listen = "127.0.0.1:0" })
	_ = b
	info, err := bus.ReadClientInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Password) < 32 || strings.Trim(info.Password, "0123456789abcdef") != "" {
		t.Errorf("generated password %q: want 32+ characters of [0-9a-f]", info.Password)
	}
	c, err := bus.Dial(t.Context(), bus.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("Dial with the new credentials: %v", err)
	}
	c.Close()
}

// TestReplicasOnASingleServer: a bus.url naming one server (not a cluster)
// works without setting bus.replicas, and an explicit replicas: 3 there
// fails with an error that says what to set.
func TestReplicasOnASingleServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bustest.New(t, func(c *bus.Config) { c.DataDir = dir; c.Listen = "127.0.0.1:0" })
	info, err := bus.ReadClientInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := bus.Config{URL: info.URL, User: info.User, Password: info.Password, ReadyTimeout: 5 * time.Second}
	b, err := bus.Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Open(single server, replicas unset) = %v, want it to pick 1", err)
	}
	if got := b.Config().Replicas; got != 1 {
		t.Errorf("replicas chosen = %d, want 1", got)
	}
	b.Close()
	cfg.Replicas = 3
	_, err = bus.Open(t.Context(), cfg)
	if err == nil || !strings.Contains(err.Error(), "set bus.replicas: 1") {
		t.Errorf("Open(single server, replicas 3) = %v, want an error saying to set bus.replicas: 1", err)
	}
}

// TestListenAddressInUse: a taken bus.listen port fails at once, naming the
// setting, instead of after the whole ready timeout.
func TestListenAddressInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	_, err = bus.Open(t.Context(), bus.Config{DataDir: t.TempDir(), Listen: ln.Addr().String(), ReadyTimeout: 20 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "bus.listen: "+ln.Addr().String()+" is already in use") {
		t.Fatalf("Open on a taken port = %v, want an error naming bus.listen", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Open took %s to report the taken port, want it at once", d)
	}
}
