package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// swSigner signs requests the way a Standard Webhooks sender does. It is
// written from the specification text (standard-webhooks spec, "Signature
// scheme" and "Webhook headers"), independently of the package's verifier:
//
//   - the signed content is "{msg_id}.{timestamp}.{payload}";
//   - the algorithm is HMAC-SHA256 keyed with the base64-decoded part of the
//     "whsec_" secret;
//   - webhook-signature is a space-delimited list of "v1,<base64 signature>";
//   - webhook-timestamp is integer Unix seconds.
type swSigner struct{ secrets []string }

func (s swSigner) signature(secret, id string, ts int64, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic("test secret is not base64: " + err.Error())
	}
	content := id + "." + strconv.FormatInt(ts, 10) + "." + string(body)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(content))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// headers returns the three headers, with one signature per secret.
func (s swSigner) headers(id string, at time.Time, body []byte) http.Header {
	sigs := make([]string, 0, len(s.secrets))
	for _, sec := range s.secrets {
		sigs = append(sigs, s.signature(sec, id, at.Unix(), body))
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("webhook-signature", strings.Join(sigs, " "))
	return h
}

// The test vector of the Standard Webhooks reference libraries
// (libraries/go/webhook_test.go, TestWebhookSign) proves the signer.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignerMatchesSpecVector(t *testing.T) {
	t.Parallel()
	got := swSigner{}.signature(vectorSecret, vectorID, vectorTimestamp, []byte(vectorBody))
	if got != vectorSignature {
		t.Fatalf("signature(spec vector) = %s, want %s", got, vectorSignature)
	}
}
