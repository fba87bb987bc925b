package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

const (
	embeddedUser    = "agentwork"
	credentialsFile = "nats.json"
)

// ErrLocked is returned when another process holds the data dir.
var ErrLocked = errors.New("bus: data dir is in use by another agentwork process")

// ClientInfo is what a client needs to reach the embedded server: written to
// <data_dir>/nats.json (mode 0600) at start, read by the CLI.
type ClientInfo struct {
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
}

func (b *Bus) startEmbedded(ctx context.Context) error {
	dir, err := filepath.Abs(b.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("bus: data dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bus: create data dir %s: %w", dir, err)
	}
	if b.lock, err = lockDir(dir); err != nil {
		return err
	}
	b.exclusive = b.lock.exclusive()
	info, err := loadOrCreateCredentials(dir)
	if err != nil {
		return err
	}
	b.pass = info.Password
	hashed, err := bcrypt.GenerateFromPassword([]byte(info.Password), bcrypt.MinCost)
	if err != nil {
		return fmt.Errorf("bus: hash credentials: %w", err)
	}
	hash := string(hashed)
	opts := &server.Options{
		ServerName:         "agentwork-" + b.instance,
		JetStream:          true,
		StoreDir:           dir,
		JetStreamMaxMemory: b.cfg.MaxMemory,
		JetStreamMaxStore:  b.cfg.MaxStore,
		SyncAlways:         b.cfg.SyncInterval == 0,
		SyncInterval:       b.cfg.SyncInterval,
		NoSigs:             true,
		NoLog:              true,
		Users:              []*server.User{{Username: embeddedUser, Password: hash}},
		MaxPayload:         8 << 20,
	}
	if b.cfg.Listen == "off" {
		opts.DontListen = true
	} else {
		host, port, _ := net.SplitHostPort(b.cfg.Listen)
		opts.Host = host
		if opts.Port, err = strconv.Atoi(port); err != nil {
			return fmt.Errorf("bus.listen: port %q: %w", port, err)
		}
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT // nats-server reads 0 as its default, 4222
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("bus: embedded server: %w", err)
	}
	fl := &fatalLogger{log: b.log.Named("nats")}
	srv.SetLoggerV2(fl, false, false, false)
	b.srv = srv
	go srv.Start()
	// Look for a fatal error (the port is taken) while waiting, so it is
	// reported at once, not after the whole ready timeout.
	for deadline := time.Now().Add(b.cfg.ReadyTimeout); !srv.ReadyForConnections(50 * time.Millisecond); {
		if err := fl.err(); err != nil {
			if strings.Contains(err.Error(), "address already in use") {
				return fmt.Errorf("bus.listen: %s is already in use (another agentwork serve or NATS server?): stop it, or set bus.listen to a free address, or off", b.cfg.Listen)
			}
			return fmt.Errorf("bus: embedded server did not start: %w", err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bus: embedded server not ready after %s", b.cfg.ReadyTimeout)
		}
	}
	if err := fl.err(); err != nil {
		return fmt.Errorf("bus: embedded server: %w", err)
	}
	if !srv.JetStreamEnabled() {
		return errors.New("bus: embedded server started without JetStream")
	}
	if !opts.DontListen {
		addr := srv.Addr()
		if addr != nil {
			info.URL = "nats://" + addr.String()
		}
	} else {
		info.URL = ""
	}
	b.clientInfo = &info
	b.storeDir = dir
	b.nc, err = nats.Connect("", nats.InProcessServer(srv), nats.UserInfo(embeddedUser, info.Password),
		nats.Name("agentwork-"+b.instance), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("bus: connect to embedded server: %w", err)
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		return err
	}
	for {
		if err := b.Ready(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			return fmt.Errorf("bus: jetstream not ready: %w", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if info.URL != "" {
		b.log.Info("nats listening", zap.String("url", info.URL), zap.String("credentials", filepath.Join(dir, credentialsFile)))
	}
	return nil
}

// ReadClientInfo reads the credentials the embedded server wrote to dataDir.
func ReadClientInfo(dataDir string) (ClientInfo, error) {
	var info ClientInfo
	raw, err := os.ReadFile(filepath.Join(dataDir, credentialsFile))
	if err != nil {
		return info, fmt.Errorf("bus: read credentials: %w (is `agentwork serve` running with data dir %s?)", err, dataDir)
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		return info, fmt.Errorf("bus: credentials %s: %w", filepath.Join(dataDir, credentialsFile), err)
	}
	return info, nil
}

func loadOrCreateCredentials(dir string) (ClientInfo, error) {
	info, err := ReadClientInfo(dir)
	if err == nil && info.Password != "" && !strings.HasPrefix(info.Password, "-") {
		return info, nil
	}
	// None yet, or one from an older version that may start with '-',
	// which command-line clients read as a flag: make a new one.
	var r [24]byte
	if _, err := rand.Read(r[:]); err != nil {
		return info, fmt.Errorf("bus: generate credentials: %w", err)
	}
	// Hex: letters and digits only, so every client and shell takes it as
	// it is (base64url could start with '-').
	return ClientInfo{User: embeddedUser, Password: hex.EncodeToString(r[:])}, nil
}

func writeCredentials(dir string, info ClientInfo) error {
	raw, _ := json.MarshalIndent(info, "", "  ")
	p := filepath.Join(dir, credentialsFile)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(raw, '\n'), 0o600); err != nil {
		return fmt.Errorf("bus: write credentials: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("bus: write credentials: %w", err)
	}
	return nil
}

// fatalLogger routes server logs to zap and records Fatalf instead of
// exiting, so a start-up failure becomes an error with a reason.
type fatalLogger struct {
	log   *zap.Logger
	mu    sync.Mutex
	fatal error
}

func (l *fatalLogger) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}

func (l *fatalLogger) Noticef(f string, v ...any) { l.log.Debug(fmt.Sprintf(f, v...)) }
func (l *fatalLogger) Warnf(f string, v ...any)   { l.log.Warn(fmt.Sprintf(f, v...)) }
func (l *fatalLogger) Errorf(f string, v ...any)  { l.log.Error(fmt.Sprintf(f, v...)) }
func (l *fatalLogger) Debugf(f string, v ...any)  { l.log.Debug(fmt.Sprintf(f, v...)) }
func (l *fatalLogger) Tracef(f string, v ...any)  {}
func (l *fatalLogger) Fatalf(f string, v ...any) {
	msg := fmt.Sprintf(f, v...)
	l.log.Error(msg)
	l.mu.Lock()
	if l.fatal == nil {
		l.fatal = errors.New(msg)
	}
	l.mu.Unlock()
}
