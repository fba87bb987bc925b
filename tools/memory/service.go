package memory

import (
	"context"
	"encoding/json"

	"github.com/agentwork/agentwork/bus"
)

// ServiceName is the memory API on NATS: <prefix>.api.memory.<verb>.
const ServiceName = "memory"

// Service verbs. Requests and replies are JSON; an error comes back as a
// bus.ServiceError (an Error).
const (
	VerbList    = "list"    // {} → [Doc] (without text)
	VerbGet     = "get"     // {"name"} → Doc
	VerbPut     = "put"     // {"name", "text", "by", "revision"?} → Doc
	VerbHistory = "history" // {"name"} → [Doc], newest first
)

// ServiceRequest is the body of a memory service request.
type ServiceRequest struct {
	// Name is the document (see Store.Resolve).
	Name string `json:"name,omitempty"`
	// Text is the whole new document (put).
	Text string `json:"text,omitempty"`
	// By says who writes (put), e.g. "agentwork memory edit".
	By string `json:"by,omitempty"`
	// Revision, if set, makes put a compare-and-set at it (0: the
	// document must not exist).
	Revision *uint64 `json:"revision,omitempty"`
}

// Service is the memory API on NATS, as every instance serves it: what
// agentwork memory show|edit|export|import call.
func (s *Store) Service() bus.Service {
	svc := bus.Service{Name: ServiceName, Description: "agentwork memory: list, get, put, history"}
	for _, verb := range []string{VerbList, VerbGet, VerbPut, VerbHistory} {
		svc.Endpoints = append(svc.Endpoints, bus.Endpoint{Verb: verb, Handle: func(ctx context.Context, body []byte) (any, error) {
			var r ServiceRequest
			if len(body) > 0 {
				if err := json.Unmarshal(body, &r); err != nil {
					return nil, errorf(ErrInvalid, "request body: %v", err)
				}
			}
			switch verb {
			case VerbList:
				return s.List(ctx)
			case VerbGet:
				return s.Read(ctx, r.Name)
			case VerbPut:
				by := r.By
				if by == "" {
					by = "api"
				}
				return s.Put(ctx, r.Name, r.Text, by, r.Revision)
			default:
				return s.History(ctx, r.Name)
			}
		}})
	}
	return svc
}

// Client calls the memory service of a running runtime.
type Client struct{ bus *bus.Bus }

// NewClient returns a client of the memory service on b.
func NewClient(b *bus.Bus) *Client { return &Client{bus: b} }

// List returns the documents, without their text.
func (c *Client) List(ctx context.Context) ([]Doc, error) {
	var out []Doc
	return out, c.bus.Call(ctx, ServiceName, VerbList, ServiceRequest{}, &out)
}

// Get returns the document called name; ErrNotFound when it is empty.
func (c *Client) Get(ctx context.Context, name string) (Doc, error) {
	var out Doc
	return out, c.bus.Call(ctx, ServiceName, VerbGet, ServiceRequest{Name: name}, &out)
}

// History returns the kept revisions of the document called name.
func (c *Client) History(ctx context.Context, name string) ([]Doc, error) {
	var out []Doc
	return out, c.bus.Call(ctx, ServiceName, VerbHistory, ServiceRequest{Name: name}, &out)
}

// Put replaces the document called name (see Store.Put).
func (c *Client) Put(ctx context.Context, name, text, by string, rev *uint64) (Doc, error) {
	var out Doc
	return out, c.bus.Call(ctx, ServiceName, VerbPut, ServiceRequest{Name: name, Text: text, By: by, Revision: rev}, &out)
}
