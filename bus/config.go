package bus

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/agentwork/agentwork/internal/secret"
)

// Config configures the bus. The zero value runs an embedded server with its
// data under ./.agentwork, listening on 127.0.0.1:4222 with generated
// credentials.
type Config struct {
	// URL, when set, connects to an external NATS cluster instead of starting
	// the embedded server: "nats://a:4222,nats://b:4222".
	URL string `yaml:"url" json:"url,omitempty"`
	// CredsFile is a NATS .creds file for the external cluster.
	CredsFile string `yaml:"creds" json:"creds,omitempty"`
	// User and Password authenticate to the external cluster (use ${ENV} refs).
	User     string `yaml:"user" json:"user,omitempty"`
	Password string `yaml:"password" json:"password,omitempty"`
	// TLS: CA file, and client cert/key for mutual TLS, for the external cluster.
	CAFile   string `yaml:"ca_file" json:"ca_file,omitempty"`
	CertFile string `yaml:"cert_file" json:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file" json:"key_file,omitempty"`
	// Replicas for streams and buckets. Default 1 embedded and on a single
	// external server, 3 on a cluster (decided once connected).
	Replicas int `yaml:"replicas" json:"replicas,omitempty"`

	// DataDir holds the embedded server's store, the lock and the generated
	// credentials. Default ./.agentwork.
	DataDir string `yaml:"data_dir" json:"data_dir,omitempty"`
	// Listen is the embedded server's client address. Default 127.0.0.1:4222;
	// "off" serves in-process connections only.
	Listen string `yaml:"listen" json:"listen,omitempty"`
	// AllowRemote permits a Listen address that is not loopback. The server
	// then accepts the generated credentials from the network in plain text
	// unless TLS is put in front: keep it on loopback where you can.
	AllowRemote bool `yaml:"allow_remote" json:"allow_remote,omitempty"`
	// MaxMemory and MaxStore cap JetStream (bytes). Defaults 256 MiB and 10 GiB.
	MaxMemory int64 `yaml:"max_memory" json:"max_memory,omitempty"`
	MaxStore  int64 `yaml:"max_store" json:"max_store,omitempty"`
	// SyncInterval, if set, replaces fsync-on-every-write with a periodic fsync.
	// Faster, but acknowledged work can be lost on power failure. Default: always.
	SyncInterval time.Duration `yaml:"sync_interval" json:"sync_interval,omitempty"`

	// Prefix is the first subject token. Default "agentwork".
	Prefix string `yaml:"prefix" json:"prefix,omitempty"`
	// ReadyTimeout bounds start-up (server ready and JetStream ready). Default 30s.
	ReadyTimeout time.Duration `yaml:"ready_timeout" json:"ready_timeout,omitempty"`
}

// Defaults.
const (
	DefaultDataDir   = ".agentwork"
	DefaultListen    = "127.0.0.1:4222"
	DefaultPrefix    = "agentwork"
	DefaultMaxMemory = 256 << 20
	DefaultMaxStore  = 10 << 30
)

// WithDefaults returns c with zero fields filled.
func (c Config) WithDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.MaxMemory == 0 {
		c.MaxMemory = DefaultMaxMemory
	}
	if c.MaxStore == 0 {
		c.MaxStore = DefaultMaxStore
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 30 * time.Second
	}
	if c.Replicas == 0 && !c.External() {
		c.Replicas = 1
	}
	return c
}

// External reports whether c connects to an external cluster.
func (c Config) External() bool { return c.URL != "" }

// Validate checks c.
func (c Config) Validate() error {
	if c.URL != "" {
		for _, u := range strings.Split(c.URL, ",") {
			u = strings.TrimSpace(u)
			if !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") && !strings.HasPrefix(u, "ws://") && !strings.HasPrefix(u, "wss://") {
				return fmt.Errorf("bus.url: %q is not a NATS URL (want nats://host:port)", secret.URL(u))
			}
			// The NATS client quotes a URL it cannot parse, password and
			// all: refuse it here, where the error can leave it out.
			if _, err := url.Parse(u); err != nil {
				return fmt.Errorf("bus.url: %q does not parse as a URL (percent-encode a %% or a space in the user or password, or use bus.user and bus.password)", secret.URL(u))
			}
		}
	}
	if c.Listen != "" && c.Listen != "off" {
		host, _, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return fmt.Errorf("bus.listen: %q: want host:port or off", c.Listen)
		}
		if !c.AllowRemote && !loopback(host) {
			return fmt.Errorf("bus.listen: %q is reachable from other machines; use 127.0.0.1:<port>, or set bus.allow_remote: true (and put TLS in front)", c.Listen)
		}
	}
	if c.Prefix != "" && !tokenChars(c.Prefix) {
		return fmt.Errorf("bus.prefix: %q: want [a-z0-9_-]+", c.Prefix)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("bus.replicas: %d: want 1-5", c.Replicas)
	}
	if c.MaxMemory < 0 || c.MaxStore < 0 {
		return fmt.Errorf("bus.max_memory/max_store: must not be negative")
	}
	return nil
}

// loopback reports whether host names only this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
