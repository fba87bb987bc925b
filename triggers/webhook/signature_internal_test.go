package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/internal/stdwebhook"
)

// The reference libraries' vector: the verifier must accept it, and reject
// it when anything signed changes.
func TestVerifySpecVector(t *testing.T) {
	t.Parallel()
	key, err := DecodeSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	v := verifier{keys: []namedKey{{name: "vector", key: key}}, tolerance: 5 * time.Minute}
	now := time.Unix(1614265330, 0)
	good := signed{id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: "1614265330", signatures: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}
	body := []byte(`{"test": 2432232314}`)

	tests := []struct {
		name string
		s    signed
		body []byte
		now  time.Time
		want error
	}{
		{"vector", good, body, now, nil},
		{"vector among others", signed{good.id, good.timestamp, "v1a,abc v2,xyz " + good.signatures + " v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="}, body, now, nil},
		{"4m59s later", good, body, now.Add(4*time.Minute + 59*time.Second), nil},
		{"5m1s later", good, body, now.Add(5*time.Minute + time.Second), ErrStale},
		{"5m1s earlier", good, body, now.Add(-5*time.Minute - time.Second), ErrStale},
		{"body changed", good, []byte(`{"test": 2432232315}`), now, ErrBadSignature},
		{"id changed", signed{"msg_p5jXN8AQM9LWM0D4loKWxJeK", good.timestamp, good.signatures}, body, now, ErrBadSignature},
		{"timestamp changed", signed{good.id, "1614265331", good.signatures}, body, now, ErrBadSignature},
		{"only v1a", signed{good.id, good.timestamp, strings.Replace(good.signatures, "v1,", "v1a,", 1)}, body, now, ErrNoSignature},
		{"id with dot", signed{"msg.1", good.timestamp, good.signatures}, body, now, ErrBadID},
		{"signed timestamp", signed{good.id, "+1614265330", good.signatures}, body, now, ErrBadTimestamp},
		{"fractional timestamp", signed{good.id, "1614265330.5", good.signatures}, body, now, ErrBadTimestamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k, err := v.verify(tt.s, tt.body, tt.now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("verify() = %v, want %v", err, tt.want)
			}
			if tt.want == nil && k.name != "vector" {
				t.Fatalf("verify() matched %q, want vector", k.name)
			}
		})
	}
}

// FuzzSignatureHeader: the parsers never panic; a header is accepted only
// if it carries the right signature, and adding the right signature to any
// header within the limits makes it pass.
func FuzzSignatureHeader(f *testing.F) {
	key := []byte("a 24 byte key for fuzzing!")
	v := verifier{keys: []namedKey{{name: "k", key: key}}, tolerance: 5 * time.Minute}
	now := time.Unix(1700000000, 0)
	for _, s := range []struct{ id, ts, sig string }{
		{"msg_1", "1700000000", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="},
		{"msg_2", "1700000100", "v1a,abc v2,def v1,"},
		{"", "", ""}, {"a.b", "1", "v1"}, {"x", "-1", ",,, v1,===="}, {"x", "99999999999999999999", "v1,AAAA"},
	} {
		f.Add(s.id, s.ts, s.sig, []byte(`{"prompt":"x"}`))
	}
	f.Fuzz(func(t *testing.T, id, ts, header string, body []byte) {
		_, _ = ParseTimestamp(ts)
		sigs, err := ParseSignatures(header)
		if err == nil && len(sigs) == 0 {
			t.Fatalf("ParseSignatures(%q) = no signatures and no error", header)
		}
		for _, s := range sigs {
			if len(s) != 32 {
				t.Fatalf("ParseSignatures(%q) returned a %d-byte signature", header, len(s))
			}
		}
		s := signed{id: id, timestamp: ts, signatures: header}
		right := "v1," + sign(key, id, ts, body)
		if _, err := v.verify(s, body, now); err == nil && !strings.Contains(header, right) {
			t.Fatalf("verify accepted header %q without the right signature", header)
		}
		s.signatures = header + " " + right
		_, err = v.verify(s, body, now)
		tsOK := false
		if tm, err := ParseTimestamp(ts); err == nil && now.Sub(tm).Abs() <= 5*time.Minute {
			tsOK = true
		}
		fits := len(s.signatures) <= stdwebhook.MaxSignatureHeader && len(strings.Fields(s.signatures)) <= stdwebhook.MaxSignatures
		if stdwebhook.ValidID(id) && tsOK && fits && err != nil {
			t.Fatalf("verify(%+v) = %v, want the appended right signature to pass", s, err)
		}
	})
}

// sign is HMAC-SHA256 over id.ts.body, base64 (for the fuzz target only;
// the handler tests use the independent signer in signer_test.go).
func sign(key []byte, id, ts string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}
