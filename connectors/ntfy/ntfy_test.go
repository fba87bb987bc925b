package ntfy_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/ntfy"
	"github.com/agentwork/agentwork/connectors/ntfy/ntfyfake"
)

const (
	token = "tk_AgQdq7mVBoFD37zQVN29RhuMzNIz2"
	topic = "agentwork-secret-topic-7f3a"
)

func newConnector(t *testing.T, opts ntfy.Options) *ntfy.Connector {
	t.Helper()
	c, err := ntfy.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func TestConformance(t *testing.T) {
	t.Parallel()
	connectortest.Run(t, connectortest.Harness{
		New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
			srv := ntfyfake.New(t, ntfyfake.Options{Token: token})
			return newConnector(t, ntfy.Options{BaseURL: srv.URL, Topic: topic, Token: token}), srv
		},
		Secret:  token,
		Secrets: []string{topic},
		Features: connectortest.Features{
			Concurrent: true, MaxText: ntfy.MaxMessage, Length: ntfy.Bytes, MessageIDs: true, Destination: "team-b",
			Outages: true, RateLimits: true, AuthErrors: true, BadRequests: true, Stalls: true,
		},
	})
}

// The publish: topic in the path, text as the body, title, priority and
// tags in headers; the receipt holds ntfy's message id.
func TestPublish(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opts     ntfy.Options
		n        func(n *connectors.Notification)
		want     ntfyfake.Published // ID and Time ignored
		wantText string
	}{
		{
			name: "info",
			want: ntfyfake.Published{Topic: topic, Title: "agentwork: heartbeat/default", Priority: 3, Message: "Disk /var is 95% full"},
		},
		{
			name: "important adds priority high and the warning tag",
			opts: ntfy.Options{Tags: []string{"robot"}},
			n:    func(n *connectors.Notification) { n.Urgency = "important" },
			want: ntfyfake.Published{Topic: topic, Title: "agentwork: heartbeat/default", Priority: 4, Tags: []string{"robot", "warning"}, Message: "Disk /var is 95% full"},
		},
		{
			name: "destination topic",
			n:    func(n *connectors.Notification) { n.Target = "phone:team-b" },
			want: ntfyfake.Published{Topic: "team-b", Title: "agentwork: heartbeat/default", Priority: 3, Message: "Disk /var is 95% full"},
		},
		{
			name: "title template, no name",
			opts: ntfy.Options{Title: "[{source}] {name}"},
			n:    func(n *connectors.Notification) { n.Source, n.Name = "task", "" },
			want: ntfyfake.Published{Topic: topic, Title: "[task]", Priority: 3, Message: "Disk /var is 95% full"},
		},
		{
			name: "default title without a name",
			n:    func(n *connectors.Notification) { n.Source, n.Name = "task", "" },
			want: ntfyfake.Published{Topic: topic, Title: "agentwork: task", Priority: 3, Message: "Disk /var is 95% full"},
		},
		{
			name: "non-ASCII title and tags are RFC 2047 encoded",
			opts: ntfy.Options{Title: "Größe 📈 {name} — 日本語のテキストが長い場合でも正しく届くこと", Tags: []string{"café"}},
			want: ntfyfake.Published{Topic: topic, Title: "Größe 📈 default — 日本語のテキストが長い場合でも正しく届くこと", Priority: 3, Tags: []string{"café"}, Message: "Disk /var is 95% full"},
		},
		{
			name: "an ASCII title that looks like an encoded word stays literal",
			opts: ntfy.Options{Title: "=?utf-8?q?pwned?= {name}"},
			want: ntfyfake.Published{Topic: topic, Title: "=?utf-8?q?pwned?= default", Priority: 3, Message: "Disk /var is 95% full"},
		},
		{
			name: "control characters in the title become spaces",
			n:    func(n *connectors.Notification) { n.Name = "a\r\nX-Evil: 1" },
			want: ntfyfake.Published{Topic: topic, Title: "agentwork: heartbeat/a  X-Evil: 1", Priority: 3, Message: "Disk /var is 95% full"},
		},
		{
			name: "truncated",
			n:    func(n *connectors.Notification) { n.Truncated = true },
			want: ntfyfake.Published{Topic: topic, Title: "agentwork: heartbeat/default", Priority: 3, Message: "Disk /var is 95% full" + ntfy.TruncatedMark},
		},
		{
			name: "invalid UTF-8 is replaced, not sent as an attachment",
			n:    func(n *connectors.Notification) { n.Text = "a\xffb" },
			want: ntfyfake.Published{Topic: topic, Title: "agentwork: heartbeat/default", Priority: 3, Message: "a\uFFFDb"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := ntfyfake.New(t, ntfyfake.Options{Token: token})
			opts := tc.opts
			opts.BaseURL, opts.Topic, opts.Token = srv.URL+"/", topic, token
			c := newConnector(t, opts)
			n := connectortest.Notification("Disk /var is 95% full")
			if tc.n != nil {
				tc.n(&n)
			}
			rec, err := c.Send(t.Context(), n)
			if err != nil {
				t.Fatalf("Send = %v", err)
			}
			got := srv.Published()
			if len(got) != 1 {
				t.Fatalf("server holds %d messages, want 1", len(got))
			}
			if rec.Parts != 1 || !slices.Equal(rec.MessageIDs, []string{got[0].ID}) {
				t.Errorf("Receipt = %+v, want 1 part with id %q", rec, got[0].ID)
			}
			got[0].ID, got[0].Time = "", 0
			if !equal(got[0], tc.want) {
				t.Errorf("published %+v\nwant      %+v", got[0], tc.want)
			}
		})
	}
}

