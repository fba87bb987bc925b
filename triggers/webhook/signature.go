package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks header names. The svix- variants are accepted too.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Limits on the signature headers, so a hostile request costs little.
const (
	maxIDLen         = 256
	maxSignatures    = 16
	maxSignatureHdr  = 4096
	signatureVersion = "v1"
)

// Errors of signature verification. All of them answer 401.
var (
	ErrMissingHeaders = errors.New("webhook: signature headers missing")
	ErrBadTimestamp   = errors.New("webhook: webhook-timestamp is not an integer of Unix seconds")
	ErrStale          = errors.New("webhook: webhook-timestamp outside the tolerance")
	ErrBadID          = errors.New("webhook: webhook-id is empty, too long or contains '.' or control characters")
	ErrNoSignature    = errors.New("webhook: no v1 signature in webhook-signature")
	ErrBadSignature   = errors.New("webhook: no signature matches")
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
func ParseTimestamp(v string) (time.Time, error) {
	if v == "" || len(v) > 12 {
		return time.Time{}, ErrBadTimestamp
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return time.Time{}, ErrBadTimestamp
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, ErrBadTimestamp
	}
	return time.Unix(n, 0), nil
}

// ParseSignatures returns the decoded v1 signatures of a webhook-signature
// header: a space-delimited list of "<version>,<base64>". Other versions
// (v1a, future ones) are ignored; malformed entries are ignored too, since
// the spec lets a sender add signatures the receiver does not know. An error
// means the header is unusable: too long, too many entries, or no v1 entry.
func ParseSignatures(v string) ([][]byte, error) {
	if len(v) > maxSignatureHdr {
		return nil, fmt.Errorf("%w: header longer than %d bytes", ErrNoSignature, maxSignatureHdr)
	}
	fields := strings.Fields(v)
	if len(fields) > maxSignatures {
		return nil, fmt.Errorf("%w: more than %d signatures", ErrNoSignature, maxSignatures)
	}
	var out [][]byte
	for _, f := range fields {
		ver, sig, ok := strings.Cut(f, ",")
		if !ok || ver != signatureVersion {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(raw) != sha256.Size {
			continue
		}
		out = append(out, raw)
	}
	if len(out) == 0 {
		return nil, ErrNoSignature
	}
	return out, nil
}

func validID(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c == '.' || c < 0x21 || c == 0x7f {
			return false
		}
	}
	return true
}

// verifier checks Standard Webhooks signatures against a set of secrets.
type verifier struct {
	keys      []namedKey
	tolerance time.Duration
}

type namedKey struct {
	name  string
	key   []byte
	grant Grant
}

// verify checks s and body at now and returns the credential whose secret
// made a matching signature. Every secret is tried against every v1
// signature with hmac.Equal, so the time taken does not depend on which
// one matched.
func (v *verifier) verify(s signed, body []byte, now time.Time) (*namedKey, error) {
	if !validID(s.id) {
		return nil, ErrBadID
	}
	ts, err := ParseTimestamp(s.timestamp)
	if err != nil {
		return nil, err
	}
	if d := now.Sub(ts); d > v.tolerance || d < -v.tolerance {
		return nil, fmt.Errorf("%w: %s is %s away from the server's clock (tolerance %s); sign every attempt with the current time and check the sender's clock",
			ErrStale, s.timestamp, d.Round(time.Second).Abs(), v.tolerance)
	}
	sigs, err := ParseSignatures(s.signatures)
	if err != nil {
		return nil, err
	}
	var match *namedKey
	for i := range v.keys {
		mac := hmac.New(sha256.New, v.keys[i].key)
		mac.Write([]byte(s.id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(s.timestamp))
		mac.Write([]byte{'.'})
		mac.Write(body)
		want := mac.Sum(nil)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) && match == nil {
				match = &v.keys[i]
			}
		}
	}
	if match == nil {
		return nil, ErrBadSignature
	}
	return match, nil
}
