package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/webhook"
	"github.com/agentwork/agentwork/connectors/webhook/webhookfake"
	"github.com/agentwork/agentwork/internal/stdwebhook"
)

var (
	secretOld = "whsec_" + base64.StdEncoding.EncodeToString([]byte("old secret: 32 random bytes ....."))
	secretNew = "whsec_" + base64.StdEncoding.EncodeToString([]byte("new secret: 32 random bytes ....."))
	secretBad = "whsec_" + base64.StdEncoding.EncodeToString([]byte("a secret nobody configured ......"))
)

// urlToken is a token in the receiver's URL, as Slack-style hooks have.
const urlToken = "tok-9f8e7d6c5b4a39281706"

func newConnector(t *testing.T, opts webhook.Options) *webhook.Connector {
	t.Helper()
	c, err := webhook.New("hook", opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func TestConformance(t *testing.T) {
	t.Parallel()
	connectortest.Run(t, connectortest.Harness{
		New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
			srv := webhookfake.New(t, webhookfake.Options{Secrets: []string{secretNew}})
			return newConnector(t, webhook.Options{URL: srv.URL + "?token=" + urlToken, Secrets: []string{secretNew}}), srv
		},
		Secret:  urlToken,
		Secrets: []string{secretNew, strings.TrimPrefix(secretNew, "whsec_")},
		Features: connectortest.Features{
			Concurrent: true, MessageIDs: true, KeepsID: true,
			Outages: true, RateLimits: true, AuthErrors: true, BadRequests: true, Stalls: true,
		},
	})
}

// The request as a receiver sees it: the CloudEvent of the notification,
// the webhook-* headers, a signature a verifier written from the spec
// accepts.
func TestRequest(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 9, 0, 5, 0, time.UTC)
	type seen struct {
		header http.Header
		body   []byte
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := r.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- seen{r.Header.Clone(), []byte(b.String())}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	c := newConnector(t, webhook.Options{
		URL: srv.URL + "/hooks/" + urlToken, Secrets: []string{secretOld, secretNew},
		Headers: map[string]string{"Authorization": "Bearer hdr-secret-123"},
		Now:     func() time.Time { return now },
	})
	n := connectortest.Notification("Disk <b>/var</b> is 95% full")
	n.Urgency, n.Truncated, n.Metadata = "important", true, map[string]string{"host": "db1"}
	rec, err := c.Send(t.Context(), n)
	if err != nil {
		t.Fatalf("Send = %v", err)
	}
	if rec.Parts != 1 || len(rec.MessageIDs) != 1 || rec.MessageIDs[0] != n.ID {
		t.Errorf("Receipt = %+v, want one part with the notification id", rec)
	}
	s := <-got
	h := s.header
	wantID := strings.ReplaceAll(n.ID, ".", "%2E")
	for k, want := range map[string]string{
		"Content-Type":      "application/json",
		"Authorization":     "Bearer hdr-secret-123",
		"webhook-id":        wantID,
		"webhook-timestamp": strconv.FormatInt(now.Unix(), 10),
	} {
		if h.Get(k) != want {
			t.Errorf("header %s = %q, want %q", k, h.Get(k), want)
		}
	}
	// The signature, checked from the spec's text: HMAC-SHA256 keyed with
	// the base64-decoded secret over "<id>.<timestamp>.<body>", one
	// "v1,<base64>" entry per secret, space-separated.
	sigs := strings.Fields(h.Get("webhook-signature"))
	if len(sigs) != 2 {
		t.Fatalf("webhook-signature = %q, want two entries (two secrets)", h.Get("webhook-signature"))
	}
	for i, sec := range []string{secretOld, secretNew} {
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, "whsec_"))
		m := hmac.New(sha256.New, key)
		m.Write([]byte(wantID + "." + h.Get("webhook-timestamp") + "." + string(s.body)))
		if want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)); sigs[i] != want {
			t.Errorf("signature %d = %s, want %s", i, sigs[i], want)
		}
	}
	var ev struct {
		SpecVersion, ID, Source, Type, Subject, DataContentType string
		RunID                                                   string `json:"runid"`
		CausationID                                             string `json:"causationid"`
		Time                                                    time.Time
		Data                                                    webhook.Payload
	}
	if err := json.Unmarshal(s.body, &ev); err != nil {
		t.Fatalf("body %s: %v", s.body, err)
	}
	want := webhook.Payload{
		ID: n.ID, RunID: n.RunID, RequestID: n.RequestID, Source: "heartbeat", Name: "default",
		Text: n.Text, Urgency: "important", Truncated: true, Target: "conformance", Time: n.Time,
		Metadata: map[string]string{"host": "db1"},
	}
	if ev.SpecVersion != "1.0" || ev.ID != n.ID || ev.Source != "agentwork/connectors/hook" || ev.Type != "agentwork.heartbeat.notification" ||
		ev.Subject != "default" || ev.RunID != n.RunID || ev.CausationID != n.RequestID || !ev.Time.Equal(n.Time) {
		t.Errorf("envelope = %+v", ev)
	}
	if ev.Data.Text != want.Text || ev.Data.ID != want.ID || ev.Data.Urgency != want.Urgency || !ev.Data.Truncated ||
		ev.Data.Target != want.Target || ev.Data.Metadata["host"] != "db1" || !ev.Data.Time.Equal(want.Time) || ev.Data.RequestID != want.RequestID {
		t.Errorf("data = %+v, want %+v", ev.Data, want)
	}
}

