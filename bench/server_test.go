package bench

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/bus"
)

// buildBinary builds cmd/agentwork into dir and returns its path.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "agentwork")
	build := exec.Command("go", "build", "-o", bin, "./cmd/agentwork")
	build.Dir = ".."
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	return bin
}

// server is an agentwork serve process.
type server struct {
	cmd    *exec.Cmd
	exited chan error // receives the process's exit, once
	// stop sends SIGTERM and waits for the exit (a minute, then kills);
	// later calls do nothing. It is also called when the test ends.
	stop func()
}

// startServer runs bin serve with the config and data dir, the extra
// environment, and the output going to stdout and stderr.
func startServer(t *testing.T, bin, cfg, dataDir string, env []string, stdout, stderr io.Writer) *server {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", cfg, "--data-dir", dataDir)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, exited: make(chan error, 1)}
	go func() { s.exited <- cmd.Wait() }()
	s.stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-s.exited
		}
	})
	t.Cleanup(s.stop)
	return s
}

// serverFiles writes the config cfg for a server in dir and creates its
// log file (closed when the test ends).
func serverFiles(t *testing.T, dir, cfg string) (cfgPath, logPath string, logs *os.File) {
	t.Helper()
	cfgPath = filepath.Join(dir, "agentwork.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath = filepath.Join(dir, "server.log")
	logs, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logs.Close() })
	return cfgPath, logPath, logs
}

// events counts things as they happen (messages, tick results), so a
// measure can wait for the n-th instead of sleeping for a time.
type events struct {
	n    atomic.Int64
	kick chan struct{}
}

func newEvents() *events { return &events{kick: make(chan struct{}, 1)} }

// add counts one.
func (e *events) add() {
	e.n.Add(1)
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// count is how many so far.
func (e *events) count() int64 { return e.n.Load() }

// wait blocks until at least n have been counted, or fails t when ctx
// ends first.
func (e *events) wait(ctx context.Context, t *testing.T, n int64, what string) {
	t.Helper()
	for e.n.Load() < n {
		select {
		case <-e.kick:
		case <-ctx.Done():
			t.Fatalf("waiting for %d %s: %d came (%v)", n, what, e.n.Load(), ctx.Err())
		}
	}
}

// waitUntil blocks until at least n have been counted or ctx ends, and
// reports whether they were.
func (e *events) waitUntil(ctx context.Context, n int64) bool {
	for e.n.Load() < n {
		select {
		case <-e.kick:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// countRequests counts the cron requests published on b from now on.
func countRequests(t *testing.T, b *bus.Bus) *events {
	t.Helper()
	e := newEvents()
	sub, err := b.Conn().Subscribe(b.Subjects.Request(bus.SourceCron, "*"), func(*nats.Msg) { e.add() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	return e
}
