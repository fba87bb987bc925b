package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ContentType is the header value of every message agentwork publishes.
const ContentType = "application/cloudevents+json; charset=utf-8"

// Event is a CloudEvents 1.0 structured JSON envelope. Every message on the
// bus is one: requests, run outcomes, deliveries. A subscriber needs nothing
// from agentwork to read it.
type Event struct {
	SpecVersion string `json:"specversion"`
	// ID is a UUIDv7 (sortable by time); also the Nats-Msg-Id.
	ID string `json:"id"`
	// Source is a URI-reference naming the producer, e.g. "agentwork/heartbeat".
	Source string `json:"source"`
	// Type is agentwork.<source>.<outcome|requested>, e.g. "agentwork.cron.done".
	Type string `json:"type"`
	// Subject is the job id / heartbeat name / task name.
	Subject         string          `json:"subject,omitempty"`
	Time            time.Time       `json:"time"`
	DataContentType string          `json:"datacontenttype,omitempty"`
	Data            json.RawMessage `json:"data,omitempty"`
	// RunID identifies the run an event belongs to (extension attribute).
	RunID string `json:"runid,omitempty"`
	// CausationID is the id of the request that caused the event (extension).
	CausationID string `json:"causationid,omitempty"`
}

// NewID returns a new UUIDv7 string.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// NewEvent builds an event with a fresh id, the given type parts and data
// marshalled as JSON.
func NewEvent(source, typ, subject string, now time.Time, data any) (Event, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("bus: marshal %s data: %w", typ, err)
	}
	return Event{
		SpecVersion:     "1.0",
		ID:              NewID(),
		Source:          source,
		Type:            typ,
		Subject:         subject,
		Time:            now.UTC(),
		DataContentType: "application/json",
		Data:            raw,
	}, nil
}

// Validate checks the attributes CloudEvents requires.
func (e Event) Validate() error {
	var errs []error
	if e.SpecVersion != "1.0" {
		errs = append(errs, fmt.Errorf("specversion %q: want 1.0", e.SpecVersion))
	}
	if e.ID == "" {
		errs = append(errs, errors.New("id is empty"))
	}
	if e.Source == "" {
		errs = append(errs, errors.New("source is empty"))
	}
	if e.Type == "" {
		errs = append(errs, errors.New("type is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bus: invalid event: %w", err)
	}
	return nil
}

// DecodeEvent parses and validates an envelope.
func DecodeEvent(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("bus: decode event: %w", err)
	}
	return e, e.Validate()
}

// DecodeData unmarshals the event's data into v.
func (e Event) DecodeData(v any) error {
	if len(e.Data) == 0 {
		return fmt.Errorf("bus: event %s has no data", e.ID)
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("bus: event %s data: %w", e.ID, err)
	}
	return nil
}

// TypeOf builds an event type: agentwork.<source>.<what>.
func TypeOf(source, what string) string { return "agentwork." + source + "." + what }
