// Package ntfyfake is an ntfy server for tests: an httptest server on
// 127.0.0.1 that takes publishes the way ntfy's does (POST or PUT
// /{topic}, the message as the body, title, priority and tags in headers
// or query parameters) and answers with ntfy's real bodies: the message
// JSON on success, {"code","http","error","link"} on failure. It records
// what it accepted (a connectortest.Observer) and can be made to fail
// (its connectortest.Script: Inject, FailNext, Fail, RateLimit, Recover).
//
// Wire format followed: https://docs.ntfy.sh/publish/ and the server's
// source, binwiederhier/ntfy server/server.go (handlePublishInternal,
// parsePublishParams, handleBodyAsTextMessage, topicRegex,
// handleError), server/errors.go (the error codes), server/types.go
// (message), server/config.go (DefaultMessageSizeLimit 4096,
// DefaultDisallowedTopics) and util/peek.go (a body that fills the
// 4096-byte peek buffer counts as too long).
package ntfyfake

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors/connectortest"
)

// MessageSizeLimit is ntfy's default message-size-limit in bytes. A body
// this long or longer is not a text message (see util.Peek).
const MessageSizeLimit = 4096

// Options configures a Server.
type Options struct {
	// Token, when set, is the one access token that may publish
	// (Authorization: Bearer <Token>, or Basic with an empty user and the
	// token as password).
	Token string
	// Username and Password, when set, are a user that may publish (Basic).
	Username, Password string
}

// Published is a message as the server stored it.
type Published struct {
	ID       string
	Time     int64
	Topic    string
	Title    string
	Message  string
	Priority int
	Tags     []string
}

// Server is the fake ntfy server. Its Script fails publishes with ntfy's
// errors: Unavailable is 500, RateLimited 429 (with a Retry-After only
// when the fault names a wait: ntfy sends none, a proxy in front may),
// Unauthorized 401, BadRequest 400 (attachments not allowed), Stall no
// answer. Safe for concurrent use.
type Server struct {
	connectortest.Recorder
	*connectortest.Script[connectortest.Fault]
	// URL is the server's base URL, http://127.0.0.1:<port>.
	URL string

	opts Options

	mu        sync.Mutex
	published []Published
}

var (
	_ connectortest.Observer      = (*Server)(nil)
	_ connectortest.FaultInjector = (*Server)(nil)
)

// New starts a Server, stopped at t's cleanup.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{opts: opts, Script: connectortest.NewScript(func(f connectortest.Fault) connectortest.Fault { return f })}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(s.Release) // runs first: releases stalled requests
	s.URL = srv.URL
	return s
}

// Published returns the messages the server accepted, in order.
func (s *Server) Published() []Published {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.published)
}

// errHTTP is ntfy's error body (server/errors.go).
type errHTTP struct {
	Code     int    `json:"code,omitempty"`
	HTTPCode int    `json:"http"`
	Message  string `json:"error"`
	Link     string `json:"link,omitempty"`
}

// The errors of server/errors.go the fake answers with.
var (
	errBadRequestPriorityInvalid       = errHTTP{40007, 400, "invalid priority parameter", "https://ntfy.sh/docs/publish/#message-priority"}
	errBadRequestTopicDisallowed       = errHTTP{40010, 400, "invalid request: topic name is disallowed", ""}
	errBadRequestAttachmentsDisallowed = errHTTP{40014, 400, "invalid request: attachments not allowed", "https://ntfy.sh/docs/config/#attachments"}
	errNotFound                        = errHTTP{40401, 404, "page not found", ""}
	errUnauthorized                    = errHTTP{40101, 401, "unauthorized", "https://ntfy.sh/docs/publish/#authentication"}
	errForbidden                       = errHTTP{40301, 403, "forbidden", "https://ntfy.sh/docs/publish/#authentication"}
	errTooManyRequests                 = errHTTP{42901, 429, "limit reached: too many requests, please be nice", "https://ntfy.sh/docs/publish/#limitations"}
	errInternalError                   = errHTTP{50001, 500, "internal server error", ""}
)

// writeError writes e as server.handleError does: JSON and a newline.
func writeError(w http.ResponseWriter, e errHTTP) {
	b, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	w.WriteHeader(e.HTTPCode)
	_, _ = io.WriteString(w, string(b)+"\n")
}

var (
	topicPathRegex   = regexp.MustCompile(`^/[-_A-Za-z0-9]{1,64}$`)
	disallowedTopics = []string{"docs", "static", "file", "app", "metrics", "account", "settings", "signup", "login", "v1"}
)