// A receiver that knows either secret of a rotation accepts; one that
// knows neither answers 401, a permanent error.
func TestRotation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		receiver  []string
		permanent bool
	}{
		{"receiver has the old secret", []string{secretOld}, false},
		{"receiver has the new secret", []string{secretNew}, false},
		{"receiver has another secret", []string{secretBad}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := webhookfake.New(t, webhookfake.Options{Secrets: tc.receiver})
			c := newConnector(t, webhook.Options{URL: srv.URL, Secrets: []string{secretOld, secretNew}})
			_, err := c.Send(t.Context(), connectortest.Notification("x"))
			if tc.permanent != (err != nil) || (err != nil && !connectors.IsPermanent(err)) {
				t.Fatalf("Send = %v, want permanent %v", err, tc.permanent)
			}
			if err != nil {
				for _, s := range []string{secretOld, secretNew, strings.TrimPrefix(secretNew, "whsec_")} {
					if strings.Contains(err.Error(), s) {
						t.Errorf("Send = %v, which quotes a secret", err)
					}
				}
			}
		})
	}
}

// A retried notification carries the same webhook-id, so the receiver
// keeps it once; a send after a crash (the same notification again) is a
// duplicate the receiver drops.
func TestIdempotency(t *testing.T) {
	t.Parallel()
	srv := webhookfake.New(t, webhookfake.Options{Secrets: []string{secretNew}})
	c := newConnector(t, webhook.Options{URL: srv.URL, Secrets: []string{secretNew}})
	n := connectortest.Notification("once")
	srv.FailNext(1, connectortest.Unavailable)
	if _, err := c.Send(t.Context(), n); err == nil || connectors.IsPermanent(err) {
		t.Fatalf("Send during a 500 = %v, want retryable", err)
	}
	for i := range 2 {
		if _, err := c.Send(t.Context(), n); err != nil {
			t.Fatalf("Send %d = %v", i+2, err)
		}
	}
	attempts := srv.Attempts()
	if len(attempts) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(attempts))
	}
	for i, a := range attempts {
		if a.ID != attempts[0].ID || a.ID == "" {
			t.Errorf("attempt %d webhook-id = %q, want %q on every attempt", i, a.ID, attempts[0].ID)
		}
	}
	if got := len(srv.Events()); got != 1 || srv.Duplicates() != 1 {
		t.Errorf("receiver kept %d events and saw %d duplicates, want 1 and 1", got, srv.Duplicates())
	}
	// A split notification never is: SentParts 1 means delivered.
	n.SentParts = 1
	if rec, err := c.Send(t.Context(), n); err != nil || rec.Parts != 1 {
		t.Errorf("Send(SentParts 1) = %+v, %v; want 1 part, nothing sent", rec, err)
	}
	if got := len(srv.Attempts()); got != 3 {
		t.Errorf("Send(SentParts 1) made a request")
	}
}

func TestID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"0195f3a0-7d2c.ops":      "0195f3a0-7d2c%2Eops",
		"run.alert.ops-1a2b3c":   "run%2Ealert%2Eops-1a2b3c",
		"a%2Eb":                  "a%252Eb",
		"a b\x00é":               "a%20b%00%C3%A9",
		strings.Repeat("x", 256): strings.Repeat("x", 256),
	} {
		if got := webhook.ID(in); got != want {
			t.Errorf("ID(%q) = %q, want %q", in, got, want)
		}
	}
	if got := webhook.ID(strings.Repeat("x", 257)); !strings.HasPrefix(got, "sha256-") || len(got) != 7+64 {
		t.Errorf("ID(257 x) = %q, want sha256-<hex>", got)
	}
	if webhook.ID("a.b") == webhook.ID("a%2Eb") {
		t.Error("ID maps two ids to one")
	}
}

