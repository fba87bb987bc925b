package webhook

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// Header names besides the Standard Webhooks ones.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	maxIdempotencyKey    = 255
)

// RetryAfter is the Retry-After of a 503 when the bus is down.
const RetryAfter = 5 * time.Second

// Handler serves POST /v1/tasks: it authenticates the caller (a Standard
// Webhooks signature or a bearer token), validates the body, checks the
// credential's grant, deduplicates on webhook-id / Idempotency-Key, and
// answers 202 {"id": <request id>} once JetStream stored the request.
// Nothing is published for a request that is refused. Safe for concurrent
// use; it starts no goroutines.
type Handler struct {
	bus        *bus.Bus
	cfg        Config
	tokens     []namedToken
	verifier   verifier
	connectors []string
	configs    connectors.Configs // to check a target's destination; nil: not checked
	tasks      Tasks
	log        *zap.Logger
	now        func() time.Time
	timeout    time.Duration
	inflight   *semaphore.Weighted // body bytes being received and queued
	unverified *semaphore.Weighted // of those, of signed requests not verified yet
}

var _ http.Handler = (*Handler)(nil)

type namedToken struct {
	name  string
	field string // webhook.tokens[i]
	sum   [sha256.Size]byte
	grant Grant
	mcp   *MCPGrant
}

// Option configures New.
type Option func(*Handler)

// WithLogger sets the logger (default zap.NewNop()). Tokens, signatures and
// prompts are never logged.
func WithLogger(l *zap.Logger) Option { return func(h *Handler) { h.log = l } }

// WithClock sets the time source the timestamp tolerance is checked against
// (default time.Now).
func WithClock(now func() time.Time) Option { return func(h *Handler) { h.now = now } }

// WithConnectors names the connectors that exist: a task targeting another
// one is refused with 400 instead of being queued for nobody.
func WithConnectors(names ...string) Option {
	return func(h *Handler) { h.connectors = append([]string(nil), names...) }
}

// WithDestinations gives the configs of the connectors: a task target's
// destination must be one its connector type takes (a chat id, a channel,
// an address), and for a connector on the bus (type nats) none of the
// bus's own subjects, else the task is refused with 400.
func WithDestinations(cs connectors.Configs) Option {
	return func(h *Handler) { h.configs = cs }
}

// WithTimeout bounds the bus work of one request (idempotency record and
// publish). Default 10s; past it the caller gets 503.
func WithTimeout(d time.Duration) Option { return func(h *Handler) { h.timeout = d } }