func equal(a, b ntfyfake.Published) bool {
	return a.Topic == b.Topic && a.Title == b.Title && a.Message == b.Message && a.Priority == b.Priority && slices.Equal(a.Tags, b.Tags)
}

// ntfy's limit is 4096 bytes, and a body of exactly 4096 bytes is already
// too long: a text of 4096 ASCII bytes goes in two messages, one of 4096
// bytes of three-byte characters too, each part at most 4095 bytes.
func TestByteLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		text string
	}{
		{"4096 ASCII bytes", strings.Repeat("abcdefg ", 512)[:4095] + "x"},
		{"1366 three-byte characters", strings.Repeat("日", 1366)},
		{"4095 bytes fit", strings.Repeat("abcdefg ", 512)[:4094] + "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := ntfyfake.New(t, ntfyfake.Options{})
			c := newConnector(t, ntfy.Options{BaseURL: srv.URL, Topic: topic})
			rec, err := c.Send(t.Context(), connectortest.Notification(tc.text))
			if err != nil {
				t.Fatalf("Send(%d bytes) = %v", len(tc.text), err)
			}
			want := 1
			if len(tc.text) > ntfy.MaxMessage {
				want = 2
			}
			got := srv.Published()
			if rec.Parts != want || len(got) != want {
				t.Fatalf("Send(%d bytes): %d parts, server holds %d messages; want %d", len(tc.text), rec.Parts, len(got), want)
			}
			var joined string
			for _, m := range got {
				if len(m.Message) > ntfy.MaxMessage {
					t.Errorf("a message of %d bytes, want at most %d", len(m.Message), ntfy.MaxMessage)
				}
				joined += m.Message
			}
			if strings.ReplaceAll(joined, " ", "") != strings.ReplaceAll(tc.text, " ", "") {
				t.Errorf("the parts do not hold the text")
			}
		})
	}
}

// The fake is as strict as ntfy: a body of 4096 bytes is refused as an
// attachment (40014), 4095 bytes are a message.
func TestFakeLimit(t *testing.T) {
	t.Parallel()
	srv := ntfyfake.New(t, ntfyfake.Options{})
	for size, want := range map[int]int{4095: 200, 4096: 400} {
		resp, err := http.Post(srv.URL+"/"+topic, "text/plain", strings.NewReader(strings.Repeat("x", size)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST of %d bytes = %d, want %d", size, resp.StatusCode, want)
		}
	}
}

// Each error answer maps to retryable or permanent; none quotes the token
// or the configured topic.
func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		server    ntfyfake.Options
		opts      ntfy.Options
		fault     *connectortest.Fault
		handler   http.HandlerFunc // instead of the fake
		permanent bool
		after     time.Duration
		says      string
	}{
		{name: "429 without Retry-After (ntfy's own)", fault: &connectortest.Fault{Kind: connectortest.RateLimited}, says: "too many requests"},
		{name: "429 with Retry-After (a proxy's)", fault: &connectortest.Fault{Kind: connectortest.RateLimited, RetryAfter: 30 * time.Second}, after: 30 * time.Second},
		{name: "no credentials for a protected topic: 403", server: ntfyfake.Options{Token: token}, opts: ntfy.Options{}, permanent: true, says: "ntfy error 40301: forbidden"},
		{name: "wrong token: 401", server: ntfyfake.Options{Token: token}, opts: ntfy.Options{Token: "tk_wrongwrongwrongwrongwrong12"}, permanent: true, says: "check token"},
		{name: "wrong password: 401", server: ntfyfake.Options{Username: "phil", Password: "right"}, opts: ntfy.Options{Username: "phil", Password: "wrong-password-9"}, permanent: true, says: "40101"},
		{name: "500", fault: &connectortest.Fault{Kind: connectortest.Unavailable}, says: "internal server error"},
		{name: "disallowed destination topic is refused before sending", opts: ntfy.Options{}, permanent: true, says: "path of the ntfy server"},
		{name: "503 with Retry-After", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat))
			http.Error(w, "<html>maintenance "+topic+"</html>", http.StatusServiceUnavailable)
		}, after: 90 * time.Second, says: "maintenance"},
		{name: "redirect", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://ntfy.example/"+topic, http.StatusMovedPermanently)
		}, permanent: true, says: "redirects to https://ntfy.example/"},
		{name: "200 that is not ntfy", handler: func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("<html>welcome</html>"))
		}, permanent: true, says: "is base_url an ntfy server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := ""
			if tc.handler != nil {
				srv := httptest.NewServer(tc.handler)
				t.Cleanup(srv.Close)
				base = srv.URL
			} else {
				srv := ntfyfake.New(t, tc.server)
				if tc.fault != nil {
					srv.Inject(*tc.fault)
				}
				base = srv.URL
			}
			opts := tc.opts
			opts.BaseURL, opts.Topic = base, topic
			c := newConnector(t, opts)
			n := connectortest.Notification("x")
			if strings.HasPrefix(tc.name, "disallowed") {
				n.Target = "phone:docs"
			}
			_, err := c.Send(t.Context(), n)
			if err == nil {
				t.Fatal("Send = nil, want an error")
			}
			if got := connectors.IsPermanent(err); got != tc.permanent {
				t.Errorf("Send = %v: permanent %v, want %v", err, got, tc.permanent)
			}
			if got := connectors.RetryAfter(err); got < tc.after || got > tc.after+2*time.Second {
				t.Errorf("Send = %v: retry after %s, want %s", err, got, tc.after)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Send = %v, want it to say %q", err, tc.says)
			}
			for _, s := range []string{token, topic, opts.Password} {
				if s != "" && strings.Contains(err.Error(), s) {
					t.Errorf("Send = %v, which quotes the secret %q", err, s)
				}
			}
		})
	}
}