// ServeHTTP serves a publish.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if (r.Method != http.MethodPost && r.Method != http.MethodPut) || !topicPathRegex.MatchString(r.URL.Path) {
		writeError(w, errNotFound)
		return
	}
	if f, ok := s.Next(); ok {
		s.fail(w, r, f)
		return
	}
	topic := r.URL.Path[1:]
	if slices.Contains(disallowedTopics, topic) {
		writeError(w, errBadRequestTopicDisallowed)
		return
	}
	if e, ok := s.authorize(r); !ok {
		writeError(w, e)
		return
	}
	m := Published{ID: randomID(), Time: time.Now().Unix(), Topic: topic}
	m.Title = readParam(r, "x-title", "title", "t")
	prio, ok := parsePriority(readParam(r, "x-priority", "priority", "prio", "p"))
	if !ok {
		writeError(w, errBadRequestPriorityInvalid)
		return
	}
	m.Priority = prio
	for _, tag := range strings.Split(readParam(r, "x-tags", "tags", "tag", "ta"), ",") {
		if tag = strings.TrimSpace(tag); tag != "" {
			m.Tags = append(m.Tags, tag)
		}
	}
	// util.Peek: a body that fills the buffer is LimitReached, and a body
	// that is too long or not UTF-8 would be an attachment, which this
	// server (like one without attachment-cache-dir) does not take.
	peeked := make([]byte, MessageSizeLimit)
	n, err := io.ReadFull(r.Body, peeked)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		writeError(w, errInternalError)
		return
	}
	body := peeked[:n]
	if n == MessageSizeLimit || !utf8.Valid(body) {
		writeError(w, errBadRequestAttachmentsDisallowed)
		return
	}
	m.Message = strings.TrimSpace(string(body))
	if m.Message == "" {
		m.Message = "triggered" // emptyMessageBody
	}
	s.mu.Lock()
	s.published = append(s.published, m)
	s.mu.Unlock()
	urgency := "info"
	if m.Priority >= 4 {
		urgency = "important"
	}
	s.Add(connectortest.Message{Text: m.Message, Urgency: urgency, Destination: m.Topic})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	_ = json.NewEncoder(w).Encode(struct {
		ID       string   `json:"id"`
		Time     int64    `json:"time"`
		Expires  int64    `json:"expires,omitempty"`
		Event    string   `json:"event"`
		Topic    string   `json:"topic"`
		Title    string   `json:"title,omitempty"`
		Message  string   `json:"message,omitempty"`
		Priority int      `json:"priority,omitempty"`
		Tags     []string `json:"tags,omitempty"`
	}{m.ID, m.Time, m.Time + 12*3600, "message", m.Topic, m.Title, m.Message, m.Priority, m.Tags})
}

// authorize checks the credentials as ntfy with auth-default-access
// deny-all does: wrong credentials are 401, none are 403.
func (s *Server) authorize(r *http.Request) (errHTTP, bool) {
	if s.opts.Token == "" && s.opts.Username == "" {
		return errHTTP{}, true
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return errForbidden, false
	}
	if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
		return errUnauthorized, s.opts.Token != "" && tok == s.opts.Token
	}
	user, pass, ok := r.BasicAuth()
	switch {
	case !ok:
		return errUnauthorized, false
	case user == "" && s.opts.Token != "" && pass == s.opts.Token:
		return errHTTP{}, true
	case s.opts.Username != "" && user == s.opts.Username && pass == s.opts.Password:
		return errHTTP{}, true
	}
	return errUnauthorized, false
}

// fail answers r with f.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, f connectortest.Fault) {
	switch f.Kind {
	case connectortest.Unavailable:
		writeError(w, errInternalError)
	case connectortest.RateLimited:
		// ntfy itself sends no Retry-After; a proxy in front may.
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(f.RetryAfter/time.Second)))
		}
		writeError(w, errTooManyRequests)
	case connectortest.Unauthorized:
		writeError(w, errUnauthorized)
	case connectortest.BadRequest:
		writeError(w, errBadRequestAttachmentsDisallowed)
	case connectortest.Stall:
		// Read the body first: only then does the server notice the
		// client hanging up.
		_, _ = io.Copy(io.Discard, r.Body)
		s.Stall(r.Context())
	default:
		panic(fmt.Sprintf("ntfyfake: unknown fault %s", f.Kind))
	}
}

var wordDecoder mime.WordDecoder

// readParam reads the first of names that is set, from the headers (RFC
// 2047 decoded) and then the query, as ntfy's readParam does.
func readParam(r *http.Request, names ...string) string {
	for _, name := range names {
		v := r.Header.Get(name)
		if d, err := wordDecoder.DecodeHeader(v); err == nil {
			v = d
		}
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	for _, name := range names {
		if v := strings.TrimSpace(r.URL.Query().Get(name)); v != "" {
			return v
		}
	}
	return ""
}

// parsePriority is util.ParsePriority.
func parsePriority(p string) (int, bool) {
	switch strings.ToLower(strings.TrimSpace(p)) {
	case "":
		return 0, true
	case "1", "min":
		return 1, true
	case "2", "low":
		return 2, true
	case "3", "default":
		return 3, true
	case "4", "high":
		return 4, true
	case "5", "max", "urgent":
		return 5, true
	}
	return 0, false
}

// randomID is a 12-character message id like ntfy's (util.RandomString).
func randomID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
