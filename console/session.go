package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
)

// CookieName is the session cookie's name.
const CookieName = "agentwork_session"

const (
	// refreshEvery is how often, at most, a session's last request is
	// written to the bus: page views in between write nothing.
	refreshEvery = time.Minute
	// busTimeout bounds one read or write of a session on the bus.
	busTimeout = 5 * time.Second
	// fingerprintKey is the key, in agentwork_state, of the secret the
	// sessions' token fingerprints are keyed with.
	fingerprintKey = "console.session_key"
	// endedMarkerTTL is how long the marker of a removed session stays.
	endedMarkerTTL = time.Second
)

// record is a session as the bus keeps it (agentwork_console_sessions),
// under the hex SHA-256 of its cookie's secret. It holds no secret: the
// cookie is only hashed, the CSRF token is derived from the cookie, and
// the token logged in with is a fingerprint keyed with a secret kept
// elsewhere (fingerprintKey).
type record struct {
	// Cred names the credential logged in with: api.AdminName or a
	// webhook token's name. Its grant is looked up at every request.
	Cred string `json:"cred"`
	// Token is HMAC-SHA256, under the fingerprint key, of the session's
	// bus key and the SHA-256 of the token logged in with (hex): the
	// session lives while that token is still the credential's, and the
	// record is good under its own key only (a copy under another fails).
	Token   string    `json:"token"`
	Created time.Time `json:"created"`
	// Seen is the last request, written at most every refreshEvery.
	Seen time.Time `json:"seen"`
	// Flash is a message for the next page (post/redirect/get).
	Flash string `json:"flash,omitempty"`
}

// session is a logged-in browser, as one request finds it.
type session struct {
	who   string // the credential's name: admin, or a webhook token's
	cred  string // the webhook credential's name; "" for the admin token
	write bool   // may change state: the credential's grant now
	csrf  string // the synchronizer token of its forms
	flash string // a message for this page
}

// ended says why a session ended at this request.
type ended string

const (
	endedNone    ended = ""
	endedExpired ended = "expired"
	endedRevoked ended = "revoked"
)

// notices are the login page's words for why a session ended.
var notices = map[ended]string{
	endedExpired: "Your session expired. Log in again.",
	endedRevoked: "Your session ended: the token it was made with is no longer accepted here, or may no longer use the console. Log in again.",
}

// sessions are the console's sessions, on the bus: shared by every
// instance, kept across restarts.
type sessions struct {
	srv    *api.Server // set by Handler
	idle   time.Duration
	maxAge time.Duration
	now    func() time.Time
	log    *zap.Logger

	mu    sync.Mutex
	fpKey []byte // the fingerprint key, once read
}