// Every answer maps to retryable or permanent; no error quotes the URL's
// path or query, a header value or a secret.
func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status     int
		retryAfter time.Duration
		permanent  bool
		says       string
	}{
		{http.StatusInternalServerError, 0, false, "500"},
		{http.StatusBadGateway, 0, false, "502"},
		{http.StatusServiceUnavailable, 120 * time.Second, false, "503"},
		{http.StatusTooManyRequests, 7 * time.Second, false, "429"},
		{http.StatusTooManyRequests, 0, false, "429"},
		{http.StatusRequestTimeout, 0, false, "408"},
		{http.StatusGone, 0, true, "endpoint is gone"},
		{http.StatusUnauthorized, 0, true, "secrets"},
		{http.StatusForbidden, 0, true, "secrets"},
		{http.StatusBadRequest, 0, true, "400"},
		{http.StatusNotFound, 0, true, "404"},
		{http.StatusRequestEntityTooLarge, 0, true, "413"},
		{http.StatusFound, 0, true, "follow no redirects"},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			srv := webhookfake.New(t, webhookfake.Options{})
			srv.RespondNext(tc.status, tc.retryAfter)
			c := newConnector(t, webhook.Options{URL: srv.URL + "?key=" + urlToken, Headers: map[string]string{"X-Api-Key": "hdr-secret-123"}})
			_, err := c.Send(t.Context(), connectortest.Notification("x"))
			if err == nil {
				t.Fatal("Send = nil, want an error")
			}
			if got := connectors.IsPermanent(err); got != tc.permanent {
				t.Errorf("Send = %v: permanent %v, want %v", err, got, tc.permanent)
			}
			if got := connectors.RetryAfter(err); got != tc.retryAfter {
				t.Errorf("Send = %v: retry after %s, want %s", err, got, tc.retryAfter)
			}
			if !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "http://127.0.0.1:") {
				t.Errorf("Send = %v, want it to name the host and say %q", err, tc.says)
			}
			for _, s := range []string{urlToken, "hdr-secret-123", "/hook"} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("Send = %v, which quotes %q", err, s)
				}
			}
		})
	}
}

// An answer that echoes the URL (token and all) is redacted.
func TestErrorBodyRedacted(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no route for "+r.URL.String()+" with "+r.Header.Get("X-Api-Key"), http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	c := newConnector(t, webhook.Options{URL: srv.URL + "/hooks/" + urlToken, Headers: map[string]string{"X-Api-Key": "hdr-secret-123"}})
	_, err := c.Send(t.Context(), connectortest.Notification("x"))
	if err == nil || strings.Contains(err.Error(), urlToken) || strings.Contains(err.Error(), "hdr-secret-123") || !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("Send = %v, want the echoed token and header redacted", err)
	}
}

// A receiver that quotes the credential of an Authorization header
// without its scheme does not get it into the error.
func TestBearerTokenRedacted(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		http.Error(w, `{"error":"token `+tok+` is expired"}`, http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	c := newConnector(t, webhook.Options{URL: srv.URL + "/hook", Headers: map[string]string{"Authorization": "Bearer hooktoken-SECRET-42"}})
	_, err := c.Send(t.Context(), connectortest.Notification("x"))
	if err == nil || strings.Contains(err.Error(), "hooktoken-SECRET-42") {
		t.Fatalf("Send = %v, want the quoted bearer token redacted", err)
	}
}

// A credential of secret.Min bytes is a secret too: quoted without its
// scheme, it is redacted.
func TestShortBearerTokenRedacted(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		http.Error(w, `{"error":"token `+tok+` is expired"}`, http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	c := newConnector(t, webhook.Options{URL: srv.URL + "/hook", Headers: map[string]string{"Authorization": "Bearer hunter2"}})
	_, err := c.Send(t.Context(), connectortest.Notification("x"))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("Send = %v, want the quoted bearer token redacted", err)
	}
}

// A receiver that is down is retryable, and the error names scheme and
// host alone.
func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	c := newConnector(t, webhook.Options{URL: u + "/hooks/" + urlToken})
	_, err := c.Send(t.Context(), connectortest.Notification("x"))
	if err == nil || connectors.IsPermanent(err) || strings.Contains(err.Error(), urlToken) {
		t.Fatalf("Send to a closed port = %v, want a retryable error without the token", err)
	}
}

