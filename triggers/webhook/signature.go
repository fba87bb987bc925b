package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentwork/agentwork/internal/stdwebhook"
)

// Standard Webhooks header names. The svix- variants are accepted too.
const (
	HeaderID        = stdwebhook.HeaderID
	HeaderTimestamp = stdwebhook.HeaderTimestamp
	HeaderSignature = stdwebhook.HeaderSignature
)

// Errors of signature verification. All of them answer 401. They are the
// errors of internal/stdwebhook, which the outbound webhook connector signs
// with.
var (
	ErrMissingHeaders = errors.New("webhook: signature headers missing")
	ErrBadTimestamp   = stdwebhook.ErrBadTimestamp
	ErrStale          = stdwebhook.ErrStale
	ErrBadID          = stdwebhook.ErrBadID
	ErrNoSignature    = stdwebhook.ErrNoSignature
	ErrBadSignature   = stdwebhook.ErrBadSignature
)

// signed are the Standard Webhooks headers of one request.
type signed struct {
	id, timestamp, signatures string
}

// signedHeaders reads webhook-* (or svix-*) headers. ok is false when none
// of the three is present; present but incomplete is ErrMissingHeaders.
func signedHeaders(h http.Header) (signed, bool, error) {
	s := signed{id: h.Get(HeaderID), timestamp: h.Get(HeaderTimestamp), signatures: h.Get(HeaderSignature)}
	if s == (signed{}) {
		s = signed{id: h.Get("svix-id"), timestamp: h.Get("svix-timestamp"), signatures: h.Get("svix-signature")}
	}
	if s.signatures == "" {
		if s.timestamp == "" {
			return s, false, nil // at most an id: not a signed request
		}
		return s, true, fmt.Errorf("%w: want webhook-id, webhook-timestamp and webhook-signature", ErrMissingHeaders)
	}
	if s.id == "" || s.timestamp == "" {
		return s, true, fmt.Errorf("%w: want webhook-id, webhook-timestamp and webhook-signature", ErrMissingHeaders)
	}
	return s, true, nil
}

// ParseTimestamp parses webhook-timestamp: decimal Unix seconds, no sign,
// no fraction.
func ParseTimestamp(v string) (time.Time, error) { return stdwebhook.ParseTimestamp(v) }

// ParseSignatures returns the decoded v1 signatures of a webhook-signature
// header (see stdwebhook.ParseSignatures).
func ParseSignatures(v string) ([][]byte, error) { return stdwebhook.ParseSignatures(v) }

// verifier checks Standard Webhooks signatures against a set of secrets.
type verifier struct {
	keys      []namedKey
	tolerance time.Duration
}

type namedKey struct {
	name  string
	field string // webhook.secrets[i]
	key   []byte
	grant Grant
}

// verify checks s and body at now and returns the credential whose secret
// made a matching signature (stdwebhook.Verify: every secret is tried
// against every v1 signature in constant time).
func (v *verifier) verify(s signed, body []byte, now time.Time) (*namedKey, error) {
	raw := make([][]byte, len(v.keys))
	for i, k := range v.keys {
		raw[i] = k.key
	}
	i, err := stdwebhook.Verify(raw, s.id, s.timestamp, s.signatures, body, now, v.tolerance)
	if err != nil {
		return nil, err
	}
	return &v.keys[i], nil
}