func newSessions(cfg Config, now func() time.Time, log *zap.Logger) *sessions {
	cfg = cfg.WithDefaults()
	return &sessions{idle: cfg.SessionIdle, maxAge: cfg.SessionMax, now: now, log: log}
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// keyOf is the bus key of the session whose cookie is id.
func keyOf(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// csrfOf is the CSRF token of the session whose cookie is id: derived,
// so that the bus need not keep it.
func csrfOf(id string) string {
	m := hmac.New(sha256.New, []byte(id))
	m.Write([]byte("agentwork console csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func cookieOf(r *http.Request) string {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return ""
	}
	return c.Value
}

func (s *sessions) kv() jetstream.KeyValue { return s.srv.Bus().ConsoleSessions }

// unavailable wraps an error of the bus.
func unavailable(err error) error { return fmt.Errorf("console: the sessions on the bus: %w", err) }

// fingerprint is the keyed fingerprint of a token's SHA-256 for the
// session kept under the bus key at.
func (s *sessions) fingerprint(ctx context.Context, at string, sum [sha256.Size]byte) (string, error) {
	key, err := s.key(ctx)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(at))
	m.Write([]byte{0})
	m.Write(sum[:])
	return hex.EncodeToString(m.Sum(nil)), nil
}

// key reads the fingerprint key from agentwork_state, making it when
// there is none (the first instance to create it wins), and keeps it.
func (s *sessions) key(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fpKey != nil {
		return s.fpKey, nil
	}
	kv := s.srv.Bus().State
	for range 2 {
		e, err := kv.Get(ctx, fingerprintKey)
		if err == nil {
			k, derr := base64.RawURLEncoding.DecodeString(string(e.Value()))
			if derr != nil || len(k) < 32 {
				return nil, fmt.Errorf("console: %s in %s is not a key (delete it to have a new one made; every session ends)", fingerprintKey, bus.BucketState)
			}
			s.fpKey = k
			return k, nil
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, unavailable(err)
		}
		var k [32]byte
		_, _ = rand.Read(k[:])
		if _, err := kv.Create(ctx, fingerprintKey, []byte(base64.RawURLEncoding.EncodeToString(k[:]))); err == nil {
			s.fpKey = k[:]
			return s.fpKey, nil
		} else if !bus.IsConflict(err) {
			return nil, unavailable(err)
		}
	}
	return nil, fmt.Errorf("console: %s in %s keeps changing", fingerprintKey, bus.BucketState)
}

// ttl is how long the bus keeps rec written at now: its idle time, or
// less when its maximum age comes first. Whole seconds, at least one
// (the server's per-key TTLs are in seconds).
func (s *sessions) ttl(rec record, now time.Time) time.Duration {
	d := min(s.idle, rec.Created.Add(s.maxAge).Sub(now))
	return max(time.Second, (d + time.Second - 1).Truncate(time.Second))
}

func (s *sessions) expired(rec record, now time.Time) bool {
	return now.Sub(rec.Seen) > s.idle || now.Sub(rec.Created) > s.maxAge
}

// create starts a session of the credential cred, logged in with the
// token whose SHA-256 is tokenSum, and returns its cookie value.
func (s *sessions) create(ctx context.Context, cred string, tokenSum [sha256.Size]byte) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	id := randomToken()
	fp, err := s.fingerprint(ctx, keyOf(id), tokenSum)
	if err != nil {
		return "", err
	}
	now := s.now()
	rec := record{Cred: cred, Token: fp, Created: now, Seen: now}
	data, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	if _, err := s.kv().Create(ctx, keyOf(id), data, jetstream.KeyTTL(s.ttl(rec, now))); err != nil {
		return "", unavailable(err)
	}
	return id, nil
}

// get returns the session of r's cookie, checked against its credential
// as the server accepts it now. No cookie, or one the bus does not know:
// nil. A session that ends at this request (idle or too old: expired;
// its token no longer accepted, or no longer granted the console:
// revoked) is removed, and nil comes with why. An error is the bus's:
// whether r has a session is not known. When take is set, the flash is
// taken (cleared on the bus). The session's last request is written at
// most every refreshEvery.
func (s *sessions) get(r *http.Request, take bool) (*session, ended, error) {
	id := cookieOf(r)
	if id == "" {
		return nil, endedNone, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), busTimeout)
	defer cancel()
	key := keyOf(id)
	e, err := s.kv().Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, endedNone, nil
	}
	if err != nil {
		return nil, endedNone, unavailable(err)
	}
	var rec record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		s.log.Warn("console: a session on the bus is not valid JSON; it ends", zap.Error(err))
		s.remove(ctx, key)
		return nil, endedRevoked, nil
	}
	now := s.now()
	if s.expired(rec, now) {
		s.remove(ctx, key)
		return nil, endedExpired, nil
	}
	c, sum, ok := s.srv.Credential(rec.Cred)
	if ok {
		fp, err := s.fingerprint(ctx, key, sum)
		if err != nil {
			return nil, endedNone, err
		}
		ok = hmac.Equal([]byte(fp), []byte(rec.Token)) && c.Allows != nil && c.Allows(api.KindConsole, api.ConsoleRead)
	}
	if !ok {
		s.log.Info("console session ended: its token is no longer accepted for the console", zap.String("who", rec.Cred))
		s.remove(ctx, key)
		return nil, endedRevoked, nil
	}
	ss := &session{who: rec.Cred, cred: rec.Cred, write: c.Allows(api.KindConsole, api.ConsoleWrite), csrf: csrfOf(id), flash: rec.Flash}
	if c.Admin {
		ss.cred = ""
	}
	if flash := rec.Flash; now.Sub(rec.Seen) >= min(refreshEvery, s.idle/4) || (take && flash != "") {
		rec.Seen = now
		if take {
			rec.Flash = ""
		}
		err := s.write(ctx, key, rec, e.Revision(), func(v *record) {
			if take && v.Flash == flash {
				v.Flash = ""
			}
		})
		if err != nil {
			// The page is still served; the next request refreshes.
			s.log.Warn("console: refresh of a session", zap.Error(err))
		}
	}
	return ss, endedNone, nil
}

// write stores rec at key if it is still at revision rev; if it changed
// meanwhile, change is applied to what is there (if it is still there).
// Every write sets the key's TTL.
func (s *sessions) write(ctx context.Context, key string, rec record, rev uint64, change func(*record)) error {
	now := s.now()
	_, _, err := bus.UpdateAtExpiring(ctx, s.srv.Bus(), s.kv(), key, rec, rev, s.ttl(rec, now), func(v *record, found bool) (bool, error) {
		if !found {
			return false, nil // ended meanwhile
		}
		change(v)
		if v.Seen.Before(now) {
			v.Seen = now
		}
		return true, nil
	})
	return err
}

// setFlash leaves msg for the next page of r's session.
func (s *sessions) setFlash(r *http.Request, msg string) {
	msg = cut(msg, maxFlash)
	id := cookieOf(r)
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), busTimeout)
	defer cancel()
	key := keyOf(id)
	e, err := s.kv().Get(ctx, key)
	if err != nil {
		return // ended, or the bus is away: the message is lost
	}
	var rec record
	if json.Unmarshal(e.Value(), &rec) != nil {
		return
	}
	rec.Flash, rec.Seen = msg, s.now()
	if err := s.write(ctx, key, rec, e.Revision(), func(v *record) { v.Flash = msg }); err != nil {
		s.log.Warn("console: a session's message", zap.Error(err))
	}
}

// maxFlash bounds a flash message, in characters: it may echo what a
// user sent, and it is kept in the session's record (at most
// bus.ConsoleSessionMaxSize).
const maxFlash = 600

// end removes r's session from the bus.
func (s *sessions) end(r *http.Request) error {
	id := cookieOf(r)
	if id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), busTimeout)
	defer cancel()
	if err := s.kv().Purge(ctx, keyOf(id), jetstream.PurgeTTL(endedMarkerTTL)); err != nil {
		return unavailable(err)
	}
	return nil
}

// remove removes the session at key, logging a failure: it ends anyway
// (it is expired or no longer accepted, and is checked at each request).
func (s *sessions) remove(ctx context.Context, key string) {
	if err := s.kv().Purge(ctx, key, jetstream.PurgeTTL(endedMarkerTTL)); err != nil {
		s.log.Warn("console: remove an ended session", zap.Error(err))
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
