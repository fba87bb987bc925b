package webhook

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers"
)

var (
	_ triggers.Trigger = (*Handler)(nil)
	_ api.PublicRouter = (*Handler)(nil)
)

// admin is the credential of a caller with the api server's admin token:
// it may request any source but the reserved ones, under any name, and
// send to any target.
func admin() Credential {
	return Credential{Name: "admin", Grant: Grant{Sources: []string{"*"}, Targets: []string{"*", "*:*"}}}
}

// Sources are task and every source a credential is granted (patterns
// aside: a runtime needs each source spelled out to run it), but workflow
// and console: those grants let a credential start workflows (POST
// /v1/workflows/{name}/runs) and log in to the web console, not send
// tasks.
func (h *Handler) Sources() []string {
	out := []string{bus.SourceTask}
	for _, g := range h.grants() {
		for _, s := range g.sources() {
			if !strings.ContainsAny(s, "*?[") && s != bus.SourceWorkflow && s != api.KindConsole && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

func (h *Handler) grants() []Grant {
	var out []Grant
	for _, t := range h.cfg.Tokens {
		out = append(out, t.grant())
	}
	for _, s := range h.cfg.Secrets {
		out = append(out, s.Grant)
	}
	return out
}

// Policy is the runner's default for every source of the webhook: the
// request's delivery (auto unless the task says otherwise), dedup within
// the request's dedup window or runner.dedup_window, and the tools of
// tasks.<name> for a task (else runner.tools).
func (h *Handler) Policy() agentwork.Policy { return agentwork.Policy{SettingsFor: h.settingsOf} }

// Run waits until ctx is done and returns nil: the webhook works in its
// route.
func (h *Handler) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// PublicRoutes mounts POST /v1/tasks (any other method is 405). A caller
// authenticates with a webhook credential (ServeHTTP) or with the api
// server's admin token (api.IsAdmin), which may request any source but the
// reserved ones.
func (h *Handler) PublicRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/tasks", func(w http.ResponseWriter, r *http.Request) {
		if a, ok := api.ActorFrom(r.Context()); ok && a.Credential != "" {
			// A credential acting through an in-process surface (the
			// MCP server): its own grant applies, and the runs act for
			// it (an approval they ask is not its to decide).
			c, found := h.byName(a.Credential)
			if !found {
				problem.Error(w, http.StatusForbidden, fmt.Sprintf("credential %q is no longer configured", a.Credential))
				return
			}
			h.ServeAs(w, r, c)
			return
		}
		if api.IsAdmin(r) {
			h.ServeAs(w, r, admin())
			return
		}
		h.ServeHTTP(w, r)
	})
	mux.Handle("/v1/tasks", h) // answers 405 with Allow: POST
}