// New returns the handler for cfg. It validates cfg and does no I/O.
func New(b *bus.Bus, cfg Config, opts ...Option) (*Handler, error) {
	if b == nil {
		return nil, errors.New("webhook: no bus")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{bus: b, cfg: cfg, log: zap.NewNop(), now: time.Now, timeout: 10 * time.Second, inflight: semaphore.NewWeighted(cfg.MaxInflight),
		unverified: semaphore.NewWeighted(max(cfg.MaxInflight/2, cfg.MaxBody))}
	for i, t := range cfg.Tokens {
		h.tokens = append(h.tokens, namedToken{name: t.Name, field: fmt.Sprintf("webhook.tokens[%d]", i), sum: sha256.Sum256([]byte(t.Token)), grant: t.grant(), mcp: t.MCP})
	}
	h.verifier.tolerance = cfg.Tolerance
	for i, s := range cfg.Secrets {
		key, _ := DecodeSecret(s.Secret) // validated above
		h.verifier.keys = append(h.verifier.keys, namedKey{name: s.Name, field: fmt.Sprintf("webhook.secrets[%d]", i), key: key, grant: s.Grant})
	}
	for _, o := range opts {
		o(h)
	}
	return h, nil
}

// Credential is an authenticated caller: its name (also in the request's
// CloudEvents source, agentwork/webhook/<name>) and what it may request.
type Credential struct {
	Name  string
	Grant Grant
	// Field is where the credential is configured (webhook.tokens[0]); ""
	// for the api server's admin token, which no grant restricts and
	// whose requests carry no credential.
	Field string
}

// ServeHTTP authenticates the request with the configured tokens and
// secrets and serves it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.serve(w, r, nil) }

// ServeAs serves a request its caller already authenticated as c (the api
// server uses it for the admin token). Signature headers, if any, are then
// not checked, but webhook-id still deduplicates.
func (h *Handler) ServeAs(w http.ResponseWriter, r *http.Request, c Credential) { h.serve(w, r, &c) }

// Accepted is the 202 response body.
type Accepted struct {
	// ID is the request id: the CloudEvents id of the request, and the
	// causationid of the run's events.
	ID string `json:"id"`
	// Duplicate is true when the idempotency key was seen before and no
	// new request was queued.
	Duplicate bool `json:"duplicate,omitempty"`
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, cred *Credential) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		problem.Error(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	sig, isSigned, sigErr := signedHeaders(r.Header)
	if cred == nil {
		switch {
		case len(h.tokens) == 0 && len(h.verifier.keys) == 0:
			h.unauthorized(w, "this server has no webhook credentials configured (webhook.tokens, webhook.secrets), so it accepts no tasks")
			return
		case isSigned && sigErr != nil:
			h.unauthorized(w, sigErr.Error())
			return
		case !isSigned:
			c, detail := h.bearer(r)
			if c == nil {
				h.unauthorized(w, detail)
				return
			}
			cred = c
		}
	}
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		w.Header().Set("Accept-Post", "application/json")
		problem.Error(w, http.StatusUnsupportedMediaType, err.Error())
		return
	}
	if r.ContentLength > h.cfg.MaxBody {
		h.tooLarge(w)
		return
	}
	// Bound the bytes held at once: a body, its parse and its event live
	// until the bus has the task.
	need := h.cfg.MaxBody
	if r.ContentLength > 0 {
		need = r.ContentLength
	}
	if cred == nil && len(h.verifier.keys) == 0 {
		h.unauthorized(w, "signed requests are not accepted: no webhook.secrets are configured")
		return
	}
	// A signed request is only known to be genuine once its body is read:
	// until then it holds bytes of a budget of its own as well (half of
	// max_inflight), so senders of fake signatures cannot take it all.
	unverified := cred == nil
	if unverified && !h.unverified.TryAcquire(need) {
		problem.Unavailable(w, time.Second, "too many signed task bodies are being received at once; nothing was queued, retry in a second")
		return
	}
	release := func() {
		if unverified {
			h.unverified.Release(need)
			unverified = false
		}
	}
	defer release()
	if !h.inflight.TryAcquire(need) {
		problem.Unavailable(w, time.Second, "too many task bodies are being received at once; nothing was queued, retry in a second")
		return
	}
	defer h.inflight.Release(need)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.tooLarge(w)
			return
		}
		problem.Error(w, http.StatusBadRequest, "could not read the body: "+err.Error())
		return
	}
	signedID := ""
	if cred == nil { // signed
		k, err := h.verifier.verify(sig, body, h.now())
		if err != nil {
			h.log.Info("webhook signature refused", zap.String("webhook_id", truncate(sig.id, 64)), zap.Error(err))
			h.unauthorized(w, err.Error())
			return
		}
		cred = &Credential{Name: k.name, Grant: k.grant, Field: k.field}
		release()
		signedID = sig.id
	}
	key, err := idempotencyKey(r.Header, signedID)
	if err != nil {
		problem.Invalid(w, "the Idempotency-Key header is invalid: "+err.Error(), problem.FieldError{Field: HeaderIdempotencyKey, Detail: err.Error()})
		return
	}
	task, ferrs := ParseTask(body, h.connectors)
	if len(ferrs) == 0 {
		ferrs = h.checkDestinations(task)
	}
	if len(ferrs) > 0 {
		problem.Invalid(w, summarize(ferrs), ferrs...)
		return
	}
	if task.Source == bus.SourceWorkflow {
		problem.Write(w, problem.Details{Type: problem.TypeForbidden, Status: http.StatusForbidden, Title: "Forbidden",
			Detail: "source \"workflow\" is not a task source: start a workflow with POST /v1/workflows/{name}/runs"})
		return
	}
	if task.Source == api.KindConsole {
		problem.Write(w, problem.Details{Type: problem.TypeForbidden, Status: http.StatusForbidden, Title: "Forbidden",
			Detail: "source \"console\" is not a task source: it grants logging in to the web console"})
		return
	}
	if !cred.Grant.Allows(task.Source, task.Name) {
		detail := fmt.Sprintf("credential %q may not request source %q, name %q", cred.Name, task.Source, task.Name)
		if reserved(task.Source) {
			detail = fmt.Sprintf("source %q can never be requested through the webhook", task.Source)
		}
		problem.Write(w, problem.Details{Type: problem.TypeForbidden, Status: http.StatusForbidden, Title: "Forbidden", Detail: detail})
		return
	}
	if detail := cred.refusedTarget(task.Targets); detail != "" {
		problem.Write(w, problem.Details{Type: problem.TypeForbidden, Status: http.StatusForbidden, Title: "Forbidden", Detail: detail})
		return
	}
	// Every task has an idempotency key before it is published: the
	// caller's, or one made here and answered, so that a caller who could
	// not learn the outcome can retry without the work running twice.
	generated := key == ""
	if generated {
		key = generatedKeyPrefix + bus.NewID()
	}
	w.Header().Set(HeaderIdempotencyKey, key)
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	acc, err := h.enqueue(ctx, task, key, generated, *cred)
	log := h.log.With(zap.String("credential", cred.Name), zap.String("source", task.Source), zap.String("name", task.Name))
	switch {
	case errors.Is(err, errConflict):
		problem.Write(w, problem.Details{Type: problem.TypeIdempotencyConflict, Title: "Idempotency key reused", Status: http.StatusUnprocessableEntity,
			Detail: "this idempotency key (webhook-id or Idempotency-Key) was used for a different task body; use a new key for new work"})
		return
	case bus.IsStoreFull(err):
		h.bus.NoteWrite(err)
		log.Debug("task not queued: store full", zap.Error(err))
		problem.Write(w, problem.Details{Type: problem.TypeStoreFull, Title: "Insufficient storage", Status: http.StatusInsufficientStorage,
			Detail: "the bus's store is full (bus.max_store, or the disk): nothing was queued; free space or raise bus.max_store, then retry"})
		return
	case err != nil && notStored(err):
		log.Warn("task not queued", zap.Error(err))
		problem.Unavailable(w, RetryAfter, "the bus is not available, nothing was queued; retry later")
		return
	case err != nil:
		// No answer in time: the bus may have stored it.
		log.Warn("task not confirmed by the bus; it may be queued", zap.String("idempotency_key", key), zap.Error(err))
		problem.Unavailable(w, RetryAfter, fmt.Sprintf("the bus did not confirm the task in time, so it may be queued or not; retry with the header %s: %s and it is queued at most once", HeaderIdempotencyKey, key))
		return
	}
	log.Info("task queued", zap.String("request", acc.ID), zap.Bool("duplicate", acc.Duplicate))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(acc)
}

