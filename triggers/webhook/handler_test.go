package webhook_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers/webhook"
)

// now is the handler's clock in these tests.
var now = time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)

var (
	oldSecret   = "whsec_" + base64.StdEncoding.EncodeToString([]byte("old secret: 32 random bytes ....."))
	newSecret   = "whsec_" + base64.StdEncoding.EncodeToString([]byte("new secret: 32 random bytes ....."))
	otherSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("a secret nobody configured ......"))
)

const (
	tokCI     = "ci-token-0123456789abcdef"
	tokDeploy = "deploy-token-0123456789abc"
	tokAny    = "any-token-0123456789abcdef"
)

func testConfig() webhook.Config {
	return webhook.Config{
		Tokens: []webhook.Token{
			{Name: "ci", Token: tokCI}, // default grant: source task, any name
			{Name: "deploy", Token: tokDeploy, Grant: webhook.Grant{Sources: []string{"deploy"}, Names: []string{"release-*", "rollback"}}},
			{Name: "any", Token: tokAny, Grant: webhook.Grant{Sources: []string{"*"}}},
		},
		Secrets: []webhook.Secret{
			{Name: "old", Secret: oldSecret},
			{Name: "new", Secret: newSecret},
		},
	}
}

// fixture is a handler on a real embedded bus behind a real HTTP server,
// and a core subscription that sees every publish on the request subjects
// (also those JetStream drops as duplicates).
type fixture struct {
	b    *bus.Bus
	url  string
	sub  *nats.Subscription
	http *http.Client
}

func newFixture(t *testing.T, cfg webhook.Config, opts ...webhook.Option) *fixture {
	t.Helper()
	b := bustest.New(t)
	h, err := webhook.New(b, cfg, append([]webhook.Option{webhook.WithClock(func() time.Time { return now })}, opts...)...)
	if err != nil {
		t.Fatalf("webhook.New: %v", err)
	}
	sub, err := b.Conn().SubscribeSync(b.Subjects.Requests())
	if err != nil {
		t.Fatal(err)
	}
	// Before the bus closes: a drain would wait for these unread messages.
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{b: b, url: srv.URL, sub: sub, http: srv.Client()}
}

type call struct {
	method string
	body   string
	header http.Header
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) problem(t *testing.T) problem.Details {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type = %q, want %q (body %s)", ct, problem.ContentType, r.body)
	}
	var d problem.Details
	if err := json.Unmarshal(r.body, &d); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if d.Status != r.status || d.Title == "" || d.Type == "" {
		t.Fatalf("problem %+v: want status %d, a title and a type", d, r.status)
	}
	return d
}

func (r reply) accepted(t *testing.T) webhook.Accepted {
	t.Helper()
	if r.status != http.StatusAccepted {
		t.Fatalf("status = %d, want 202; body %s", r.status, r.body)
	}
	var a webhook.Accepted
	if err := json.Unmarshal(r.body, &a); err != nil || a.ID == "" {
		t.Fatalf("202 body %s: want {\"id\": ...} (%v)", r.body, err)
	}
	return a
}

