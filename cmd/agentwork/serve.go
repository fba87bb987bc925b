package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/config"
	"github.com/agentwork/agentwork/tools/mcp"
	"github.com/agentwork/agentwork/triggers/cron"
)

func cmdServe(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("serve", e)
	path := fs.String("config", "", "config file (default ./agentwork.yaml if it exists, else built-in defaults)")
	dataDir := fs.String("data-dir", "", "data dir (overrides bus.data_dir)")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	loading := time.Now()
	f, err := loadConfig(*path)
	if err != nil {
		return err
	}
	loaded := time.Since(loading)
	if *dataDir != "" {
		f.Bus.DataDir = *dataDir
	} else if f.Bus.DataDir != "" {
		f.Bus.DataDir = f.Resolve(f.Bus.DataDir)
	}
	log, err := newLogger(e.stderr, f.Log.Level, f.Log.Format)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if cfgPath := configPath(*path); cfgPath != "" {
		log.Info("config loaded", zap.String("path", cfgPath), zap.Duration("took", loaded))
	}
	return serve(ctx, e, f, log)
}

// serve wires the runtime and runs it until ctx is done. The MCP servers
// start first: the runner waits up to mcpReadyWait for their first start,
// so that the first runs have their tools. Shutdown order: triggers stop
// (with their NATS APIs and the HTTP server), the runner and connectors
// drain (runs in flight finish within the grace period, with their
// tools), the MCP servers stop, then the bus drains and the server stops.
func serve(ctx context.Context, e *env, f *config.File, log *zap.Logger) error {
	start := time.Now()
	stopPprof, err := startPprof(log)
	if err != nil {
		return err
	}
	defer stopPprof()
	b, err := bus.Open(ctx, f.Bus, bus.WithLogger(log))
	if err != nil {
		if errors.Is(err, bus.ErrLocked) {
			return fmt.Errorf("%w\n(another `agentwork serve` uses this data dir)", err)
		}
		return err
	}
	defer func() {
		if err := b.Close(); err != nil {
			log.Warn("bus close", zap.Error(err))
		}
		log.Info("stopped")
	}()

	// Runs and sends in flight get their grace periods at shutdown; past
	// those and a margin, stop waiting: the bus puts back whatever was not
	// acked. (Read now: nothing holds the config once it is wired, so a
	// big one, 100,000 cron jobs, is not kept twice.)
	budget := max(f.Runner.ShutdownGrace, f.Delivery.ShutdownGrace, 10*time.Second) + 15*time.Second
	provider, err := newProvider(f.Model, log.Named("model"))
	if err != nil {
		return err
	}
	w, err := wire(f, e, b, provider, log)
	if err != nil {
		return err
	}
	stopMCP := startMCP(w.mcp, log)
	defer stopMCP()
	// The triggers' NATS APIs answer from here until the triggers stop.
	var stops []func() error
	stopServices := sync.OnceFunc(func() {
		for _, stop := range stops {
			if err := stop(); err != nil {
				log.Warn("stop a NATS service", zap.Error(err))
			}
		}
	})
	defer stopServices()
	for _, svc := range w.services {
		stop, err := b.StartService(svc)
		if err != nil {
			return err
		}
		stops = append(stops, stop)
	}

	// Consumers (runner, connectors) live until the triggers have stopped.
	consumeCtx, stopConsumers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopConsumers()
	// A consumer that fails (it could not start) stops the whole service:
	// triggers must not go on queueing work that nothing runs or delivers.
	// The process exits non-zero so a supervisor restarts it.
	triggerCtx, stopTriggers := context.WithCancelCause(ctx)
	defer stopTriggers(nil)
	var consumers errgroup.Group
	consume := func(name string, run func(context.Context) error) {
		consumers.Go(func() error {
			err := run(consumeCtx)
			if err != nil {
				log.Error(name+" failed; shutting down", zap.Error(err))
				stopTriggers(err)
			}
			return err
		})
	}
	consume("runner", w.runner.Run)
	consume("usage", w.usage.Run)
	consume("workflows", w.runWorkflows)
	consume("approvals", w.approvals.Run)
	for _, c := range w.consumers {
		consume("connectors", c)
	}
	triggers, tctx := errgroup.WithContext(triggerCtx)
	triggers.Go(func() error { <-tctx.Done(); return nil }) // serve until stopped
	for _, t := range w.triggers {
		triggers.Go(func() error { return t.Run(tctx) })
		if s, ok := t.(*cron.Scheduler); ok {
			go returnStartMemory(tctx, s.Started())
		}
	}
	if w.http != nil {
		triggers.Go(func() error { return w.http(tctx) })
	}
	log.Info("agentwork ready",
		zap.String("data_dir", b.Config().DataDir), zap.String("model", providerName(provider)),
		zap.Strings("connectors", w.connectorNames), zap.Duration("startup", time.Since(start)))
	fmt.Fprintf(e.stderr, "agentwork is running. Try, from another terminal: %s task send \"hello\" --wait   (Ctrl-C here to stop)\n", selfCommand())

	terr := triggers.Wait()
	if terr != nil && ctx.Err() == nil {
		log.Error("a trigger failed; shutting down", zap.Error(terr))
	}
	log.Info("shutting down")
	stopServices()
	stopConsumers()
	cdone := make(chan error, 1)
	go func() { cdone <- consumers.Wait() }()
	var cerr error
	select {
	case cerr = <-cdone:
	case <-time.After(budget):
		cerr = fmt.Errorf("shutdown: runs or deliveries still in flight after %s; exiting (the bus redelivers them)", budget)
		log.Error("shutdown took too long", zap.Duration("budget", budget))
	}
	stopMCP() // after the runs in flight, which may still call tools
	if ctx.Err() != nil {
		terr = nil // a clean stop
	}
	return errors.Join(terr, cerr)
}

