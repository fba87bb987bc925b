package email

import (
	"errors"
	"fmt"
	"net/mail"
	"net/netip"
	"strings"
	"unicode"

	"github.com/agentwork/agentwork/connectors"
)

// The values of tls.
const (
	TLSStartTLS = "starttls" // plain connection upgraded with STARTTLS (port 587)
	TLSImplicit = "implicit" // TLS from the first byte (port 465)
	TLSNone     = "none"     // no encryption: a relay on this machine only
)

// Defaults.
const (
	DefaultPort         = 587
	DefaultImplicitPort = 465
	// DefaultSubject is the subject of a notification: {source} and {name}
	// are the notification's source and name.
	DefaultSubject = "agentwork: {source}/{name}"
)

// Config is an email connector's entry in agentwork.yaml:
//
//	connectors:
//	  mail:
//	    type: email
//	    host: smtp.example.com
//	    from: agentwork <agentwork@example.com>
//	    to: [ops@example.com]
//	    username: agentwork@example.com
//	    password: ${SMTP_PASSWORD}
type Config struct {
	// Host is the SMTP server (submission service) to send through.
	// Required.
	Host string `yaml:"host,omitempty" json:"host,omitempty"`
	// Port of Host. Default 587, or 465 with tls: implicit.
	Port int `yaml:"port,omitempty" json:"port,omitempty" jsonschema:"minimum=0,maximum=65535"`
	// TLS is "starttls" (default: a plain connection upgraded with
	// STARTTLS; the server must offer it), "implicit" (TLS from the first
	// byte, port 465) or "none" (no encryption: for a relay on this
	// machine; refused with a password to any other host).
	TLS string `yaml:"tls,omitempty" json:"tls,omitempty" jsonschema:"enum=starttls,enum=implicit,enum=none,default=starttls"`
	// From is the sender, "agentwork@example.com" or "agentwork
	// <agentwork@example.com>". Required.
	From string `yaml:"from,omitempty" json:"from,omitempty"`
	// To are the recipients of every notification. Required; a target may
	// name one address instead (mail:oncall@example.com).
	To []string `yaml:"to,omitempty" json:"to,omitempty"`
	// Username and Password authenticate with AUTH PLAIN, over TLS only
	// (or to localhost). Password is secret: write ${SMTP_PASSWORD}.
	Username string `yaml:"username,omitempty" json:"username,omitempty"`
	Password string `yaml:"password,omitempty" json:"password,omitempty"`
	// Subject of each mail; {source} and {name} are replaced by the
	// notification's source and name, and an important notification's
	// subject ends in " [important]". Default "agentwork: {source}/{name}".
	Subject string `yaml:"subject,omitempty" json:"subject,omitempty" jsonschema:"default=agentwork: {source}/{name}"`
	// Helo is the name the connector gives in EHLO. Default: this
	// machine's host name.
	Helo string `yaml:"helo,omitempty" json:"helo,omitempty"`
}

// Validate checks c without I/O. Its errors never quote the password.
func (c Config) Validate() error {
	var errs []error
	switch {
	case c.Host == "":
		errs = append(errs, errors.New("host: required (the SMTP server, e.g. smtp.example.com)"))
	case strings.Contains(c.Host, "://") || strings.ContainsAny(c.Host, "/ \t\r\n@[]") || (strings.Contains(c.Host, ":") && !isIP(c.Host)):
		errs = append(errs, fmt.Errorf("host: %q: want a host name or IP address alone (the port goes in port)", c.Host))
	}
	if c.Port < 0 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("port: %d: want 1-65535 (0 for %d, or %d with tls: implicit)", c.Port, DefaultPort, DefaultImplicitPort))
	}
	switch c.TLS {
	case "", TLSStartTLS, TLSImplicit:
	case TLSNone:
		if (c.Username != "" || c.Password != "") && !isLoopback(c.Host) {
			errs = append(errs, fmt.Errorf("tls: none would send the password unencrypted to %s; use starttls or implicit (none is for a relay on this machine)", c.Host))
		}
	default:
		errs = append(errs, fmt.Errorf("tls: %q: want starttls, implicit or none", c.TLS))
	}
	if c.From == "" {
		errs = append(errs, errors.New("from: required (e.g. agentwork <agentwork@example.com>)"))
	} else if _, err := parseAddress(c.From); err != nil {
		errs = append(errs, fmt.Errorf("from: %w", err))
	}
	if len(c.To) == 0 {
		errs = append(errs, errors.New("to: required (a list of addresses, e.g. [ops@example.com])"))
	}
	for i, to := range c.To {
		if _, err := parseAddress(to); err != nil {
			errs = append(errs, fmt.Errorf("to[%d]: %w", i, err))
		}
	}
	switch {
	case c.Username != "" && c.Password == "":
		errs = append(errs, errors.New("password: required with username (write ${SMTP_PASSWORD}; is the variable set?)"))
	case c.Password != "" && c.Username == "":
		errs = append(errs, errors.New("username: required with password"))
	case strings.ContainsAny(c.Username, "\x00\r\n"):
		errs = append(errs, errors.New("username: may not contain NUL or line breaks"))
	case strings.ContainsAny(c.Password, "\x00\r\n"):
		errs = append(errs, errors.New("password: may not contain NUL or line breaks"))
	}
	if strings.ContainsFunc(c.Subject, unicode.IsControl) {
		errs = append(errs, errors.New("subject: may not contain control characters or line breaks"))
	}
	if c.Helo != "" && strings.ContainsFunc(c.Helo, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		errs = append(errs, fmt.Errorf("helo: %q: want a host name (printable ASCII, no spaces)", c.Helo))
	}
	return errors.Join(errs...)
}

// CheckDestination checks a target's destination: one address to send to
// instead of To (mail:oncall@example.com).
func (c Config) CheckDestination(dest string) error {
	if _, err := parseAddress(dest); err != nil {
		return fmt.Errorf("destination: want one email address: %w", err)
	}
	return nil
}

// parseAddress parses one address, "a@example.com" or "Name
// <a@example.com>", whose address part is ASCII (the connector does not
// use SMTPUTF8).
func parseAddress(s string) (*mail.Address, error) {
	a, err := mail.ParseAddress(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not an email address (want a@example.com or Name <a@example.com>)", s)
	}
	for _, r := range a.Address {
		if r > '~' || r < '!' {
			return nil, fmt.Errorf("%q: the address must be ASCII", s)
		}
	}
	return a, nil
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// isLoopback reports whether host is one of the names net/smtp's
// PlainAuth sends a password to without TLS: localhost, 127.0.0.1, ::1.
func isLoopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

// Type is the email connector type, for the connectors.Types of a build.
var Type = connectors.Define(connectors.Spec[Config]{
	Name:     "email",
	Defaults: Config{TLS: TLSStartTLS, Subject: DefaultSubject},
	New: func(_ string, c Config, _ connectors.BuildDeps) (connectors.Connector, error) {
		return New(Options{
			Host: c.Host, Port: c.Port, TLS: c.TLS, From: c.From, To: c.To,
			Username: c.Username, Password: c.Password, Subject: c.Subject, Helo: c.Helo,
		})
	},
})