func (f *fixture) do(t *testing.T, c call) reply {
	t.Helper()
	if c.method == "" {
		c.method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(t.Context(), c.method, f.url+"/v1/tasks", strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.header.Get("Content-Type") == "" && c.header["Content-Type"] == nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	resp, err := f.http.Do(req)
	if err != nil {
		t.Fatalf("%s /v1/tasks: %v", c.method, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: body}
}

// published is how many publishes reached the request subjects so far.
func (f *fixture) published(t *testing.T) int {
	t.Helper()
	if err := f.b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	n, _, err := f.sub.Pending()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// stored returns the requests JetStream stored, in order.
func stored(t *testing.T, b *bus.Bus) []storedRequest {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), bus.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []storedRequest
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("GetMsg(%d): %v", seq, err)
		}
		ev, req, err := agentwork.DecodeRequest(b, m.Subject, m.Data)
		if err != nil {
			t.Fatalf("stored request %d: %v", seq, err)
		}
		out = append(out, storedRequest{Subject: m.Subject, MsgID: m.Header.Get(jetstream.MsgIDHeader), Event: ev, Request: req})
	}
	return out
}

type storedRequest struct {
	Subject string
	MsgID   string
	Event   bus.Event
	Request agentwork.Request
}

func bearer(tok string) http.Header {
	return http.Header{"Authorization": {"Bearer " + tok}}
}

func signedBy(id string, at time.Time, body string, secrets ...string) http.Header {
	return swSigner{secrets: secrets}.headers(id, at, []byte(body))
}

func merge(hs ...http.Header) http.Header {
	out := http.Header{}
	for _, h := range hs {
		for k, v := range h {
			out[k] = append(out[k], v...)
		}
	}
	return out
}

func TestAcceptedBearer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	body := `{"prompt":"summarise the sales data","name":"sales-report","targets":["telegram"],"deliver":"notify","metadata":{"ticket":"OPS-1"}}`
	acc := f.do(t, call{body: body, header: bearer(tokCI)}).accepted(t)
	if acc.Duplicate {
		t.Errorf("first request: duplicate = true, want false")
	}
	got := stored(t, f.b)
	if len(got) != 1 {
		t.Fatalf("stored %d requests, want 1", len(got))
	}
	r := got[0]
	if r.Event.ID != acc.ID {
		t.Errorf("stored request id = %s, want the 202's id %s", r.Event.ID, acc.ID)
	}
	if want := "agentwork.request.task.sales-report"; r.Subject != want {
		t.Errorf("subject = %s, want %s", r.Subject, want)
	}
	if r.Event.Source != "agentwork/webhook/ci" || r.Event.Type != "agentwork.task.requested" {
		t.Errorf("envelope source/type = %s/%s, want agentwork/webhook/ci, agentwork.task.requested", r.Event.Source, r.Event.Type)
	}
	want := agentwork.Request{ID: acc.ID, Source: "task", Name: "sales-report", Prompt: "summarise the sales data",
		Targets: []string{"telegram"}, Deliver: "notify", Metadata: map[string]string{"ticket": "OPS-1"}, Credential: "ci"}
	if fmt.Sprint(r.Request) != fmt.Sprint(want) {
		t.Errorf("stored request = %+v, want %+v", r.Request, want)
	}
}

func TestAcceptedDefaults(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	r := f.do(t, call{body: `{"prompt":"hi"}`, header: bearer(tokCI)})
	acc := r.accepted(t)
	got := stored(t, f.b)
	if len(got) != 1 || got[0].Subject != "agentwork.request.task.default" || got[0].Event.ID != acc.ID {
		t.Fatalf("stored = %+v, want one request on agentwork.request.task.default with id %s", got, acc.ID)
	}
	// Without a key of the caller's, one is made and answered: the request
	// id after "aw-", and the Nats-Msg-Id follows from it as from any key.
	key := r.header.Get("Idempotency-Key")
	sum := sha256.Sum256([]byte(key))
	if key != "aw-"+acc.ID || got[0].MsgID != "webhook."+hex.EncodeToString(sum[:]) {
		t.Errorf("answered key %q, Nats-Msg-Id %q; want aw-%s and the key's digest", key, got[0].MsgID, acc.ID)
	}
	// The same body with that key is the same request, queued once.
	again := f.do(t, call{body: `{"prompt":"hi"}`, header: http.Header{"Authorization": {"Bearer " + tokCI}, "Idempotency-Key": {key}}}).accepted(t)
	if again.ID != acc.ID || !again.Duplicate || len(stored(t, f.b)) != 1 {
		t.Errorf("retry with the answered key = %+v, stored %d; want id %s, duplicate, still 1", again, len(stored(t, f.b)), acc.ID)
	}
}