// CheckTargets checks targets against the grant the credential called
// name has now: nil when it allows them all (Grant.AllowsTarget), else an
// error that names the first target refused and the field to change, or
// says the credential is no longer configured. The cron scheduler asks it
// at each fire of a job a credential's task created (cron.WithGrants).
func (h *Handler) CheckTargets(name string, targets []string) error {
	var cred *Credential
	for _, t := range h.tokens {
		if t.name == name {
			cred = &Credential{Name: t.name, Grant: t.grant, Field: t.field}
		}
	}
	for _, k := range h.verifier.keys {
		if k.name == name {
			cred = &Credential{Name: k.name, Grant: k.grant, Field: k.field}
		}
	}
	if cred == nil {
		return fmt.Errorf("credential %q is no longer configured (webhook.tokens, webhook.secrets)", name)
	}
	for _, t := range targets {
		if !cred.Grant.AllowsTarget(t) {
			return fmt.Errorf("its grant no longer allows the target %q (%s.targets)", t, cred.Field)
		}
	}
	return nil
}

// checkDestinations checks each target's destination against its
// connector's type (see WithDestinations).
func (h *Handler) checkDestinations(task Task) []problem.FieldError {
	if h.configs == nil {
		return nil
	}
	var errs []problem.FieldError
	for i, t := range task.Targets {
		name, dest := connectors.SplitTarget(t)
		c, ok := h.configs[name]
		if !ok || dest == "" {
			continue
		}
		if err := connectors.CheckDestinationOn(c, h.bus.Subjects, dest); err != nil {
			errs = append(errs, problem.FieldError{Field: fmt.Sprintf("targets[%d]", i), Detail: fmt.Sprintf("%q: %v", t, err)})
		}
	}
	return errs
}