// mcpReadyWait bounds the wait for the MCP servers' first start before
// the runner starts. A server still starting then (a first `npx` run
// downloads its package) is not waited for: runs are offered its tools
// once it is up.
const mcpReadyWait = 20 * time.Second

// mcpStopWait bounds the wait for the MCP servers to stop (a stdio server
// gets 5s after its stdin closes and 5s after SIGTERM).
const mcpStopWait = 15 * time.Second

// startMCP runs m until the returned stop is called, and waits up to
// mcpReadyWait for every server's first start. A server that cannot start
// is logged by m and keeps nothing from running. stop is idempotent and
// returns once m has stopped its servers, or after mcpStopWait.
func startMCP(m *mcp.Manager, log *zap.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx) // only errs when run twice
	}()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(mcpStopWait):
			log.Warn("mcp servers did not stop in time; leaving them", zap.Duration("waited", mcpStopWait))
		}
	})
	t := time.NewTimer(mcpReadyWait)
	defer t.Stop()
	select {
	case <-m.Ready():
	case <-t.C:
	}
	for _, st := range m.Status() {
		if st.State != mcp.StateUp {
			log.Warn("mcp server not up; runs get its tools once it is", zap.String("mcp_server", st.Name), zap.String("state", string(st.State)), zap.String("error", st.LastError))
		}
	}
	return stop
}

// selfCommand is how the user ran this binary, for the hints it prints:
// "go run ./cmd/agentwork" under go run (its binary lives in a go-build
// temporary directory), else "agentwork".
func selfCommand() string {
	if exe, err := os.Executable(); err == nil && strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "go run ./cmd/agentwork"
	}
	return "agentwork"
}

func providerName(p any) string {
	if n, ok := p.(interface{ Name() string }); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", p)
}

// returnStartMemory hands the start's garbage back to the system once
// started is closed (the cron scheduler holds its jobs): the config's
// YAML tree, a million nodes at 100,000 jobs, is garbage by then, and the
// runtime would return its pages over minutes, holding the RSS at twice
// what the jobs need meanwhile.
func returnStartMemory(ctx context.Context, started <-chan struct{}) {
	select {
	case <-started:
		debug.FreeOSMemory()
	case <-ctx.Done():
	}
}