// Signatures from the independent signer; rotation: old, new, and both.
func TestAcceptedSigned(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	body := `{"prompt":"check the backups"}`
	tests := []struct {
		name    string
		secrets []string
		at      time.Time
	}{
		{"old secret", []string{oldSecret}, now},
		{"new secret", []string{newSecret}, now},
		{"old and new", []string{oldSecret, newSecret}, now},
		{"unknown and new", []string{otherSecret, newSecret}, now},
		{"4m59s old", []string{newSecret}, now.Add(-4*time.Minute - 59*time.Second)},
		{"4m59s ahead", []string{newSecret}, now.Add(4*time.Minute + 59*time.Second)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := fmt.Sprintf("msg_rotation_%d", i)
			f.do(t, call{body: body, header: signedBy(id, tt.at, body, tt.secrets...)}).accepted(t)
		})
	}
}

func TestSvixHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	body := `{"prompt":"from svix"}`
	h := http.Header{}
	for k, v := range signedBy("msg_svix", now, body, newSecret) {
		h["Svix-"+strings.TrimPrefix(k, "Webhook-")] = v
	}
	f.do(t, call{body: body, header: h}).accepted(t)
}

// Replays of a signed request (same headers, or re-signed later with the
// same webhook-id) get the same id and publish nothing more.
func TestReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	body := `{"prompt":"rotate the logs","name":"logs"}`
	first := f.do(t, call{body: body, header: signedBy("msg_replay", now, body, newSecret)}).accepted(t)
	for i, h := range []http.Header{
		signedBy("msg_replay", now, body, newSecret),                         // captured and replayed
		signedBy("msg_replay", now.Add(2*time.Minute), body, oldSecret),      // the sender's retry, other secret
		merge(bearer(tokCI), http.Header{"Idempotency-Key": {"msg_replay"}}), // same key by bearer
	} {
		again := f.do(t, call{body: body, header: h}).accepted(t)
		if again.ID != first.ID || !again.Duplicate {
			t.Errorf("replay %d = %+v, want id %s and duplicate", i, again, first.ID)
		}
	}
	if n := f.published(t); n != 1 {
		t.Errorf("publishes = %d, want 1 (replays must not publish, so they hold beyond the stream's duplicate window)", n)
	}
	if got := stored(t, f.b); len(got) != 1 || got[0].MsgID == "" {
		t.Fatalf("stored = %+v, want one request with a Nats-Msg-Id", got)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	key := http.Header{"Idempotency-Key": {`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}}
	first := f.do(t, call{body: `{"prompt":"a"}`, header: merge(bearer(tokCI), key)}).accepted(t)
	// Same work in another spelling: same request.
	again := f.do(t, call{body: "{ \"name\": \"default\",\n \"prompt\": \"a\" }", header: merge(bearer(tokCI), key)}).accepted(t)
	if again.ID != first.ID || !again.Duplicate {
		t.Errorf("same key, equivalent body = %+v, want id %s, duplicate", again, first.ID)
	}
	r := f.do(t, call{body: `{"prompt":"b"}`, header: merge(bearer(tokCI), key)})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("same key, other body: status %d, want 422; body %s", r.status, r.body)
	}
	if d := r.problem(t); d.Type != problem.TypeIdempotencyConflict {
		t.Errorf("problem type = %s, want %s", d.Type, problem.TypeIdempotencyConflict)
	}
	// A different key is different work.
	other := f.do(t, call{body: `{"prompt":"b"}`, header: merge(bearer(tokCI), http.Header{"Idempotency-Key": {"k2"}})}).accepted(t)
	if other.ID == first.ID {
		t.Errorf("another key got the same id %s", other.ID)
	}
	if n := f.published(t); n != 2 {
		t.Errorf("publishes = %d, want 2", n)
	}
}

// Concurrent requests with one key: one id, one stored request.
func TestIdempotencyConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	body := `{"prompt":"once"}`
	const n = 8
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := f.do(t, call{body: body, header: merge(bearer(tokCI), http.Header{"Idempotency-Key": {"same"}})})
			if r.status == http.StatusAccepted {
				var a webhook.Accepted
				_ = json.Unmarshal(r.body, &a)
				ids[i] = a.ID
			} else {
				t.Errorf("request %d: status %d, want 202; %s", i, r.status, r.body)
			}
		})
	}
	wg.Wait()
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("ids = %v, want all equal", ids)
		}
	}
	if got := stored(t, f.b); len(got) != 1 || got[0].Event.ID != ids[0] {
		t.Fatalf("stored %d requests, want 1 with id %s", len(got), ids[0])
	}
}

// Every refusal: its status, its problem, and nothing published.
func TestRejected(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), webhook.WithConnectors("telegram", "slack"))
	ok := `{"prompt":"x"}`
	big := `{"prompt":"` + strings.Repeat("a", webhook.DefaultMaxBody) + `"}`
	tests := []struct {
		name   string
		c      call
		status int
		field  string // for 400: a field the problem must name
		detail string // a substring of the detail
	}{
		{"GET", call{method: http.MethodGet, header: bearer(tokCI)}, 405, "", "POST"},
		{"no credentials", call{body: ok}, 401, "", "missing credentials"},
		{"wrong token", call{body: ok, header: bearer("not-the-token-0123456789")}, 401, "", "not valid"},
		{"basic auth", call{body: ok, header: http.Header{"Authorization": {"Basic Y2k6dG9rZW4="}}}, 401, "", "Bearer"},
		{"unknown secret", call{body: ok, header: signedBy("m1", now, ok, otherSecret)}, 401, "", "no signature matches"},
		{"signature of another body", call{body: ok, header: signedBy("m2", now, `{"prompt":"y"}`, newSecret)}, 401, "", "no signature matches"},
		{"stale timestamp", call{body: ok, header: signedBy("m3", now.Add(-5*time.Minute-time.Second), ok, newSecret)}, 401, "", "tolerance"},
		{"future timestamp", call{body: ok, header: signedBy("m4", now.Add(5*time.Minute+time.Second), ok, newSecret)}, 401, "", "tolerance"},
		{"missing webhook-id", call{body: ok, header: func() http.Header {
			h := signedBy("m5", now, ok, newSecret)
			h.Del("webhook-id")
			return h
		}()}, 401, "", "webhook-id"},
		{"v1a only", call{body: ok, header: func() http.Header {
			h := signedBy("m6", now, ok, newSecret)
			h.Set("webhook-signature", strings.Replace(h.Get("webhook-signature"), "v1,", "v1a,", 1))
			return h
		}()}, 401, "", "no v1 signature"},
		{"text/plain", call{body: ok, header: merge(bearer(tokCI), http.Header{"Content-Type": {"text/plain"}})}, 415, "", "not JSON"},
		{"form", call{body: "prompt=x", header: merge(bearer(tokCI), http.Header{"Content-Type": {"application/x-www-form-urlencoded"}})}, 415, "", "not JSON"},
		{"latin1", call{body: ok, header: merge(bearer(tokCI), http.Header{"Content-Type": {"application/json; charset=iso-8859-1"}})}, 415, "", "UTF-8"},
		{"oversize", call{body: big, header: bearer(tokCI)}, 413, "", "larger than 262144"},
		{"malformed JSON", call{body: `{"prompt":`, header: bearer(tokCI)}, 400, "", "not a JSON object"},
		{"array", call{body: `["prompt"]`, header: bearer(tokCI)}, 400, "", "not a JSON object"},
		{"null", call{body: `null`, header: bearer(tokCI)}, 400, "", "null"},
		{"trailing data", call{body: ok + ok, header: bearer(tokCI)}, 400, "", "after the JSON object"},
		{"empty body", call{body: ``, header: bearer(tokCI)}, 400, "", "not a JSON object"},
		{"unknown field", call{body: `{"prompt":"x","promt":"y"}`, header: bearer(tokCI)}, 400, "promt", "unknown field"},
		{"field name case", call{body: `{"Prompt":"x"}`, header: bearer(tokCI)}, 400, "Prompt", "unknown field"},
		{"no prompt", call{body: `{"name":"x"}`, header: bearer(tokCI)}, 400, "prompt", "required"},
		{"typo and no prompt", call{body: `{"promt":"x"}`, header: bearer(tokCI)}, 400, "prompt", "promt: unknown field"},
		{"blank prompt", call{body: `{"prompt":" \n\t"}`, header: bearer(tokCI)}, 400, "prompt", "required"},
		{"prompt number", call{body: `{"prompt":42}`, header: bearer(tokCI)}, 400, "prompt", "string"},
		{"bad name", call{body: `{"prompt":"x","name":"Daily Report"}`, header: bearer(tokCI)}, 400, "name", "a-z"},
		{"name with dot", call{body: `{"prompt":"x","name":"a.b"}`, header: bearer(tokCI)}, 400, "name", "a-z"},
		{"bad source", call{body: `{"prompt":"x","source":"a>"}`, header: bearer(tokAny)}, 400, "source", "a-z"},
		{"bad deliver", call{body: `{"prompt":"x","deliver":"email"}`, header: bearer(tokCI)}, 400, "deliver", "reply, notify or none"},
		{"targets not array", call{body: `{"prompt":"x","targets":"slack"}`, header: bearer(tokCI)}, 400, "targets", "array"},
		{"unknown target", call{body: `{"prompt":"x","targets":["email"]}`, header: bearer(tokCI)}, 400, "targets[0]", "not a configured connector"},
		{"duplicate target", call{body: `{"prompt":"x","targets":["slack","slack"]}`, header: bearer(tokCI)}, 400, "targets[1]", "twice"},
		{"unknown target with a destination", call{body: `{"prompt":"x","targets":["email:ops@example.com"]}`, header: bearer(tokCI)}, 400, "targets[0]", `"email" is not a configured connector`},
		{"empty destination", call{body: `{"prompt":"x","targets":["slack:"]}`, header: bearer(tokCI)}, 400, "targets[0]", "destination after ':' is empty"},
		{"metadata number", call{body: `{"prompt":"x","metadata":{"n":1}}`, header: bearer(tokCI)}, 400, "metadata", "string values"},
		{"long idempotency key", call{body: ok, header: merge(bearer(tokCI), http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}})}, 400, "Idempotency-Key", "at most 255"},
		{"cron by any", call{body: `{"prompt":"x","source":"cron"}`, header: bearer(tokAny)}, 403, "", "never"},
		{"heartbeat by any", call{body: `{"prompt":"x","source":"heartbeat","name":"default"}`, header: bearer(tokAny)}, 403, "", "never"},
		{"heartbeat signed", call{body: `{"prompt":"x","source":"heartbeat"}`, header: signedBy("m7", now, `{"prompt":"x","source":"heartbeat"}`, newSecret)}, 403, "", "never"},
		{"source not granted", call{body: `{"prompt":"x","source":"deploy"}`, header: bearer(tokCI)}, 403, "", `may not request source "deploy"`},
		{"name not granted", call{body: `{"prompt":"x","source":"deploy","name":"drop-db"}`, header: bearer(tokDeploy)}, 403, "", `name "drop-db"`},
		{"task not granted", call{body: `{"prompt":"x","name":"release-1"}`, header: bearer(tokDeploy)}, 403, "", `source "task"`},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := f.do(t, tt.c)
				if r.status != tt.status {
					t.Fatalf("status = %d, want %d; body %s", r.status, tt.status, r.body)
				}
				d := r.problem(t)
				if !strings.Contains(d.Detail, tt.detail) {
					t.Errorf("detail = %q, want it to contain %q", d.Detail, tt.detail)
				}
				if tt.field != "" {
					found := false
					for _, e := range d.Errors {
						found = found || e.Field == tt.field
					}
					if !found {
						t.Errorf("errors = %+v, want one for field %q", d.Errors, tt.field)
					}
				}
				switch tt.status {
				case 401:
					if r.header.Get("WWW-Authenticate") == "" {
						t.Errorf("401 without WWW-Authenticate")
					}
				case 405:
					if r.header.Get("Allow") != http.MethodPost {
						t.Errorf("Allow = %q, want POST", r.header.Get("Allow"))
					}
				}
			})
		}
	})
	if n := f.published(t); n != 0 {
		t.Errorf("rejected requests published %d messages, want 0", n)
	}
	// Allowed combinations of the same credentials pass, so the 403s above
	// are the grants at work.
	f.do(t, call{body: `{"prompt":"x","source":"deploy","name":"release-7"}`, header: bearer(tokDeploy)}).accepted(t)
	f.do(t, call{body: `{"prompt":"x","source":"deploy","name":"rollback"}`, header: bearer(tokDeploy)}).accepted(t)
	f.do(t, call{body: `{"prompt":"x","source":"ops","name":"anything"}`, header: bearer(tokAny)}).accepted(t)
}

// A body over the limit sent without Content-Length is cut off after the
// limit: the handler reads no more than max_body+1 bytes.
func TestOversizeStreamed(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	h, err := webhook.New(b, webhook.Config{MaxBody: 1024, Tokens: []webhook.Token{{Name: "ci", Token: tokCI}}})
	if err != nil {
		t.Fatal(err)
	}
	body := &countingReader{r: io.MultiReader(strings.NewReader(`{"prompt":"`), strings.NewReader(strings.Repeat("a", 1<<20)))}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/tasks", body)
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokCI)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status = %d, want 413; %s", rec.Code, rec.Body)
	}
	if body.n > 1024+4096 {
		t.Errorf("read %d bytes of an oversize body, want about the 1024 limit", body.n)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestNoCredentialsConfigured(t *testing.T) {
	t.Parallel()
	f := newFixture(t, webhook.Config{})
	for _, h := range []http.Header{nil, bearer(tokCI), signedBy("m", now, `{"prompt":"x"}`, newSecret)} {
		r := f.do(t, call{body: `{"prompt":"x"}`, header: h})
		if r.status != http.StatusUnauthorized {
			t.Fatalf("status = %d, want 401; %s", r.status, r.body)
		}
		if d := r.problem(t); !strings.Contains(d.Detail, "no webhook credentials configured") {
			t.Errorf("detail = %q, want it to say no credentials are configured", d.Detail)
		}
	}
	if n := f.published(t); n != 0 {
		t.Errorf("published %d, want 0", n)
	}
}

func TestServeAs(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	h, err := webhook.New(b, webhook.Config{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/tasks", strings.NewReader(`{"prompt":"from the CLI"}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeAs(rec, req, webhook.Credential{Name: "admin", Grant: webhook.Grant{Sources: []string{"*"}}})
	if rec.Code != http.StatusAccepted {
		t.Fatalf("ServeAs: status %d, want 202; %s", rec.Code, rec.Body)
	}
	req = httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/tasks", strings.NewReader(`{"prompt":"x","source":"cron"}`))
	req.Header.Set("Content-Type", "application/json")
	rec = httptest.NewRecorder()
	h.ServeAs(rec, req, webhook.Credential{Name: "admin", Grant: webhook.Grant{Sources: []string{"*"}}})
	if rec.Code != http.StatusForbidden {
		t.Fatalf("ServeAs with source cron: status %d, want 403; %s", rec.Code, rec.Body)
	}
}

func TestBusDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	if err := f.b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []http.Header{bearer(tokCI), merge(bearer(tokCI), http.Header{"Idempotency-Key": {"k"}})} {
		r := f.do(t, call{body: `{"prompt":"x"}`, header: h})
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("status = %d, want 503; %s", r.status, r.body)
		}
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("Retry-After = %q, want whole seconds", r.header.Get("Retry-After"))
		}
		if d := r.problem(t); d.Type != problem.TypeUnavailable {
			t.Errorf("type = %s, want %s", d.Type, problem.TypeUnavailable)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  webhook.Config
		want string // substring; "" = valid
	}{
		{"empty", webhook.Config{}, ""},
		{"full", testConfig(), ""},
		{"short token", webhook.Config{Tokens: []webhook.Token{{Name: "a", Token: "short"}}}, "webhook.tokens[0].token: 5 characters is too short"},
		{"empty token", webhook.Config{Tokens: []webhook.Token{{Name: "a"}}}, "webhook.tokens[0].token: empty"},
		{"bad name", webhook.Config{Tokens: []webhook.Token{{Name: "A B", Token: tokCI}}}, "webhook.tokens[0].name"},
		{"duplicate name", webhook.Config{Tokens: []webhook.Token{{Name: "a", Token: tokCI}}, Secrets: []webhook.Secret{{Name: "a", Secret: newSecret}}}, "webhook.secrets[0]: name \"a\" is already used"},
		{"cron source", webhook.Config{Tokens: []webhook.Token{{Name: "a", Token: tokCI, Grant: webhook.Grant{Sources: []string{"task", "cron"}}}}}, "webhook.tokens[0].sources[1]: \"cron\" can never be requested"},
		{"heartbeat source", webhook.Config{Secrets: []webhook.Secret{{Name: "a", Secret: newSecret, Grant: webhook.Grant{Sources: []string{"heartbeat"}}}}}, "webhook.secrets[0].sources[0]"},
		{"bad glob", webhook.Config{Tokens: []webhook.Token{{Name: "a", Token: tokCI, Grant: webhook.Grant{Names: []string{"[a-"}}}}}, "webhook.tokens[0].names[0]"},
		{"no prefix", webhook.Config{Secrets: []webhook.Secret{{Name: "a", Secret: strings.TrimPrefix(newSecret, "whsec_")}}}, "webhook.secrets[0].secret: want whsec_"},
		{"not base64", webhook.Config{Secrets: []webhook.Secret{{Name: "a", Secret: "whsec_!!!"}}}, "not standard base64"},
		{"short secret", webhook.Config{Secrets: []webhook.Secret{{Name: "a", Secret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))}}}, "5 bytes is too short"},
		{"negative tolerance", webhook.Config{Tolerance: -time.Second}, "webhook.tolerance"},
		{"huge body", webhook.Config{MaxBody: 1 << 30}, "webhook.max_body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestGrantAllows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		g            webhook.Grant
		source, name string
		want         bool
	}{
		{webhook.Grant{}, "task", "anything", true},
		{webhook.Grant{}, "deploy", "x", false},
		{webhook.Grant{Sources: []string{"*"}}, "cron", "x", false},
		{webhook.Grant{Sources: []string{"*"}}, "heartbeat", "default", false},
		{webhook.Grant{Sources: []string{"*"}}, "delivery", "x", false},
		{webhook.Grant{Sources: []string{"c*"}}, "cron", "x", false},
		{webhook.Grant{Sources: []string{"*"}}, "ops", "x", true},
		{webhook.Grant{Names: []string{"report-*"}}, "task", "report-daily", true},
		{webhook.Grant{Names: []string{"report-*"}}, "task", "reports", false},
		{webhook.Grant{Names: []string{"a", "b"}}, "task", "b", true},
	}
	for _, tt := range tests {
		if got := tt.g.Allows(tt.source, tt.name); got != tt.want {
			t.Errorf("%+v.Allows(%q, %q) = %v, want %v", tt.g, tt.source, tt.name, got, tt.want)
		}
	}
}

func TestSchema(t *testing.T) {
	t.Parallel()
	var s struct {
		Required             []string                   `json:"required"`
		Properties           map[string]json.RawMessage `json:"properties"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
	}
	if err := json.Unmarshal(webhook.Schema(), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Required) != 1 || s.Required[0] != "prompt" {
		t.Errorf("required = %v, want [prompt]", s.Required)
	}
	for _, f := range []string{"prompt", "name", "source", "targets", "deliver", "metadata"} {
		if _, ok := s.Properties[f]; !ok {
			t.Errorf("schema has no property %q", f)
		}
	}
	if s.AdditionalProperties == nil || *s.AdditionalProperties {
		t.Errorf("additionalProperties = %v, want false", s.AdditionalProperties)
	}
	if !bytes.Contains(webhook.Schema(), []byte(`"enum": [`)) {
		t.Errorf("schema has no enum (deliver)")
	}
}

// docs/webhooks.md shows the schema; it must be the one the code has.
func TestSchemaDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/webhooks.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, webhook.Schema()) {
		t.Fatalf("docs/webhooks.md does not contain the current webhook.Schema(); paste it:\n%s", webhook.Schema())
	}
}
