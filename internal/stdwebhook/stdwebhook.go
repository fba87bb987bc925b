// Package stdwebhook is the Standard Webhooks signature scheme (spec
// v1.0.0, https://github.com/standard-webhooks/standard-webhooks): the one
// implementation both the inbound webhook trigger (which verifies) and the
// outbound webhook connector (which signs) use, so the two cannot drift.
//
// A signed request carries three headers: webhook-id (unique per message,
// the same on every retry), webhook-timestamp (Unix seconds of the
// attempt) and webhook-signature, a space-delimited list of
// "v1,<base64 HMAC-SHA256>" entries, one per secret (several during a
// rotation). The HMAC is keyed with the bytes of a "whsec_<base64>" secret
// and covers "<id>.<timestamp>.<raw body>".
package stdwebhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header names.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Limits.
const (
	// MinSecretBytes is the shortest signing secret accepted (the spec: "at
	// least 24 bytes").
	MinSecretBytes = 24
	// MaxIDLen is the longest webhook-id accepted.
	MaxIDLen = 256
	// MaxSignatures is the most entries a webhook-signature may hold.
	MaxSignatures = 16
	// MaxSignatureHeader is the longest webhook-signature accepted, in bytes.
	MaxSignatureHeader = 4096
	// Version is the signature version of HMAC-SHA256 signatures.
	Version = "v1"
)

// Errors of verification. The messages may be shown to the sender.
var (
	ErrBadTimestamp = errors.New("webhook: webhook-timestamp is not an integer of Unix seconds")
	ErrStale        = errors.New("webhook: webhook-timestamp outside the tolerance")
	ErrBadID        = errors.New("webhook: webhook-id is empty, too long or contains '.' or control characters")
	ErrNoSignature  = errors.New("webhook: no v1 signature in webhook-signature")
	ErrBadSignature = errors.New("webhook: no signature matches")
)

// DecodeSecret returns the key bytes of a "whsec_<base64>" signing secret.
// Its errors never quote the secret.
func DecodeSecret(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("empty (is its ${ENV} variable set?)")
	}
	raw, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		return nil, errors.New("want whsec_<base64>, the Standard Webhooks secret format")
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, errors.New("the part after whsec_ is not standard base64")
	}
	if len(key) < MinSecretBytes {
		return nil, fmt.Errorf("%d bytes is too short; use at least %d random bytes, e.g. `echo whsec_$(openssl rand -base64 32)`", len(key), MinSecretBytes)
	}
	return key, nil
}

// Timestamp formats t as webhook-timestamp: decimal Unix seconds.
func Timestamp(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// mac returns HMAC-SHA256 with key over "<id>.<timestamp>.<body>".
func mac(key []byte, id, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Sign returns the webhook-signature value of a message signed with each
// of keys: "v1,<base64>" entries separated by spaces, in the order of keys.
func Sign(keys [][]byte, id, timestamp string, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = Version + "," + base64.StdEncoding.EncodeToString(mac(k, id, timestamp, body))
	}
	return strings.Join(sigs, " ")
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
	if len(v) > MaxSignatureHeader {
		return nil, fmt.Errorf("%w: header longer than %d bytes", ErrNoSignature, MaxSignatureHeader)
	}
	fields := strings.Fields(v)
	if len(fields) > MaxSignatures {
		return nil, fmt.Errorf("%w: more than %d signatures", ErrNoSignature, MaxSignatures)
	}
	var out [][]byte
	for _, f := range fields {
		ver, sig, ok := strings.Cut(f, ",")
		if !ok || ver != Version {
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

// ValidID reports whether id can be a webhook-id: 1 to MaxIDLen bytes
// without white space, control characters or '.' (which separates the
// signed parts).
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c == '.' || c < 0x21 || c == 0x7f {
			return false
		}
	}
	return true
}

// Verify checks a message's headers (id, timestamp, signatures: the values
// of webhook-id, webhook-timestamp and webhook-signature) and raw body at
// now, and returns the index in keys of the key that made a matching
// signature. The timestamp must be within tolerance of now, either way.
// Every key is compared with every v1 signature with hmac.Equal, so the
// time taken does not depend on which one matched.
func Verify(keys [][]byte, id, timestamp, signatures string, body []byte, now time.Time, tolerance time.Duration) (int, error) {
	if !ValidID(id) {
		return -1, ErrBadID
	}
	ts, err := ParseTimestamp(timestamp)
	if err != nil {
		return -1, err
	}
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return -1, fmt.Errorf("%w: %s is %s away from the server's clock (tolerance %s); sign every attempt with the current time and check the sender's clock",
			ErrStale, timestamp, d.Round(time.Second).Abs(), tolerance)
	}
	sigs, err := ParseSignatures(signatures)
	if err != nil {
		return -1, err
	}
	match := -1
	for i, k := range keys {
		want := mac(k, id, timestamp, body)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) && match < 0 {
				match = i
			}
		}
	}
	if match < 0 {
		return -1, ErrBadSignature
	}
	return match, nil
}
