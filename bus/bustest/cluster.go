package bustest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/bus"
)

// Cluster is an in-process NATS cluster with JetStream, its nodes on
// loopback ports chosen at start and kept across restarts, each with its own
// store in a temporary directory. Nodes can be stopped and started again
// while the others run. Everything is shut down when the test ends.
type Cluster struct {
	t     testing.TB
	mu    sync.Mutex
	opts  []*server.Options
	nodes []*server.Server // nil while a node is stopped
}

// NewCluster starts an n-node cluster and waits until every node is ready
// for clients and JetStream has a meta leader.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, opts: make([]*server.Options, n), nodes: make([]*server.Server, n)}
	clientPorts, clusterPorts := freePorts(t, n), freePorts(t, n)
	var routes []string
	for _, p := range clusterPorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	for i := range n {
		c.opts[i] = &server.Options{
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       clientPorts[i],
			JetStream:  true,
			StoreDir:   t.TempDir(),
			SyncAlways: true,
			NoSigs:     true,
			NoLog:      true,
			Cluster: server.ClusterOpts{
				Name: "agentwork-test",
				Host: "127.0.0.1",
				Port: clusterPorts[i],
			},
			Routes: server.RoutesFromStr(strings.Join(routes, ",")),
		}
	}
	t.Cleanup(func() {
		for i := range n {
			c.Stop(i)
		}
	})
	for i := range n {
		c.Start(i)
	}
	c.waitMeta()
	return c
}

// freePorts reserves n loopback ports by listening on them, then releases
// them for the servers to take.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("reserve a port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// URL lists every node's client URL, as bus.Config.URL takes it.
func (c *Cluster) URL() string {
	var urls []string
	for _, o := range c.opts {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(urls, ",")
}

// Config is a bus config for a client of the cluster, with a replica per node.
func (c *Cluster) Config() bus.Config {
	return bus.Config{URL: c.URL(), Replicas: len(c.opts), ReadyTimeout: 30 * time.Second}
}

// Open opens a bus on the cluster (provisioning it), closed when the test ends.
func (c *Cluster) Open() *bus.Bus {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, c.Config())
	if err != nil {
		c.t.Fatalf("bus.Open on the cluster: %v", err)
	}
	c.t.Cleanup(func() { _ = b.Close() })
	return b
}

// Index returns the index of the node with the given server name, or -1.
func (c *Cluster) Index(name string) int {
	for i, o := range c.opts {
		if o.ServerName == name {
			return i
		}
	}
	return -1
}

// Start starts node i (again) with its store, and waits until it accepts
// clients. It does nothing if the node runs.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i] != nil {
		return
	}
	o := *c.opts[i]
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatalf("node %d: %v", i, err)
	}
	if !o.NoLog {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		s.Shutdown()
		c.t.Fatalf("node %d not ready", i)
	}
	c.nodes[i] = s
}

// Stop shuts node i down and waits until it is gone. It does nothing if the
// node is stopped.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

func (c *Cluster) waitMeta() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		ready := false
		for _, s := range c.nodes {
			// The meta leader knows every node online: streams can be
			// placed on all of them.
			ready = ready || (s != nil && s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(c.nodes))
		}
		c.mu.Unlock()
		if ready {
			return
		}
		<-time.After(20 * time.Millisecond)
	}
	c.t.Fatal("the cluster elected no JetStream meta leader that sees every node within 30s")
}

// StreamLeader returns the server name of stream's leader as nc sees it.
func StreamLeader(ctx context.Context, nc *nats.Conn, stream string) (string, error) {
	resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+stream, nil)
	if err != nil {
		return "", err
	}
	var info struct {
		Cluster *struct {
			Leader string `json:"leader"`
		} `json:"cluster"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &info); err != nil {
		return "", err
	}
	if info.Error != nil {
		return "", fmt.Errorf("stream info %s: %s", stream, info.Error.Description)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", fmt.Errorf("stream %s has no leader", stream)
	}
	return info.Cluster.Leader, nil
}

// StepDown asks stream's leader to step down, as
// `nats stream cluster step-down` does.
func StepDown(ctx context.Context, nc *nats.Conn, stream string) error {
	resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil)
	if err != nil {
		return err
	}
	var r struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return err
	}
	if !r.Success {
		if r.Error != nil {
			return fmt.Errorf("step down %s: %s", stream, r.Error.Description)
		}
		return fmt.Errorf("step down %s: not done", stream)
	}
	return nil
}
