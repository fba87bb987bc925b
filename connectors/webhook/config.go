package webhook

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/internal/httpheader"
	"github.com/agentwork/agentwork/internal/netguard"
	"github.com/agentwork/agentwork/internal/stdwebhook"
)

// Config is a webhook connector's entry in agentwork.yaml:
//
//	connectors:
//	  hook:
//	    type: webhook
//	    url: ${HOOK_URL}
//	    secrets: [${HOOK_SECRET}]
type Config struct {
	// URL receives the POSTs: http or https. Required. It may hold a token
	// (in the path or query), so the whole URL is treated as a secret:
	// errors show its scheme and host alone.
	URL string `yaml:"url,omitempty" json:"url,omitempty"`
	// Secrets are Standard Webhooks signing secrets (whsec_<base64>, at
	// least 24 bytes): every request is signed with each, so during a
	// rotation list the new and the old one. None: requests are not signed.
	// Secret: write ${HOOK_SECRET}.
	Secrets []string `yaml:"secrets,omitempty" json:"secrets,omitempty"`
	// Headers are added to every request (e.g. Authorization: Bearer
	// ${HOOK_TOKEN}); their values are kept out of errors. They cannot
	// replace Content-Type or the webhook-* headers.
	Headers map[string]string `yaml:"headers,omitempty" json:"headers,omitempty"`
	// AllowPrivate lets the connector connect to private (RFC 1918, fc00::/7,
	// 100.64.0.0/10), link-local (169.254.0.0/16, fe80::/10) and cloud
	// metadata addresses (169.254.169.254, fd00:ec2::254,
	// metadata.google.internal), which it refuses by default, at connect
	// time, whatever the URL's name resolves to. Loopback (127.0.0.0/8,
	// ::1) is always allowed. Default false.
	AllowPrivate bool `yaml:"allow_private,omitempty" json:"allow_private,omitempty"`
}

// reservedHeaders are set by the connector; Headers may not name them.
var reservedHeaders = []string{
	stdwebhook.HeaderID, stdwebhook.HeaderTimestamp, stdwebhook.HeaderSignature,
	"content-type", "content-length", "host", "transfer-encoding", "connection", "te", "trailer", "upgrade",
}

// Validate checks c without I/O. Its errors show the URL's scheme and host
// alone and never quote a secret or a header value.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("url: required (the receiver's https URL; write ${HOOK_URL} if it holds a token)"))
	} else if u, err := parseURL(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("url: %w", err))
	} else if !c.AllowPrivate {
		if err := checkHost(u.Hostname()); err != nil {
			errs = append(errs, fmt.Errorf("url: %s: %w", Redacted(u), err))
		}
	}
	for i, s := range c.Secrets {
		if _, err := stdwebhook.DecodeSecret(s); err != nil {
			errs = append(errs, fmt.Errorf("secrets[%d]: %w", i, err))
		}
	}
	for name, v := range c.Headers {
		switch {
		case !httpheader.ValidName(name):
			errs = append(errs, fmt.Errorf("headers: %q is not a header name (want letters, digits and -, no spaces)", name))
		case isReserved(name):
			errs = append(errs, fmt.Errorf("headers: %s is set by the connector; leave it out", name))
		case !httpheader.ValidValue(v):
			errs = append(errs, fmt.Errorf("headers.%s: the value contains a line break or control character", name))
		}
	}
	return errors.Join(errs...)
}

// parseURL parses an http(s) URL; its errors show scheme and host alone.
func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.New("does not parse as a URL (want https://host/path)")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errors.New("has no host (want https://host/path)")
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("%s: want no #fragment", Redacted(u))
	}
	return u, nil
}

// Redacted is u as errors and logs show it: scheme and host, nothing of
// the user, path or query, which may hold a token.
func Redacted(u *url.URL) string { return u.Scheme + "://" + u.Host }

func isReserved(name string) bool {
	for _, r := range reservedHeaders {
		if strings.EqualFold(name, r) {
			return true
		}
	}
	return false
}

// ErrBlocked is the error of a connection the connector refused to make:
// to an address allow_private would allow. It is permanent.
var ErrBlocked = netguard.ErrBlocked

// guard is what the connector may connect to without allow_private:
// public addresses and loopback. With allow_private it connects anywhere.
var guard = netguard.Policy{AllowLoopback: true}

// allowHint ends the error of a refused address.
const allowHint = "; set allow_private: true to send there"

// checkHost refuses a host by name or literal address before any lookup:
// the cloud metadata names, and addresses guard refuses. A name is
// checked again at connect time, address by address.
func checkHost(host string) error {
	if err := guard.CheckHost(host); err != nil {
		return fmt.Errorf("%w%s", err, allowHint)
	}
	return nil
}

// Type is the webhook connector type, for the connectors.Types of a build.
var Type = connectors.Define(connectors.Spec[Config]{
	Name: "webhook",
	New: func(name string, c Config, deps connectors.BuildDeps) (connectors.Connector, error) {
		return New(name, Options{URL: c.URL, Secrets: c.Secrets, Headers: c.Headers, AllowPrivate: c.AllowPrivate})
	},
})
