package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/agentwork/agentwork/api/problem"

	"github.com/agentwork/agentwork/approval"

	"github.com/agentwork/agentwork/tools"
)

// Actor is a caller that an in-process surface (the MCP server) has
// authenticated and whose grant it has checked before it calls the HTTP
// API in process, on the caller's behalf. A request whose context carries
// an Actor passes the admin routes' check: contexts are made in process,
// so no network client can set one. The routes that record who acted use
// it: an approval is decided by Actor.Decider, a job created through MCP
// has origin mcp and the actor's name, memory is written by "mcp:<name>".
type Actor struct {
	// Via is the surface: "mcp", or "console" (the web console's
	// changes, as the logged-in user).
	Via string
	// Name is the credential's name ("admin" for the admin token).
	Name string
	// Credential is the webhook credential the actor acts for ("" for the
	// admin token): the runs of jobs it creates act for it too.
	Credential string
}

// Decider is how the actor decides an approval: "admin" for the admin
// token, else "token:<name>" (what an approval's approvers name).
func (a Actor) Decider() string {
	if a.Credential == "" {
		return "admin"
	}
	return approval.ByCredential(a.Credential)
}

// ViaConsole is the Via of the web console's requests.
const ViaConsole = "console"

// RefuseChecklistChange answers 403 and reports true when r comes from a
// console session of a webhook credential: the heartbeat runs its
// checklist with the operator's own tools and targets, so in the console
// only the admin changes it (a credential with console: write changes
// only the jobs it created). MCP callers are not refused here: their
// grant's kind jobs covers the checklist (mcpserver).
func RefuseChecklistChange(w http.ResponseWriter, r *http.Request) bool {
	a, ok := ActorFrom(r.Context())
	if !ok || a.Via != ViaConsole || a.Credential == "" {
		return false
	}
	problem.Write(w, problem.Details{Status: http.StatusForbidden, Code: "admin_only", Instance: r.URL.Path,
		Detail: "only the admin changes the heartbeat's checklist: the heartbeat runs it with the operator's own tools and targets, and token " +
			strconv.Quote(a.Credential) + " changes only the jobs it created; nothing changed. Log in with the admin token, or ask the operator"})
	return true
}

// ViaHeader, "mcp" on a request with the admin token, makes its Actor
// the admin through MCP (what `agentwork mcp` sends): it names the
// origin of what the request creates and grants nothing.
const ViaHeader = "Agentwork-Via"

type actorKey struct{}

// WithActor returns ctx carrying a: a request with it passes the admin
// routes' check. Only in-process code that authenticated a and checked
// its grant may call it.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the Actor of ctx, if any.
func ActorFrom(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	return a, ok
}

// ToolHeader marks the HTTP requests of a run's own tools (http_fetch and
// the MCP client's HTTP servers set it on every request, and no tool
// configuration can remove it): the MCP server refuses them, so a run's
// tools never decide the run's own approvals through it.
const ToolHeader = tools.CallHeader

// FromTool reports whether r was sent by a run's tool (ToolHeader, even
// empty).
func FromTool(r *http.Request) bool {
	_, ok := r.Header[http.CanonicalHeaderKey(ToolHeader)]
	return ok
}
