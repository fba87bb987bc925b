package stdwebhook_test

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

// The test vector of the Standard Webhooks reference libraries
// (libraries/go/webhook_test.go, TestWebhookSign).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = "1614265330"
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func key(t *testing.T, secret string) []byte {
	t.Helper()
	k, err := stdwebhook.DecodeSecret(secret)
	if err != nil {
		t.Fatalf("DecodeSecret(%q) = %v", secret, err)
	}
	return k
}

func TestSignSpecVector(t *testing.T) {
	t.Parallel()
	got := stdwebhook.Sign([][]byte{key(t, vectorSecret)}, vectorID, vectorTimestamp, []byte(vectorBody))
	if got != vectorSignature {
		t.Fatalf("Sign(spec vector) = %s, want %s", got, vectorSignature)
	}
}

// Sign with several secrets (a rotation) makes one entry per secret, and a
// receiver that knows any one of them accepts the message.
func TestSignRotation(t *testing.T) {
	t.Parallel()
	oldKey := []byte("old secret: 32 random bytes .....")
	newKey := []byte("new secret: 32 random bytes .....")
	other := []byte("a secret nobody configured ......")
	now := time.Unix(1700000000, 0)
	ts := stdwebhook.Timestamp(now)
	body := []byte(`{"text":"hi"}`)
	header := stdwebhook.Sign([][]byte{oldKey, newKey}, "msg_1", ts, body)
	if n := len(strings.Fields(header)); n != 2 {
		t.Fatalf("Sign(two keys) = %q: %d entries, want 2", header, n)
	}
	for _, tc := range []struct {
		name string
		keys [][]byte
		want int
		err  error
	}{
		{"old only", [][]byte{oldKey}, 0, nil},
		{"new only", [][]byte{newKey}, 0, nil},
		{"other, then new", [][]byte{other, newKey}, 1, nil},
		{"other only", [][]byte{other}, -1, stdwebhook.ErrBadSignature},
	} {
		got, err := stdwebhook.Verify(tc.keys, "msg_1", ts, header, body, now, 5*time.Minute)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: Verify = %d, %v; want %d, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// Verify agrees with an HMAC written here from the spec text, and rejects
// any change to what is signed.
func TestVerify(t *testing.T) {
	t.Parallel()
	k := key(t, vectorSecret)
	now := time.Unix(1614265330, 0)
	body := []byte(vectorBody)
	specMAC := func(id, ts string, body []byte) string {
		m := hmac.New(sha256.New, k)
		m.Write([]byte(id + "." + ts + "." + string(body)))
		return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	if got := specMAC(vectorID, vectorTimestamp, body); got != vectorSignature {
		t.Fatalf("the spec's HMAC of the vector = %s, want %s", got, vectorSignature)
	}
	for _, tc := range []struct {
		name, id, ts, sigs string
		body               []byte
		now                time.Time
		want               error
	}{
		{"vector", vectorID, vectorTimestamp, vectorSignature, body, now, nil},
		{"among unknown versions", vectorID, vectorTimestamp, "v1a,abc v2,xyz " + vectorSignature, body, now, nil},
		{"4m59s later", vectorID, vectorTimestamp, vectorSignature, body, now.Add(4*time.Minute + 59*time.Second), nil},
		{"5m1s later", vectorID, vectorTimestamp, vectorSignature, body, now.Add(5*time.Minute + time.Second), stdwebhook.ErrStale},
		{"5m1s earlier", vectorID, vectorTimestamp, vectorSignature, body, now.Add(-5*time.Minute - time.Second), stdwebhook.ErrStale},
		{"body changed", vectorID, vectorTimestamp, vectorSignature, []byte(`{"test": 2432232315}`), now, stdwebhook.ErrBadSignature},
		{"id changed", "msg_p5jXN8AQM9LWM0D4loKWxJeK", vectorTimestamp, vectorSignature, body, now, stdwebhook.ErrBadSignature},
		{"timestamp changed", vectorID, "1614265331", vectorSignature, body, now, stdwebhook.ErrBadSignature},
		{"only v1a", vectorID, vectorTimestamp, strings.Replace(vectorSignature, "v1,", "v1a,", 1), body, now, stdwebhook.ErrNoSignature},
		{"id with a dot", "msg.1", vectorTimestamp, vectorSignature, body, now, stdwebhook.ErrBadID},
		{"signed timestamp", vectorID, "+1614265330", vectorSignature, body, now, stdwebhook.ErrBadTimestamp},
		{"too many entries", vectorID, vectorTimestamp, strings.Repeat("v2,x ", stdwebhook.MaxSignatures) + vectorSignature, body, now, stdwebhook.ErrNoSignature},
	} {
		_, err := stdwebhook.Verify([][]byte{k}, tc.id, tc.ts, tc.sigs, tc.body, tc.now, 5*time.Minute)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestDecodeSecret(t *testing.T) {
	t.Parallel()
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "want whsec_"},
		{"whsec_!!!", "not standard base64"},
		{short, "5 bytes is too short"},
	} {
		_, err := stdwebhook.DecodeSecret(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeSecret(%q) = %v, want an error with %q", tc.in, err, tc.want)
		}
		if err != nil && tc.in != "" && strings.Contains(err.Error(), strings.TrimPrefix(tc.in, "whsec_")) {
			t.Errorf("DecodeSecret(%q) = %v, which quotes the secret", tc.in, err)
		}
	}
}

func TestValidID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"msg_1": true, "0195f3a0-7d2c-7e51": true, "": false, "a.b": false, "a b": false, "a\x00": false,
		strings.Repeat("x", stdwebhook.MaxIDLen): true, strings.Repeat("x", stdwebhook.MaxIDLen+1): false,
	} {
		if got := stdwebhook.ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}
