package bus

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/internal/secret"
)

func (b *Bus) natsOptions() []nats.Option {
	opts := []nats.Option{nats.Name("agentwork-" + b.instance), nats.MaxReconnects(-1)}
	if b.cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(b.cfg.CredsFile))
	}
	if b.cfg.User != "" {
		opts = append(opts, nats.UserInfo(b.cfg.User, b.cfg.Password))
	}
	if b.cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(b.cfg.CAFile))
	}
	if b.cfg.CertFile != "" {
		opts = append(opts, nats.ClientCert(b.cfg.CertFile, b.cfg.KeyFile))
	}
	return opts
}

func (b *Bus) dialExternal() (*nats.Conn, error) {
	return nats.Connect(b.cfg.URL, b.natsOptions()...)
}

func (b *Bus) connectExternal(ctx context.Context) error {
	var err error
	if b.nc, err = b.dialExternal(); err != nil {
		return fmt.Errorf("bus: connect %s: %w", secret.URL(b.cfg.URL), err)
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		return err
	}
	if b.cfg.Replicas == 0 {
		// Not set: what the servers can hold. A single server holds one
		// replica; a cluster, three.
		b.cfg.Replicas = 1
		if b.nc.ConnectedClusterName() != "" {
			b.cfg.Replicas = 3
		}
		b.log.Info("bus replicas chosen for the servers", zap.Int("replicas", b.cfg.Replicas), zap.String("cluster", b.nc.ConnectedClusterName()))
	}
	err = retry(ctx, func() error {
		actx, cancel := context.WithTimeout(ctx, provisionAttempt)
		defer cancel()
		return b.Ready(actx)
	})
	if err != nil {
		return fmt.Errorf("bus: %s connected, but JetStream did not answer within bus.ready_timeout (%s): %w", secret.URL(b.cfg.URL), b.cfg.ReadyTimeout, err)
	}
	return nil
}

// Dial connects to a running agentwork bus as a client, as the CLI does:
// to cfg.URL when set, otherwise to the embedded server of the process that
// owns cfg.DataDir, with the credentials it wrote there. It provisions
// nothing; it binds the buckets that exist.
func Dial(ctx context.Context, cfg Config) (*Bus, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	boot := newBootID()
	b := &Bus{cfg: cfg, Subjects: Subjects{Prefix: cfg.Prefix}, boot: boot, instance: newInstanceID(boot)}
	b.log = nopLogger()
	if !cfg.External() {
		info, err := ReadClientInfo(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		if info.URL == "" {
			return nil, fmt.Errorf("bus: the server in %s does not listen (bus.listen: off); set bus.listen to reach it", filepath.Clean(cfg.DataDir))
		}
		b.cfg.URL, b.cfg.User, b.cfg.Password = info.URL, info.User, info.Password
	}
	var err error
	if b.nc, err = b.dialExternal(); err != nil {
		return nil, fmt.Errorf("bus: connect %s: %w (is `agentwork serve` running?)", secret.URL(b.cfg.URL), err)
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		b.nc.Close()
		return nil, err
	}
	if err := b.bindBuckets(ctx); err != nil {
		b.nc.Close()
		return nil, err
	}
	return b, nil
}
