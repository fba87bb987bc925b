package webhook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/invopop/jsonschema"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// Limits of a task body, besides Config.MaxBody.
const (
	MaxTargets     = 16
	MaxMetadata    = 64
	MaxMetadataKey = 128
)

// Task is the body of POST /v1/tasks, the task.requested webhook.
type Task struct {
	// Prompt is the work to do, given to the model as the user turn.
	Prompt string `json:"prompt" jsonschema:"minLength=1,pattern=\\S,description=The work to do: the user turn given to the model. Required; not blank."`
	// Name is the task name, the last subject token: agentwork.request.<source>.<name>. Default "default".
	Name string `json:"name,omitempty" jsonschema:"default=default,description=Task name: 1-64 of a-z 0-9 _ -. Becomes the request subject's last token and the events' subject. Your credential may be limited to some names."`
	// Source is the request source. Default "task"; heartbeat, cron and delivery are never allowed.
	Source string `json:"source,omitempty" jsonschema:"default=task,description=Request source: 1-64 of a-z 0-9 _ -. Default task. heartbeat/cron/delivery are refused (403); your credential lists the sources it may use."`
	// Targets are connector names to deliver to; empty means the source's defaults.
	Targets []string `json:"targets,omitempty" jsonschema:"maxItems=16,uniqueItems=true,description=Targets to deliver the result to: connector names (each optionally followed by a colon and a destination such as a chat id). Empty: the source's default targets."`
	// Deliver is what is sent: auto (notify_user messages if any, else the reply), reply (the model's answer), notify (only notify_user calls) or none.
	Deliver string `json:"deliver,omitempty" jsonschema:"enum=auto,enum=reply,enum=notify,enum=none,description=auto: send the notify_user messages of the model when it sends any (else its final answer); reply: send the model's final answer; notify: send only what the model passes to notify_user; none: send nothing (the done event still carries the reply). Empty: the source's default (auto)."`
	// DedupWindow holds back a notification this source and name already
	// sent, with the same text to the same targets, within it.
	DedupWindow string `json:"dedup_window,omitempty" jsonschema:"pattern=^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$,description=A duration such as 30m or 24h (at most 720h): a notification of this source and name with the same text to the same targets as one sent within it is not sent again (skip duplicate). Empty: the source's default (runner.dedup_window)."`
	// Metadata is passed through to the events and notifications of the run.
	Metadata map[string]string `json:"metadata,omitempty" jsonschema:"description=String key/value pairs carried into the run's events and notifications."`

	credential string // the webhook credential that sent it (not the admin token's)
}

var taskFields = map[string]bool{"prompt": true, "name": true, "source": true, "targets": true, "deliver": true, "dedup_window": true, "metadata": true}

// ParseTask decodes and validates a task body. Unknown fields, a body that
// is not one JSON object, wrongly typed and invalid fields are reported as
// field errors; defaults (name "default", source "task") are applied.
// known, when not empty, are the connectors that exist.
func ParseTask(body []byte, known []string) (Task, []problem.FieldError) {
	var t Task
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil {
		return t, []problem.FieldError{{Field: "", Detail: "body is not a JSON object: " + jsonError(err)}}
	}
	if fields == nil {
		return t, []problem.FieldError{{Field: "", Detail: "body is null; want a JSON object"}}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return t, []problem.FieldError{{Field: "", Detail: "unexpected data after the JSON object"}}
	}
	var errs []problem.FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, problem.FieldError{Field: field, Detail: fmt.Sprintf(format, a...)})
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !taskFields[k] {
			add(k, "unknown field; want prompt, name, source, targets, deliver, dedup_window or metadata")
		}
	}
	str := func(name string, dst *string) {
		raw, ok := fields[name]
		if !ok || string(raw) == "null" {
			return
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			add(name, "want a string")
		}
	}
	str("prompt", &t.Prompt)
	str("name", &t.Name)
	str("source", &t.Source)
	str("deliver", &t.Deliver)
	str("dedup_window", &t.DedupWindow)
	if raw, ok := fields["targets"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &t.Targets); err != nil {
			add("targets", "want an array of connector names (strings)")
		}
	}
	if raw, ok := fields["metadata"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &t.Metadata); err != nil {
			add("metadata", "want an object of string values")
		}
	}
	// Check the values too, except of fields whose type was already wrong.
	typed := map[string]bool{}
	for _, e := range errs {
		typed[e.Field] = true
	}
	for _, e := range t.normalize(known) {
		if f, _, _ := strings.Cut(e.Field, "["); !typed[f] {
			errs = append(errs, e)
		}
	}
	return t, errs
}