// A server that is down is retryable, and the error names neither the
// topic nor the token.
func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close()
	c := newConnector(t, ntfy.Options{BaseURL: base, Topic: topic, Token: token})
	_, err := c.Send(t.Context(), connectortest.Notification("x"))
	if err == nil || connectors.IsPermanent(err) {
		t.Fatalf("Send to a closed port = %v, want a retryable error", err)
	}
	if strings.Contains(err.Error(), topic) || strings.Contains(err.Error(), token) {
		t.Errorf("Send = %v, which quotes the topic or token", err)
	}
}

// Basic auth with username and password, and with a token as password.
func TestBasicAuth(t *testing.T) {
	t.Parallel()
	srv := ntfyfake.New(t, ntfyfake.Options{Username: "phil", Password: "s3cret-pass"})
	c := newConnector(t, ntfy.Options{BaseURL: srv.URL, Topic: topic, Username: "phil", Password: "s3cret-pass"})
	if _, err := c.Send(t.Context(), connectortest.Notification("x")); err != nil {
		t.Fatalf("Send with Basic auth = %v", err)
	}
}

func TestType(t *testing.T) {
	t.Parallel()
	srv := ntfyfake.New(t, ntfyfake.Options{Token: token})
	types := connectors.Types{ntfy.Type}
	src := "phone: {type: ntfy, base_url: " + srv.URL + ", topic: " + topic + ", token: " + token + ", tags: [robot]}"
	cs := connectortest.Decode(t, types, src)
	if err := connectors.CheckDestination(cs["phone"], "team-b"); err != nil {
		t.Errorf("CheckDestination(team-b) = %v", err)
	}
	c, err := types.Build("phone", cs["phone"], connectors.BuildDeps{})
	if err != nil {
		t.Fatalf("Build = %v", err)
	}
	if _, err := c.Send(t.Context(), connectortest.Notification("hello")); err != nil {
		t.Fatalf("Send = %v", err)
	}
	got := srv.Published()
	if len(got) != 1 || got[0].Title != "agentwork: heartbeat/default" || !slices.Equal(got[0].Tags, []string{"robot"}) {
		t.Errorf("published %+v, want the default title and tag robot", got)
	}
	if d := ntfy.Type.Default().(ntfy.Config); d.BaseURL != ntfy.DefaultBaseURL || d.Title != ntfy.DefaultTitle {
		t.Errorf("Type.Default() = %+v", d)
	}
}

// FailNext, Fail and Recover script the fake for end-to-end tests.
func TestFakeScript(t *testing.T) {
	t.Parallel()
	srv := ntfyfake.New(t, ntfyfake.Options{})
	c := newConnector(t, ntfy.Options{BaseURL: srv.URL, Topic: topic})
	send := func() error { _, err := c.Send(t.Context(), connectortest.Notification("x")); return err }
	srv.FailNext(2, connectortest.Unavailable)
	for i := range 2 {
		if err := send(); err == nil {
			t.Fatalf("FailNext(2): send %d passed", i+1)
		}
	}
	if err := send(); err != nil {
		t.Fatalf("after FailNext(2) the third send = %v", err)
	}
	srv.Fail(connectortest.Unauthorized)
	for range 3 {
		if err := send(); !connectors.IsPermanent(err) {
			t.Fatalf("Fail(unauthorized): send = %v, want permanent", err)
		}
	}
	srv.Recover()
	if err := send(); err != nil {
		t.Fatalf("after Recover send = %v", err)
	}
	if got := len(srv.Published()); got != 2 {
		t.Errorf("server holds %d messages, want 2", got)
	}
	var re *connectors.RetryableError
	srv.FailNext(1, connectortest.RateLimited)
	if err := send(); !errors.As(err, &re) {
		t.Errorf("FailNext(rate limited): send = %v, want retryable", err)
	}
}