// refusedTarget says why the first of targets c's grant does not allow is
// refused, and which field to change; "" when it allows them all.
func (c Credential) refusedTarget(targets []string) string {
	if c.Field == "" {
		return "" // the admin token
	}
	for i, t := range targets {
		if c.Grant.AllowsTarget(t) {
			continue
		}
		why := fmt.Sprintf("its grant's targets (%s) do not include it", strings.Join(c.Grant.Targets, ", "))
		if len(c.Grant.Targets) == 0 {
			why = "its grant lists no targets, so it may name a connector alone (to the connector's configured destination) but no destination"
		}
		add := fmt.Sprintf("%q", t)
		if p := suggest(t); p != t {
			add += fmt.Sprintf(" (or a pattern such as %q)", p)
		}
		return fmt.Sprintf("targets[%d]: credential %q may not send to %q: %s; nothing was queued. To allow it, add %s to %s.targets, or leave targets out to use the source's default targets",
			i, c.Name, t, why, add, c.Field)
	}
	return ""
}

// suggest is a pattern that allows target and its neighbours.
func suggest(target string) string {
	name, dest, has := strings.Cut(target, ":")
	if !has {
		return name
	}
	if at := strings.LastIndexByte(dest, '@'); at > 0 {
		return name + ":*" + dest[at:]
	}
	return name + ":*"
}

func (h *Handler) unauthorized(w http.ResponseWriter, detail string) {
	problem.Unauthorized(w, "agentwork", detail)
}

func (h *Handler) tooLarge(w http.ResponseWriter) {
	problem.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes; send the large input elsewhere and reference it in the prompt", h.cfg.MaxBody))
}

// bearer finds the token credential of r, or says what is wrong.
func (h *Handler) bearer(r *http.Request) (*Credential, string) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return nil, "missing credentials: send Authorization: Bearer <token> or Standard Webhooks signature headers (webhook-id, webhook-timestamp, webhook-signature)"
	}
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return nil, "Authorization: want Bearer <token>"
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	var found *namedToken
	for i := range h.tokens { // compare against all: timing does not tell which matched
		if subtle.ConstantTimeCompare(sum[:], h.tokens[i].sum[:]) == 1 && found == nil {
			found = &h.tokens[i]
		}
	}
	if found == nil {
		return nil, "the bearer token is not valid"
	}
	return &Credential{Name: found.name, Grant: found.grant, Field: found.field}, ""
}

func checkContentType(ct string) error {
	if ct == "" {
		return errors.New("no Content-Type; send application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("content type %q cannot be parsed; send application/json", ct)
	}
	if mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return fmt.Errorf("content type %q is not JSON; send application/json", mt)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return fmt.Errorf("charset %q: send UTF-8", cs)
	}
	return nil
}

// idempotencyKey is the signed webhook-id, else the Idempotency-Key header
// (a quoted or bare string), else an unsigned webhook-id header; "" if none.
func idempotencyKey(h http.Header, signedID string) (string, error) {
	key := signedID
	if key == "" {
		key = h.Get(HeaderIdempotencyKey)
		if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
			key = key[1 : len(key)-1]
		}
		if key == "" && len(h.Values(HeaderIdempotencyKey)) > 0 {
			return "", errors.New("empty; send a unique value per task, e.g. a UUID")
		}
	}
	if key == "" {
		key = h.Get(HeaderID)
	}
	if len(key) > maxIdempotencyKey {
		return "", fmt.Errorf("%d characters; at most %d", len(key), maxIdempotencyKey)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return "", errors.New("contains control characters")
		}
	}
	return key, nil
}

// generatedKeyPrefix starts the idempotency keys the handler makes for
// tasks sent without one: the rest is the request id.
const generatedKeyPrefix = "aw-"

// idOfGeneratedKey returns the request id of a key the handler generated.
func idOfGeneratedKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, generatedKeyPrefix)
	if !ok {
		return "", false
	}
	u, err := uuid.Parse(rest)
	if err != nil || u.String() != rest {
		return "", false
	}
	return rest, true
}

// notStored reports whether err says for certain that the bus stored
// nothing: the connection was down before the publish, no stream took the
// subject, or the server answered with an error. A timeout (the bus took
// the publish but did not answer in time) is not certain.
func notStored(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, bus.ErrClosed) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.As(err, &apiErr)
}

func summarize(errs []problem.FieldError) string {
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		if e.Field == "" {
			parts = append(parts, e.Detail)
		} else {
			parts = append(parts, e.Field+": "+e.Detail)
		}
	}
	return "the task body is invalid: " + strings.Join(parts, "; ")
}