// normalize applies defaults and checks every field.
func (t *Task) normalize(known []string) []problem.FieldError {
	var errs []problem.FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, problem.FieldError{Field: field, Detail: fmt.Sprintf(format, a...)})
	}
	switch {
	case strings.TrimSpace(t.Prompt) == "":
		add("prompt", "required; want the work to do as a non-blank string")
	case !utf8.ValidString(t.Prompt):
		add("prompt", "not valid UTF-8")
	}
	if t.Name == "" {
		t.Name = "default"
	}
	if !bus.ValidToken(t.Name) {
		add("name", "%q: want 1-64 characters of a-z, 0-9, _ and -", t.Name)
	}
	if t.Source == "" {
		t.Source = bus.SourceTask
	}
	if !bus.ValidToken(t.Source) {
		add("source", "%q: want 1-64 characters of a-z, 0-9, _ and -", t.Source)
	}
	switch t.Deliver {
	case "", agentwork.DeliverAuto, agentwork.DeliverReply, agentwork.DeliverNotify, agentwork.DeliverNone:
	default:
		add("deliver", "%q: want auto, reply, notify or none", t.Deliver)
	}
	if _, err := agentwork.ParseDedupWindow(t.DedupWindow); err != nil {
		add("dedup_window", "%q: want a duration such as 30m or 24h, at most 720h", t.DedupWindow)
	}
	if len(t.Targets) > MaxTargets {
		add("targets", "%d targets; at most %d", len(t.Targets), MaxTargets)
	}
	seen := map[string]bool{}
	for i, c := range t.Targets {
		f := fmt.Sprintf("targets[%d]", i)
		name, _ := connectors.SplitTarget(c)
		switch err := connectors.CheckTarget(f, c); {
		case err != nil:
			add(f, "%s", strings.TrimPrefix(err.Error(), f+": "))
		case seen[c]:
			add(f, "%q is listed twice", c)
		case len(known) > 0 && !contains(known, name):
			add(f, "%q is not a configured connector; have %s", name, strings.Join(known, ", "))
		}
		seen[c] = true
	}
	if len(t.Metadata) > MaxMetadata {
		add("metadata", "%d entries; at most %d", len(t.Metadata), MaxMetadata)
	}
	keys := make([]string, 0, len(t.Metadata))
	for k := range t.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" || len(k) > MaxMetadataKey || !utf8.ValidString(k) {
			add("metadata", "key %q: want 1-%d characters of valid UTF-8", truncate(k, 40), MaxMetadataKey)
		}
	}
	return errs
}

// Request is the agentwork request the task asks for.
func (t Task) Request() agentwork.Request {
	return agentwork.Request{
		Source: t.Source, Name: t.Name, Prompt: t.Prompt,
		Targets: t.Targets, Deliver: t.Deliver, DedupWindow: t.DedupWindow, Metadata: t.Metadata,
		Credential: t.credential,
	}
}

// Hash is a digest of the normalized task: two bodies that ask for the same
// work (field order, white space, explicit defaults aside) hash the same.
// It tells a retry from an idempotency key reused for other work.
func (t Task) Hash() string {
	b, _ := json.Marshal(t) // map keys are sorted by encoding/json
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Schema is the JSON Schema (draft 2020-12) of the task body.
func Schema() json.RawMessage {
	r := &jsonschema.Reflector{DoNotReference: true, Anonymous: true}
	s := r.Reflect(&Task{})
	// Constraints the struct tags cannot spell (their values hold commas).
	token := func(p *jsonschema.Schema) {
		p.Pattern, p.MaxLength = "^[a-z0-9_-]+$", ptr(uint64(64))
	}
	for _, f := range []string{"name", "source"} {
		if p, ok := s.Properties.Get(f); ok {
			token(p)
		}
	}
	if p, ok := s.Properties.Get("targets"); ok && p.Items != nil {
		// A connector name, then optionally :<destination> (connectors.CheckTarget).
		p.Items.Pattern = `^[a-z0-9_-]{1,64}(:\S{1,256})?$`
	}
	if p, ok := s.Properties.Get("metadata"); ok {
		p.MaxProperties = ptr(uint64(MaxMetadata))
		p.PropertyNames = &jsonschema.Schema{MinLength: ptr(uint64(1)), MaxLength: ptr(uint64(MaxMetadataKey))}
	}
	s.ID = "https://github.com/agentwork/agentwork/blob/main/docs/webhooks.md#task-body"
	s.Title = "task.requested"
	s.Description = "Body of POST /v1/tasks."
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("webhook: reflect schema: %v", err)) // programmer error only
	}
	return b
}

func ptr[T any](v T) *T { return &v }

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("got %s", te.Value)
	default:
		return err.Error()
	}
}
