package agentwork

// The operator's view of the tools: `agentwork tools list|call` over NATS
// (a Service every instance serves) and GET|POST /v1/tools (package api).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/mcp"
)

// ToolInfo is one tool as `agentwork tools list` shows it.
type ToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
}

// ToolList is the reply to list: the tools offered now to the runs of a
// source and name (with their scope), or every tool when no source is
// given, and the state of every MCP server.
type ToolList struct {
	// Source and Name are those asked for; both empty: every tool.
	Source string `json:"source,omitempty"`
	Name   string `json:"name,omitempty"`
	// Scope, From and Notify are the Toolset's, when a source is given.
	Scope  tools.Scope `json:"scope,omitempty"`
	From   string      `json:"from,omitempty"`
	Notify bool        `json:"notify,omitempty"`
	// Tools are sorted by name.
	Tools   []ToolInfo   `json:"tools"`
	Servers []mcp.Status `json:"servers"`
}

// ToolRequest is the JSON body of a request to the tools service.
type ToolRequest struct {
	// Source and Name select the runs whose tools list shows; a Name
	// without a Source is a bad request. Empty: every tool.
	Source string `json:"source,omitempty"`
	Name   string `json:"name,omitempty"`
	// Tool and Arguments (a JSON object; none is {}) are what call runs.
	Tool      string          `json:"tool,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Service verbs: <prefix>.api.tools.<verb>.
const (
	ToolsService = "tools"
	VerbList     = "list"
	VerbCall     = "call"
)

// Errors of the tools service, for errors.Is on the client's side.
var (
	ErrToolRequest = &bus.ServiceError{Status: http.StatusBadRequest, Code: "bad_request", Detail: "bad request"}
	ErrNoTool      = &bus.ServiceError{Status: http.StatusNotFound, Code: "not_found", Detail: "no such tool"}
)

// ToolAdmin answers what an operator asks about the tools: what the runs
// of a source and name may use, the state of the MCP servers, and a call
// by hand. Safe for concurrent use.
type ToolAdmin struct {
	runner  *Runner
	servers func() []mcp.Status
}

// NewToolAdmin returns the admin of r's tools; servers, if not nil, reports
// the MCP servers (mcp.Manager.Status).
func NewToolAdmin(r *Runner, servers func() []mcp.Status) *ToolAdmin {
	if servers == nil {
		servers = func() []mcp.Status { return nil }
	}
	return &ToolAdmin{runner: r, servers: servers}
}

// List returns the tools the runs of source and name are offered now (see
// Runner.Toolset), or every tool the runner has when source is empty, and
// the servers' state. An unknown source, or a name without a source, is an
// ErrToolRequest.
func (a *ToolAdmin) List(ctx context.Context, source, name string) (ToolList, error) {
	out := ToolList{Source: source, Name: name, Servers: a.servers()}
	if out.Servers == nil {
		out.Servers = []mcp.Status{}
	}
	var specs []tools.Spec
	switch {
	case source == "" && name != "":
		return ToolList{}, requestError("a name (%q) needs a source: the tools of a name are those of its source's runs of that name", name)
	case source == "":
		specs = a.runner.allTools().Specs()
	default:
		ts, err := a.runner.Toolset(ctx, source, name)
		if errors.Is(err, ErrUnknownSource) {
			return ToolList{}, requestError("%v", err)
		}
		if err != nil {
			return ToolList{}, err
		}
		out.Scope, out.From, out.Notify = ts.Scope, ts.From, ts.Notify
		specs = ts.Specs()
	}
	out.Tools = make([]ToolInfo, 0, len(specs))
	for _, s := range specs {
		out.Tools = append(out.Tools, ToolInfo{Name: s.Name, Description: s.Description, Schema: s.Schema})
	}
	return out, nil
}

// Call runs tool with args by hand (see Runner.CallTool). An unknown tool
// is an ErrNoTool; arguments that are not a JSON object an ErrToolRequest.
func (a *ToolAdmin) Call(ctx context.Context, tool string, args json.RawMessage) (tools.Call, error) {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return tools.Call{}, requestError("the arguments are not a JSON object (e.g. {\"path\": \"/srv/a.txt\"}): %s", errText(err, "null"))
	}
	c, err := a.runner.CallTool(ctx, tool, string(args))
	if errors.Is(err, ErrUnknownTool) {
		return tools.Call{}, &bus.ServiceError{Status: http.StatusNotFound, Code: ErrNoTool.Code, Detail: err.Error() + "; see: agentwork tools list"}
	}
	return c, err
}

func requestError(format string, args ...any) error {
	return &bus.ServiceError{Status: http.StatusBadRequest, Code: ErrToolRequest.Code, Detail: fmt.Sprintf(format, args...)}
}

func errText(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// toolServiceTimeout bounds one request to the tools service: a call by
// hand may take as long as an MCP server's timeout.
const toolServiceTimeout = mcp.MaxTimeout + time.Minute

// Service is the tools API on NATS (list, call), as every instance serves
// it: one of them answers each request.
func (a *ToolAdmin) Service() bus.Service {
	handle := func(fn func(ctx context.Context, r ToolRequest) (any, error)) func(context.Context, []byte) (any, error) {
		return func(ctx context.Context, body []byte) (any, error) {
			var r ToolRequest
			if len(body) > 0 {
				if err := json.Unmarshal(body, &r); err != nil {
					return nil, requestError("the request body is not a JSON object like {\"source\":\"heartbeat\"}: %v", err)
				}
			}
			return fn(ctx, r)
		}
	}
	return bus.Service{
		Name:        ToolsService,
		Description: "agentwork tools: the tools in scope of a source and name, the MCP servers' state, a call by hand",
		Timeout:     toolServiceTimeout,
		Endpoints: []bus.Endpoint{
			{Verb: VerbList, Handle: handle(func(ctx context.Context, r ToolRequest) (any, error) { return a.List(ctx, r.Source, r.Name) })},
			{Verb: VerbCall, Handle: handle(func(ctx context.Context, r ToolRequest) (any, error) {
				if r.Tool == "" {
					return nil, requestError("no tool given; see: agentwork tools list")
				}
				return a.Call(ctx, r.Tool, r.Arguments)
			})},
		},
	}
}

// ToolClient talks to the tools service of a running agentwork (what the
// CLI uses).
type ToolClient struct{ b *bus.Bus }

// NewToolClient returns a client on b.
func NewToolClient(b *bus.Bus) *ToolClient { return &ToolClient{b: b} }

// List returns the tools of source and name (every tool when both are
// empty) and the servers' state.
func (c *ToolClient) List(ctx context.Context, source, name string) (ToolList, error) {
	var l ToolList
	return l, c.call(ctx, VerbList, ToolRequest{Source: source, Name: name}, &l)
}

// Call runs tool with args on the server.
func (c *ToolClient) Call(ctx context.Context, tool string, args json.RawMessage) (tools.Call, error) {
	var out tools.Call
	return out, c.call(ctx, VerbCall, ToolRequest{Tool: tool, Arguments: args}, &out)
}

func (c *ToolClient) call(ctx context.Context, verb string, in ToolRequest, out any) error {
	err := c.b.Call(ctx, ToolsService, verb, in, out)
	switch {
	case errors.Is(err, bus.ErrNoService):
		return fmt.Errorf("tools %s: no running agentwork answered (%w): is `agentwork serve` running?", verb, err)
	case err != nil:
		return fmt.Errorf("tools %s: %w", verb, err)
	}
	return nil
}