// The idempotency record, in bus.Locks under idem.<sha256(key)>.
type record struct {
	ID        string    `json:"id"`
	Hash      string    `json:"hash"`
	Published bool      `json:"published"`
	Time      time.Time `json:"time"`
}

var errConflict = errors.New("webhook: idempotency key reused with another body")

// enqueue publishes the task once per idempotency key. A key's record is
// created (atomically, across instances) before the publish with the
// request id it will use, so a retry, concurrent or after a failed
// publish, reuses that id and the Nats-Msg-Id makes JetStream store it once.
// The record outlives the stream's duplicate window (bus.RequestsDuplicates,
// minutes): it lives for the bucket's TTL (bus.LocksTTL, 7 days), the
// webhook's idempotency period.
//
// A key this handler generated (the caller sent none) is published without
// a record, its request id taken from the key: a caller who retries with it
// (after a 503 that could not say whether the task was stored) gets a
// record with that same id, and the Nats-Msg-Id stores the task once
// within the requests stream's duplicate window.
func (h *Handler) enqueue(ctx context.Context, task Task, key string, generated bool, cred Credential) (Accepted, error) {
	if nc := h.bus.Conn(); nc == nil || !nc.IsConnected() {
		return Accepted{}, bus.ErrClosed
	}
	if cred.Field != "" {
		// The runs it starts, and the jobs they create, act for it: a
		// job's targets are checked against its grant at every fire.
		task.credential = cred.Name
	}
	opts := agentwork.PublishOptions{Producer: "agentwork/webhook/" + cred.Name, Now: h.now()}
	sum := sha256.Sum256([]byte(key))
	digest := hex.EncodeToString(sum[:])
	kvKey := "idem." + digest
	opts.MsgID = "webhook." + digest
	id, ok := idOfGeneratedKey(key)
	if generated {
		opts.EventID = id
		pub, err := agentwork.Publish(ctx, h.bus, task.Request(), opts)
		return Accepted{ID: pub.ID}, err
	}
	if !ok {
		id = bus.NewID()
	}
	hash := task.Hash()
	created := true // unless the create conflicts
	fresh := record{ID: id, Hash: hash, Time: h.now().UTC()}
	rec, rev, err := bus.UpdateAt(ctx, h.bus.Locks, kvKey, fresh, 0, func(r *record, found bool) (bool, error) {
		// Another request with this key won the race: use its record.
		created = !found
		if !found {
			*r = fresh
		}
		return !found, nil
	})
	if errors.As(err, new(*bus.CorruptError)) || (err == nil && rec.ID == "") {
		return Accepted{}, fmt.Errorf("webhook: idempotency record %s is corrupt: %v", kvKey, err)
	}
	if err != nil {
		return Accepted{}, fmt.Errorf("webhook: idempotency record: %w", err)
	}
	if created {
		return h.publish(ctx, task, opts, kvKey, rec, rev, false)
	}
	if rec.Hash != hash {
		return Accepted{}, errConflict
	}
	if rec.Published {
		return Accepted{ID: rec.ID, Duplicate: true}, nil
	}
	// Created but not known to be published (in flight elsewhere, or an
	// earlier publish failed): publish with the same id and msg id.
	return h.publish(ctx, task, opts, kvKey, rec, rev, true)
}

func (h *Handler) publish(ctx context.Context, task Task, opts agentwork.PublishOptions, kvKey string, rec record, rev uint64, seen bool) (Accepted, error) {
	opts.EventID = rec.ID
	pub, err := agentwork.Publish(ctx, h.bus, task.Request(), opts)
	if err != nil {
		return Accepted{}, err // the record stays pending: a retry reuses its id
	}
	rec.Published = true
	if _, _, err := bus.UpdateAt(ctx, h.bus.Locks, kvKey, rec, rev, func(cur *record, found bool) (bool, error) {
		if !found || cur.ID != rec.ID || cur.Published {
			return false, nil
		}
		cur.Published = true
		return true, nil
	}); err != nil {
		// Harmless within the stream's duplicate window (a retry publishes
		// again and JetStream drops it) and while the run claim lives (it
		// acks the copy unrun); logged for the rare case beyond.
		h.log.Debug("idempotency record not marked published", zap.String("request", rec.ID), zap.Error(err))
	}
	return Accepted{ID: rec.ID, Duplicate: seen || pub.Duplicate}, nil
}
