package webhook_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers/webhook"
)

// freezer is a loopback TCP proxy to a NATS server that can stop passing
// bytes on (a frozen bus: the connection stays up, nothing answers) and
// start again, delivering what it held.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen bool
	thaw   *sync.Cond
	wg     sync.WaitGroup
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target}
	f.thaw = sync.NewCond(&f.mu)
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, s)
			f.mu.Unlock()
			f.wg.Go(func() { f.pipe(s, c) })
			f.wg.Go(func() { f.pipe(c, s) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		f.set(false)
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		f.mu.Lock()
		for f.frozen {
			f.thaw.Wait()
		}
		f.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (f *freezer) set(frozen bool) {
	f.mu.Lock()
	f.frozen = frozen
	f.mu.Unlock()
	f.thaw.Broadcast()
}

// TestFrozenBusAnswersHowToRetrySafely: when the bus does not confirm a
// task in time the webhook cannot know whether it was stored, so it must
// not say "nothing was queued": it answers 503 with an idempotency key,
// and a retry with that key after the bus recovers answers the same id
// and queues nothing more.
func TestFrozenBusAnswersHowToRetrySafely(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	owner := bustest.New(t, func(c *bus.Config) { c.DataDir = dir; c.Listen = "127.0.0.1:0" })
	info, err := bus.ReadClientInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	fz := newFreezer(t, strings.TrimPrefix(info.URL, "nats://"))
	b, err := bus.Open(t.Context(), bus.Config{URL: "nats://" + fz.ln.Addr().String(), User: info.User, Password: info.Password, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	h, err := webhook.New(b, webhook.Config{Tokens: []webhook.Token{{Name: "ci", Token: tokCI}}}, webhook.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	post := func(key string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"prompt":"summarise build 42"}`))
		req.Header.Set("Authorization", "Bearer "+tokCI)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	fz.set(true)
	first := post("")
	body, _ := io.ReadAll(first.Body)
	key := first.Header.Get("Idempotency-Key")
	if first.StatusCode != http.StatusServiceUnavailable || key == "" || strings.Contains(string(body), "nothing was queued") ||
		!strings.Contains(string(body), key) {
		t.Fatalf("frozen bus: %d, Idempotency-Key %q, %s; want 503 with a key to retry with, and no claim that nothing was queued", first.StatusCode, key, body)
	}
	fz.set(false)

	// The publish the bus held is stored once it thaws; the retry with the
	// key then answers its id and stores nothing more.
	var acc webhook.Accepted
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := post(key)
		if r.StatusCode == http.StatusAccepted {
			if err := json.NewDecoder(r.Body).Decode(&acc); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retry with the key after the thaw: %d", r.StatusCode)
		}
	}
	st, err := owner.JetStream().Stream(t.Context(), bus.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	info2, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info2.State.Msgs != 1 {
		t.Errorf("requests stored = %d, want 1 (the frozen publish and the retry are one)", info2.State.Msgs)
	}
	m, err := st.GetLastMsgForSubject(t.Context(), owner.Subjects.Requests())
	if err != nil {
		t.Fatal(err)
	}
	ev, err := bus.DecodeEvent(m.Data)
	if err != nil || ev.ID != acc.ID {
		t.Errorf("stored request id %q, retry answered %q (%v); want the same", ev.ID, acc.ID, err)
	}
	_ = jetstream.MsgIDHeader
}

// TestInflightBodiesAreBounded: while the bodies being received use up
// max_inflight, another request is answered 503 with Retry-After and
// nothing is read or queued; once they are done, it is accepted.
func TestInflightBodiesAreBounded(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := webhook.Config{Tokens: []webhook.Token{{Name: "ci", Token: tokCI}}, MaxInflight: webhook.DefaultMaxBody}
	h, err := webhook.New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	body := `{"prompt":"` + strings.Repeat("x", 200<<10) + `"}`
	send := func(r io.Reader, n int64) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, r)
		req.ContentLength = n
		req.Header.Set("Authorization", "Bearer "+tokCI)
		req.Header.Set("Content-Type", "application/json")
		return srv.Client().Do(req)
	}
	// A slow sender: half its body now, the rest later.
	pr, pw := io.Pipe()
	slow := make(chan *http.Response, 1)
	go func() {
		resp, err := send(pr, int64(len(body)))
		if err != nil {
			t.Error(err)
		}
		slow <- resp
	}()
	if _, err := pw.Write([]byte(body[:len(body)/2])); err != nil {
		t.Fatal(err)
	}
	// Once the handler holds the slow body's bytes, another body is refused
	// (until then it may still get in, and is queued).
	var busy *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; {
		busy, err = send(strings.NewReader(body), int64(len(body)))
		if err != nil {
			t.Fatal(err)
		}
		busy.Body.Close()
		if busy.StatusCode != http.StatusAccepted || time.Now().After(deadline) {
			break
		}
	}
	if busy.StatusCode != http.StatusServiceUnavailable || busy.Header.Get("Retry-After") == "" {
		t.Errorf("a body beyond max_inflight = %d (Retry-After %q), want 503 with Retry-After", busy.StatusCode, busy.Header.Get("Retry-After"))
	}
	if _, err := pw.Write([]byte(body[len(body)/2:])); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if r := <-slow; r == nil || r.StatusCode != http.StatusAccepted {
		t.Fatalf("the slow sender = %v, want 202", r)
	} else {
		r.Body.Close()
	}
	after, err := send(strings.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	after.Body.Close()
	if after.StatusCode != http.StatusAccepted {
		t.Errorf("after the slow body was queued = %d, want 202", after.StatusCode)
	}
}

// TestFakeSignaturesCannotTakeTheBudget: bodies of signed requests count
// against half of max_inflight until their signature is verified, so slow
// senders of fake signatures leave room for genuine callers.
func TestFakeSignaturesCannotTakeTheBudget(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := webhook.Config{Tokens: []webhook.Token{{Name: "ci", Token: tokCI}}, Secrets: []webhook.Secret{{Name: "relay", Secret: newSecret}},
		MaxInflight: 2 * webhook.DefaultMaxBody}
	h, err := webhook.New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	body := `{"prompt":"` + strings.Repeat("x", 200<<10) + `"}`
	send := func(r io.Reader, header map[string]string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, r)
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return srv.Client().Do(req)
	}
	fake := map[string]string{"webhook-id": "msg_fake", "webhook-timestamp": strconv.FormatInt(time.Now().Unix(), 10), "webhook-signature": "v1,AAAA"}
	pr, pw := io.Pipe()
	slow := make(chan *http.Response, 1)
	go func() {
		resp, _ := send(pr, fake)
		slow <- resp
	}()
	if _, err := pw.Write([]byte(body[:len(body)/2])); err != nil {
		t.Fatal(err)
	}
	// Once the slow fake holds its bytes, another fake-signed body is
	// refused, while a bearer caller still gets in.
	var second *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; {
		second, err = send(strings.NewReader(body), fake)
		if err != nil {
			t.Fatal(err)
		}
		second.Body.Close()
		if second.StatusCode != http.StatusUnauthorized || time.Now().After(deadline) {
			break
		}
	}
	if second.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a second unverified body = %d, want 503", second.StatusCode)
	}
	genuine, err := send(strings.NewReader(body), map[string]string{"Authorization": "Bearer " + tokCI})
	if err != nil {
		t.Fatal(err)
	}
	genuine.Body.Close()
	if genuine.StatusCode != http.StatusAccepted {
		t.Errorf("a bearer caller while a fake signature holds bytes = %d, want 202", genuine.StatusCode)
	}
	pw.Close()
	if r := <-slow; r != nil {
		r.Body.Close()
	}
}
