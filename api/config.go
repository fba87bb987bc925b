package api

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Defaults.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultKeepAlive         = 15 * time.Second
)

// Config is the `http` section: where the API listens and how it
// authenticates admin calls.
type Config struct {
	// Listen is host:port. Default 127.0.0.1:8080; "off" runs no HTTP server.
	// An address that is not loopback needs allow_remote: true.
	Listen string `yaml:"listen" json:"listen,omitempty"`
	// AllowRemote permits a non-loopback listen address. Put TLS in front
	// (a reverse proxy): the server speaks plain HTTP. Default false.
	AllowRemote bool `yaml:"allow_remote" json:"allow_remote,omitempty"`
	// AdminToken authenticates the admin endpoints (Authorization: Bearer).
	// Empty: generated on first start and stored 0600 in
	// <data_dir>/admin-token, where the CLI finds it. Use ${ENV} to set it.
	AdminToken string `yaml:"admin_token" json:"admin_token,omitempty"`
	// ReadHeaderTimeout bounds reading request headers. Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" json:"read_header_timeout,omitempty"`
	// ReadTimeout bounds reading a whole request. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout" json:"read_timeout,omitempty"`
	// WriteTimeout bounds writing a response (not the event stream). Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout" json:"write_timeout,omitempty"`
	// IdleTimeout closes idle keep-alive connections. Default 2m.
	IdleTimeout time.Duration `yaml:"idle_timeout" json:"idle_timeout,omitempty"`
	// ShutdownTimeout is how long requests in flight may finish at
	// shutdown. Default 10s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" json:"shutdown_timeout,omitempty"`
	// KeepAlive is the interval of comment lines on an idle event stream,
	// so proxies keep it open. Default 15s.
	KeepAlive time.Duration `yaml:"keepalive" json:"keepalive,omitempty"`
}

// WithDefaults returns c with zero fields filled.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&c.ReadTimeout, DefaultReadTimeout)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.IdleTimeout, DefaultIdleTimeout)
	def(&c.ShutdownTimeout, DefaultShutdownTimeout)
	def(&c.KeepAlive, DefaultKeepAlive)
	return c
}

// Off reports whether the HTTP server is turned off.
func (c Config) Off() bool { return c.Listen == "off" }

// Validate checks c (zero fields are valid: they take the defaults).
func (c Config) Validate() error {
	var errs []error
	if c.Listen != "" && !c.Off() {
		host, port, err := net.SplitHostPort(c.Listen)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("http.listen: %q: want host:port (e.g. 127.0.0.1:8080) or off", c.Listen))
		case port == "":
			errs = append(errs, fmt.Errorf("http.listen: %q: no port", c.Listen))
		case !c.AllowRemote && !loopbackHost(host):
			errs = append(errs, fmt.Errorf("http.listen: %q is reachable from other machines; listen on 127.0.0.1, or set http.allow_remote: true (and put TLS in front)", c.Listen))
		}
	}
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		errs = append(errs, fmt.Errorf("http.admin_token: %d characters is too short; use at least 16 random characters, or leave it empty to have one generated", len(c.AdminToken)))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read_header_timeout", c.ReadHeaderTimeout}, {"read_timeout", c.ReadTimeout}, {"write_timeout", c.WriteTimeout},
		{"idle_timeout", c.IdleTimeout}, {"shutdown_timeout", c.ShutdownTimeout}, {"keepalive", c.KeepAlive}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("http.%s: %s must not be negative", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

// loopbackHost reports whether host names only the local machine.
// An empty host or 0.0.0.0 listens on every interface.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
