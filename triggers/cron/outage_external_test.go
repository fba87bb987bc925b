package cron

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
)

// outageEnv turns on TestTicksThroughExternalServerOutage (about 50 s).
const outageEnv = "AGENTWORK_OUTAGE"

// natsServer is an external nats-server process with JetStream, its store
// in a directory of the test, on a fixed loopback port across restarts.
type natsServer struct {
	t     *testing.T
	bin   string
	store string
	port  int
	cmd   *exec.Cmd
	exit  chan error
}

// startNATSServer builds nats-server (a dependency of the module) and
// starts it.
func startNATSServer(t *testing.T) *natsServer {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &natsServer{t: t, bin: bin, store: filepath.Join(dir, "store"), port: port}
	s.start()
	t.Cleanup(func() {
		if s.cmd != nil {
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
			s.stop()
		}
	})
	return s
}

func (s *natsServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// start starts the server and waits until it takes connections.
func (s *natsServer) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "-js", "-sd", s.store, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port))
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	s.exit = make(chan error, 1)
	go func(c *exec.Cmd, exit chan error) { exit <- c.Wait() }(s.cmd, s.exit)
	eventually(s.t, func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}

// stop stops the server (SIGTERM: it shuts down cleanly) and waits for it.
func (s *natsServer) stop() {
	s.t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exit:
	case <-time.After(waitFor):
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
	s.cmd = nil
}

func (s *natsServer) signal(sig os.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal nats-server: %v", err)
	}
}

// The outage of issue 12, scripted: a per-second job and tasks at 10/s on
// an external nats-server that is stopped for 10 s, started again, then
// frozen (SIGSTOP: connections stay open, nothing answers) for 12 s, longer
// than a publish waits for its ack. Every tick from the first to the last
// ends in exactly one cron event (its run's, or a missed skip), and no tick
// is stored as two requests.
func TestTicksThroughExternalServerOutage(t *testing.T) {
	if os.Getenv(outageEnv) == "" {
		t.Skip("set " + outageEnv + "=1 to run the outage of an external nats-server (about 50 s)")
	}
	srv := startNATSServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: srv.url(), ReadyTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("bus.Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })

	results := make(chan TickResult, 1000)
	s, err := New(b, Config{Jobs: []Job{secondJob("sec")}}, WithTickObserver(func(r TickResult) { results <- r }))
	if err != nil {
		t.Fatal(err)
	}
	stopScheduler := runUntil(t, s.Run)
	t.Cleanup(stopScheduler)
	p, err := script.New(script.Config{Rules: []script.Rule{{Reply: script.Reply{Text: "hi"}}}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.Notify())
	if err != nil {
		t.Fatal(err)
	}
	r := agentwork.NewRunner(b, p, reg, agentwork.Config{AckWait: 5 * time.Second, ShutdownGrace: time.Second}, agentwork.WithConnectors("ops"))
	r.Handle(bus.SourceCron, s.Policy())
	r.Handle(bus.SourceTask, agentwork.Policy{})
	t.Cleanup(runUntil(t, r.Run))
	// Tasks at 10/s, as a webhook would publish them; failures are the
	// outage's.
	stopTasks := runUntil(t, func(ctx context.Context) error {
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return nil
			case <-tk.C:
			}
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			_, _ = agentwork.Publish(pctx, b, agentwork.Request{Source: bus.SourceTask, Name: "load", Prompt: fmt.Sprintf("task %d", i)}, agentwork.PublishOptions{})
			pcancel()
		}
	})
	t.Cleanup(stopTasks)

	// firedAfter waits for a tick fired after at.
	firedAfter := func(at time.Time) {
		t.Helper()
		deadline := time.After(45 * time.Second)
		for {
			select {
			case r := <-results:
				if r.What == "fired" && r.Tick.After(at) {
					return
				}
			case <-deadline:
				t.Fatalf("no tick fired after %s", at.Format(time.TimeOnly))
			}
		}
	}
	firedAfter(time.Now().Add(2 * time.Second))

	srv.stop()
	time.Sleep(10 * time.Second) // the outage: a fixed span, nothing to wait for
	srv.start()
	firedAfter(time.Now().Add(time.Second))

	srv.signal(syscall.SIGSTOP)
	time.Sleep(12 * time.Second) // frozen: a fixed span, nothing to wait for
	srv.signal(syscall.SIGCONT)
	firedAfter(time.Now().Add(2 * time.Second))

	stopScheduler()
	stopTasks()
	// Every request settled: run, skipped, or found finished.
	settled := time.After(45 * time.Second)
	for {
		err := requestsSettled(t.Context(), b)
		if err == nil {
			break
		}
		select {
		case <-settled:
			t.Fatalf("requests not settled: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}

	byTick := map[time.Time]int{}
	for _, q := range requests(t, b) {
		byTick[q.Req.ScheduledAt.UTC()]++
	}
	for at, n := range byTick {
		if n > 1 {
			t.Errorf("tick %s stored as %d requests, want one", at.Format(time.TimeOnly), n)
		}
	}
	hist, err := jobHistory(t.Context(), b, "sec", 1000)
	if err != nil {
		t.Fatal(err)
	}
	events := map[time.Time][]string{}
	var first, last time.Time
	for _, h := range hist {
		if h.Result.ScheduledAt == nil {
			t.Fatalf("cron event without a scheduled time: %+v", h)
		}
		at := h.Result.ScheduledAt.UTC()
		events[at] = append(events[at], h.Outcome+"/"+h.Result.Reason)
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	if first.IsZero() {
		t.Fatal("no cron events")
	}
	outcomes := map[string]int{}
	for at := first; !at.After(last); at = at.Add(time.Second) {
		if len(events[at]) != 1 {
			t.Errorf("tick %s has cron events %v, want exactly one", at.Format(time.TimeOnly), events[at])
		}
		for _, o := range events[at] {
			outcomes[o]++
		}
	}
	t.Logf("ticks %s to %s: %v; requests stored: %d", first.Format(time.TimeOnly), last.Format(time.TimeOnly), outcomes, len(byTick))
}
