package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"
)

// CookieName is the session cookie's name.
const CookieName = "agentwork_session"

// session is one logged-in browser. Sessions live in the process's memory:
// a restart logs everyone out.
type session struct {
	who     string // the credential's name: admin, or a webhook token's
	cred    string // the webhook credential's name; "" for the admin token
	write   bool   // may change state
	csrf    string // the synchronizer token of its forms
	created time.Time
	seen    time.Time
	flash   string // a message for the next page (post/redirect/get)
}

// sessions holds the sessions by the sha256 of their cookie, so the map
// holds no usable secret.
type sessions struct {
	mu     sync.Mutex
	byHash map[[sha256.Size]byte]*session
	idle   time.Duration
	maxAge time.Duration
	max    int
	now    func() time.Time
}

func newSessions(idle, maxAge time.Duration, max int, now func() time.Time) *sessions {
	return &sessions{byHash: map[[sha256.Size]byte]*session{}, idle: idle, maxAge: maxAge, max: max, now: now}
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// create starts a session and returns its cookie value. Expired sessions
// are dropped first; at the limit, the least recently seen one goes.
func (s *sessions) create(who, cred string, write bool) (string, *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var oldest [sha256.Size]byte
	var oldestSeen time.Time
	for h, ss := range s.byHash {
		if s.expired(ss, now) {
			delete(s.byHash, h)
			continue
		}
		if oldestSeen.IsZero() || ss.seen.Before(oldestSeen) {
			oldest, oldestSeen = h, ss.seen
		}
	}
	if len(s.byHash) >= s.max {
		delete(s.byHash, oldest)
	}
	id := randomToken()
	ss := &session{who: who, cred: cred, write: write, csrf: randomToken(), created: now, seen: now}
	s.byHash[sha256.Sum256([]byte(id))] = ss
	return id, ss
}

func (s *sessions) expired(ss *session, now time.Time) bool {
	return now.Sub(ss.seen) > s.idle || now.Sub(ss.created) > s.maxAge
}

// get returns the live session of r's cookie and marks it seen, or nil.
// It returns a copy: the flash is taken (cleared) when take is set.
func (s *sessions) get(r *http.Request, take bool) *session {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return nil
	}
	h := sha256.Sum256([]byte(c.Value))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.byHash[h]
	if !ok {
		return nil
	}
	now := s.now()
	if s.expired(ss, now) {
		delete(s.byHash, h)
		return nil
	}
	ss.seen = now
	out := *ss
	if take {
		ss.flash = ""
	}
	return &out
}

// setFlash leaves msg for the next page of r's session.
func (s *sessions) setFlash(r *http.Request, msg string) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss, ok := s.byHash[sha256.Sum256([]byte(c.Value))]; ok {
		ss.flash = msg
	}
}

// end removes r's session.
func (s *sessions) end(r *http.Request) {
	if c, err := r.Cookie(CookieName); err == nil {
		s.mu.Lock()
		delete(s.byHash, sha256.Sum256([]byte(c.Value)))
		s.mu.Unlock()
	}
}

// validCSRF reports whether the form's csrf field is the session's token.
func (ss *session) validCSRF(r *http.Request) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ss.csrf)) == 1
}

// secure reports whether r came over TLS, to this server or to a proxy in
// front of it (X-Forwarded-Proto: https): the cookie is then Secure.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}