// Link-local, metadata and private addresses are refused before any
// connection; allow_private lifts it; loopback is allowed.
func TestPrivateAddresses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, says string
	}{
		{"http://169.254.169.254/latest/meta-data/", "cloud metadata"},
		{"http://[fd00:ec2::254]/latest/", "cloud metadata"},
		{"http://metadata.google.internal/computeMetadata/v1/", "cloud metadata"},
		{"http://METADATA.google.internal./x", "cloud metadata"},
		{"http://169.254.10.1/", "link-local"},
		{"http://[fe80::1]/", "link-local"},
		{"http://10.1.2.3/", "private"},
		{"http://192.168.1.5:8123/api/webhook/x", "private"},
		{"http://172.16.0.1/", "private"},
		{"http://100.64.1.1/", "private"},
		{"http://[fd12:3456::1]/", "private"},
		{"http://[::ffff:169.254.169.254]/", "cloud metadata"},
		{"http://[64:ff9b::a9fe:a9fe]/", "cloud metadata"},
		{"http://0.0.0.0:8080/", "unspecified"},
	} {
		err := webhook.Config{URL: tc.url}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "allow_private") {
			t.Errorf("Validate(url %s) = %v, want a refusal saying %q and allow_private", tc.url, err, tc.says)
		}
		if err := (webhook.Config{URL: tc.url, AllowPrivate: true}).Validate(); err != nil {
			t.Errorf("Validate(url %s, allow_private) = %v, want nil", tc.url, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:8080/hook", "http://localhost:8080/hook", "http://[::1]/", "https://example.com/hook"} {
		if err := (webhook.Config{URL: u}).Validate(); err != nil {
			t.Errorf("Validate(url %s) = %v, want nil", u, err)
		}
	}
}

func TestType(t *testing.T) {
	t.Parallel()
	srv := webhookfake.New(t, webhookfake.Options{Secrets: []string{secretNew}})
	types := connectors.Types{webhook.Type}
	src := "hook: {type: webhook, url: '" + srv.URL + "', secrets: ['" + secretNew + "'], headers: {X-Team: ops}}"
	cs := connectortest.Decode(t, types, src)
	if err := connectors.CheckDestination(cs["hook"], "elsewhere"); err == nil {
		t.Error("CheckDestination(elsewhere) = nil; a webhook target names no destination")
	}
	c, err := types.Build("hook", cs["hook"], connectors.BuildDeps{})
	if err != nil {
		t.Fatalf("Build = %v", err)
	}
	if _, err := c.Send(t.Context(), connectortest.Notification("hello")); err != nil {
		t.Fatalf("Send = %v", err)
	}
	evs := srv.Events()
	if len(evs) != 1 || evs[0].Source != "agentwork/connectors/hook" || srv.Attempts()[0].Header.Get("X-Team") != "ops" {
		t.Errorf("receiver got %+v, want one event from agentwork/connectors/hook with X-Team", evs)
	}
}

// The fake, scripted for end-to-end tests: fail for ever, recover, rate
// limit with Retry-After.
func TestFakeScript(t *testing.T) {
	t.Parallel()
	srv := webhookfake.New(t, webhookfake.Options{Secrets: []string{secretNew}})
	c := newConnector(t, webhook.Options{URL: srv.URL, Secrets: []string{secretNew}})
	send := func(id string) error {
		n := connectortest.Notification(id)
		n.ID += "." + id
		_, err := c.Send(t.Context(), n)
		return err
	}
	srv.Fail(connectortest.Unavailable)
	for i := range 3 {
		if err := send(strconv.Itoa(i)); err == nil || connectors.IsPermanent(err) {
			t.Fatalf("Fail(unavailable): send = %v, want retryable", err)
		}
	}
	srv.Recover()
	if err := send("a"); err != nil {
		t.Fatalf("after Recover: send = %v", err)
	}
	srv.RateLimit(1, 3*time.Second)
	if err := send("b"); connectors.RetryAfter(err) != 3*time.Second {
		t.Fatalf("FailNext(rate limited 3s): send = %v, want retry after 3s", err)
	}
	if err := send("b"); err != nil {
		t.Fatalf("after the rate limit: send = %v", err)
	}
	if got := len(srv.Events()); got != 2 {
		t.Errorf("receiver kept %d events, want 2", got)
	}
}

// FuzzID: every notification id makes a valid webhook-id that reads back
// as the id (%XX undone), unless it is too long and hashed.
func FuzzID(f *testing.F) {
	for _, s := range []string{"0195f3a0-7d2c.ops", "a%2Eb", "é .", strings.Repeat(".", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		got := webhook.ID(id)
		if !stdwebhook.ValidID(got) {
			t.Fatalf("ID(%q) = %q, not a valid webhook-id", id, got)
		}
		if strings.HasPrefix(got, "sha256-") && (len(id) > 85 || id == "") {
			return
		}
		back, err := url.PathUnescape(got)
		if err != nil || back != id {
			t.Fatalf("ID(%q) = %q, which reads back as %q (%v)", id, got, back, err)
		}
	})
}
