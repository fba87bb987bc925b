package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	tokenusage "github.com/agentwork/agentwork/agentwork/usage"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/config"
	"github.com/agentwork/agentwork/connectors"
	webconsole "github.com/agentwork/agentwork/console"
	"github.com/agentwork/agentwork/mcpserver"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/anthropic"
	"github.com/agentwork/agentwork/model/openai"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/builtin"
	"github.com/agentwork/agentwork/tools/mcp"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/tools/schedule"
	"github.com/agentwork/agentwork/triggers"
	"github.com/agentwork/agentwork/triggers/cron"
	"github.com/agentwork/agentwork/triggers/heartbeat"
	"github.com/agentwork/agentwork/triggers/webhook"
	"github.com/agentwork/agentwork/triggers/wftrigger"
	"github.com/agentwork/agentwork/workflow"
)

// newProvider builds the provider of one model section (model, or
// models.<name>).
func newProvider(m config.Model, log *zap.Logger) (model.Provider, error) {
	switch m.Provider {
	case "", "script":
		return script.New(m.Script)
	case "openai":
		return openai.New(m.Config, openai.WithLogger(log))
	case "anthropic":
		return anthropic.New(m.Config, anthropic.WithLogger(log))
	default:
		return nil, fmt.Errorf("%s: %s is not available in this build", m.Field("provider"), m.Provider)
	}
}

// newModels builds the providers of the models section, by name.
func newModels(f *config.File, log *zap.Logger) (map[string]model.Provider, error) {
	out := make(map[string]model.Provider, len(f.Models))
	for name, m := range f.Models {
		p, err := newProvider(m, log.Named("model."+name))
		if err != nil {
			return nil, err
		}
		out[name] = p
	}
	return out, nil
}

// newTriggers builds the triggers of this build from the config. A new
// trigger is its package and a few lines here; everything else is wired
// from the list.
func newTriggers(f *config.File, b *bus.Bus, mem *memory.Store, connectors []string, engine *workflow.Engine, log *zap.Logger) ([]triggers.Trigger, error) {
	hb, err := heartbeat.New(b, f.Heartbeat, heartbeat.WithLogger(log.Named("heartbeat")), heartbeat.WithBaseDir(f.Dir()), heartbeat.WithMemory(mem))
	if err != nil {
		return nil, err
	}
	tasks, err := webhook.New(b, f.Webhook, webhook.WithLogger(log.Named("webhook")), webhook.WithConnectors(connectors...),
		webhook.WithDestinations(f.Connectors), webhook.WithTasks(f.Tasks))
	if err != nil {
		return nil, err
	}
	// The workflows' triggers: their cron triggers are jobs of the one
	// scheduler, their event triggers one consumer of the events.
	flows, err := wftrigger.New(b, engine, wftrigger.WithLogger(log.Named("workflow-triggers")))
	if err != nil {
		return nil, err
	}
	sched, err := cron.New(b, f.Cron, cron.WithLogger(log.Named("cron")), cron.WithModels(f.ModelNames()...), cron.WithConnectors(connectors...),
		cron.WithGrants(grantsOf(tasks, f.Runner.Targets, connectors)), cron.WithWorkflows(flows.CronJobs(), flows))
	if err != nil {
		return nil, err
	}
	return []triggers.Trigger{hb, sched, tasks, flows}, nil
}

// grantsOf checks the targets of a job a credential's task created
// against the credential's grant, except the runner's default targets
// (runner.targets, else every connector): a task that named no targets
// delivered there, by the operator's choice, and its jobs inherit them.
func grantsOf(tasks *webhook.Handler, defaults, connectors []string) cron.Grants {
	if len(defaults) == 0 {
		defaults = connectors
	}
	return func(credential string, targets []string) error {
		own := slices.DeleteFunc(slices.Clone(targets), func(t string) bool { return slices.Contains(defaults, t) })
		return tasks.CheckTargets(credential, own)
	}
}

// wire builds the connectors, the triggers, the runner and the HTTP API
// from the config, and wires each trigger's policy and capabilities (NATS
// service, HTTP routes, readiness) into them. It does no I/O beyond what
// constructors do; everything starts in serve.
func wire(f *config.File, e *env, b *bus.Bus, provider model.Provider, log *zap.Logger) (*wiring, error) {
	w := &wiring{}
	if err := wireConnectors(w, e, f, b, log); err != nil {
		return nil, err
	}
	// The agent's memory on the bus: its tools (offered where a scope
	// names memory_*), its place in prompts, its admin API, and the
	// heartbeat's checklist when it lives there.
	mem, err := memory.New(b, f.Memory, memory.WithHeartbeatChecklist(f.Heartbeat.ChecklistInMemory), memory.WithSecrets(f.Secrets()...))
	if err != nil {
		return nil, err
	}
	// The workflow engine comes before the triggers that start its runs;
	// its tools are the runs' (below), known once the scheduler's schedule
	// tools are.
	// The approvals come before it: its approval steps ask through the
	// one Service that signs the links.
	if w.approvals, err = newApprovals(f, b, w.connectorNames, log); err != nil {
		return nil, err
	}
	// The presses of the approvals' buttons (Telegram): one instance
	// polls each bot, under its lease; only the bots approvals can be
	// asked on (polling takes the bot from any other reader).
	w.answerers = askedOn(f, w.answerers)
	if len(w.answerers) > 0 {
		w.consumers = append(w.consumers, pollAnswers(b, w.approvals, w.answerers, log.Named("answers")))
	}
	var regTools, mcpTools lateTools
	// The webhook handler, built with the triggers below, checks the
	// targets of runs its credentials start against their grants.
	var tasks *webhook.Handler
	grants := func(credential string, targets []string) error {
		if tasks == nil {
			return fmt.Errorf("credential %q cannot be checked: no webhook handler", credential)
		}
		return tasks.CheckTargets(credential, targets)
	}
	w.workflows = workflow.NewEngine(b, workflow.Config{
		Definitions: f.Workflows,
		Tools:       []tools.Source{&regTools, &mcpTools},
		Secrets:     f.Secrets(),
		Connectors:  w.connectorNames,
		Approvals:   w.approvals,
		Grants:      grants,
		// The runner's redelivery deadline and shutdown grace are the
		// engine's too: how soon a dead instance's work is taken over,
		// and how long work in flight may finish at shutdown.
		AckWait:       f.Runner.AckWait,
		ShutdownGrace: f.Runner.ShutdownGrace,
	}, workflow.WithLogger(log.Named("workflow")))
	if w.triggers, err = newTriggers(f, b, mem, w.connectorNames, w.workflows, log); err != nil {
		return nil, err
	}
	for _, t := range w.triggers {
		if h, ok := t.(*webhook.Handler); ok {
			tasks = h
		}
	}
	policies, err := triggers.Policies(w.triggers...)
	if err != nil {
		return nil, err
	}
	// The built-in tools the tools section turns on, beside notify_user;
	// each run is offered those its scope names.
	builtins, err := builtin.New(f.Tools)
	if err != nil {
		return nil, err
	}
	specs := append([]tools.Spec{tools.Notify()}, builtins...)
	specs = append(specs, mem.Tools()...)
	for _, t := range w.triggers {
		// The schedule tools act on the cron scheduler's jobs; runs see
		// them where their scope names schedule_*.
		if s, ok := t.(*cron.Scheduler); ok {
			specs = append(specs, schedule.Tools(s.Agent(), nil)...)
		}
	}
	reg, err := tools.NewRegistry(specs...)
	if err != nil {
		return nil, err
	}
	if on := f.Tools.Enabled(); len(on) > 0 {
		log.Info("built-in tools on", zap.Strings("tools", on))
	}
	// The MCP servers' tools are looked up by every run, so a server that
	// comes up late or changes its tools needs no rewiring.
	if w.mcp, err = mcp.New(f.MCP, mcp.WithLogger(log.Named("mcp")), mcp.WithVersion(version)); err != nil {
		return nil, err
	}
	models, err := newModels(f, log)
	if err != nil {
		return nil, err
	}
	// The runner's gated tool calls ask through the approvals built
	// above: one service, so one link key and one timer consumer.
	w.runner = agentwork.NewRunner(b, provider, reg, f.Runner,
		agentwork.WithLogger(log.Named("runner")), agentwork.WithConnectors(w.connectorNames...), agentwork.WithModels(models),
		agentwork.WithToolSource(w.mcp), agentwork.WithSecrets(f.Secrets()...),
		agentwork.WithMemory(mem), agentwork.WithApprovals(w.approvals))
	for source, p := range policies {
		w.runner.Handle(source, p)
	}
	// The workflow engine: tool steps find their tools where runs do,
	// agent steps are runner requests under the engine's policy, notify
	// steps go to the connectors.
	regTools.src, mcpTools.src = reg, w.mcp
	w.runner.Handle(workflow.StepSource, w.workflows.StepPolicy())
	if n := len(f.Workflows); n > 0 {
		log.Info("workflows loaded", zap.Int("workflows", n))
	}
	w.usage = tokenusage.NewFolder(b, tokenusage.FolderConfig{Log: log.Named("usage")})
	toolAdmin := agentwork.NewToolAdmin(w.runner, w.mcp.Status)
	w.services = append(w.services, toolAdmin.Service(), mem.Service(), w.workflows.Service())

	deps := api.Deps{Bus: b, DataDir: b.Config().DataDir, Ready: []api.Readier{b, w.runner, api.ReadyFunc(w.workflowsReady)}, Tools: toolAdmin, Details: partStates(w.mcp, w.dispatcher),
		Memory: mem, Workflows: w.workflows, Approvals: w.approvals, Console: webconsole.New(webconsole.WithLogger(log.Named("console")), webconsole.WithSchedules(consoleSchedules), webconsole.WithConfig(f.Console))}
	for _, t := range w.triggers {
		if s, ok := t.(triggers.Servicer); ok {
			w.services = append(w.services, s.Service())
		}
		if r, ok := t.(api.Router); ok {
			deps.Routes = append(deps.Routes, r)
		}
		if r, ok := t.(api.PublicRouter); ok {
			deps.PublicRoutes = append(deps.PublicRoutes, r)
		}
		if r, ok := t.(api.Readier); ok {
			deps.Ready = append(deps.Ready, r)
		}
		if h, ok := t.(*webhook.Handler); ok {
			deps.Callers = h.Authenticate
			deps.Credentials = h.Lookup
			authn := mcpAuth(h)
			deps.MCP = func(apiHandler http.Handler) http.Handler {
				return mcpserver.New(apiHandler, mcpserver.WithLogger(log.Named("mcp"))).Handler(authn)
			}
		}
	}
	if !f.HTTP.Off() {
		w.http = api.New(f.HTTP, deps, api.WithLogger(log.Named("http")), api.WithVersion(version)).Run
	}
	return w, nil
}

// mcpAuth finds the MCP caller of a webhook token with an mcp grant.
func mcpAuth(h *webhook.Handler) mcpserver.Authenticate {
	return func(tok string) (mcpserver.Caller, error) {
		c, err := h.MCP(tok)
		if errors.Is(err, webhook.ErrNoMCPGrant) {
			return mcpserver.Caller{Name: c.Name}, fmt.Errorf("%w: %v", mcpserver.ErrNoGrant, err)
		}
		if err != nil {
			return mcpserver.Caller{}, fmt.Errorf("%w: send the admin token or a webhook token with an mcp grant", mcpserver.ErrUnknownToken)
		}
		return mcpserver.Caller{Name: c.Name, Credential: c.Name, Field: c.Field, ReadOnly: c.MCP.ReadOnly, Kinds: c.MCP.Kinds,
			Tools: c.MCP.Tools, AllowsTarget: c.Grant.AllowsTarget}, nil
	}
}

// wiring is what serve runs.
type wiring struct {
	connectorNames []string
	answerers      map[string]connectors.Answers // the connectors that receive button presses
	runner         *agentwork.Runner
	usage          *tokenusage.Folder            // a consumer: sums the tokens of run events
	approvals      *approval.Service             // a consumer: the approvals' timers
	dispatcher     *connectors.Dispatcher        // a consumer: the deliveries (nil: no connectors)
	mcp            *mcp.Manager                  // runs beside the consumers, stopped after them
	consumers      []func(context.Context) error // stopped after the triggers
	triggers       []triggers.Trigger            // stopped first
	services       []bus.Service                 // the triggers' NATS APIs, stopped with them
	http           func(context.Context) error   // the HTTP API (nil: off), stopped with them
	workflows      *workflow.Engine              // a consumer, beside the runner
	// workflowsUp is set while the engine's Run runs (readiness).
	workflowsUp atomic.Bool
}

// runWorkflows runs the workflow engine until ctx ends.
func (w *wiring) runWorkflows(ctx context.Context) error {
	w.workflowsUp.Store(true)
	defer w.workflowsUp.Store(false)
	return w.workflows.Run(ctx)
}

// workflowsReady is the engine's readiness: its consumers run.
func (w *wiring) workflowsReady(context.Context) error {
	if !w.workflowsUp.Load() {
		return errors.New("the workflow engine is not running")
	}
	return nil
}

// newApprovals builds the approvals: their links go to
// approvals.public_url (default the HTTP listener's address) and are
// signed with a key derived from the admin token; with HTTP off there is
// no page to link to, so no links.
func newApprovals(f *config.File, b *bus.Bus, connectorNames []string, log *zap.Logger) (*approval.Service, error) {
	cfg := f.Approvals
	cfg.Connectors, cfg.Secrets = connectorNames, f.Secrets()
	if !f.HTTP.Off() {
		if cfg.PublicURL == "" {
			cfg.PublicURL = "http://" + f.HTTP.WithDefaults().Listen
		}
		tok := f.HTTP.AdminToken
		if tok == "" {
			var err error
			if tok, err = api.EnsureAdminToken(b.Config().DataDir); err != nil {
				return nil, err
			}
		}
		cfg.LinkKey = approval.LinkKey(tok)
	}
	return approval.New(b, cfg, approval.WithLogger(log.Named("approvals"))), nil
}

// mcpStates reports each MCP server's state for /readyz: a server that is
// down leaves the runtime ready (its tools answer that it is down), and is
// shown there. The reason is in agentwork tools list (admin).
func mcpStates(m *mcp.Manager) func() map[string]string {
	return func() map[string]string {
		out := map[string]string{}
		for _, st := range m.Status() {
			out["mcp."+st.Name] = string(st.State)
		}
		return out
	}
}

// partStates is what /readyz shows of the parts that do not make the
// server unready: each MCP server's state, and each connector's as this
// instance's last send through it saw it (up, failing, rate limited,
// unknown; no error text: the route is open).
func partStates(m *mcp.Manager, d *connectors.Dispatcher) func() map[string]string {
	servers := mcpStates(m)
	return func() map[string]string {
		out := servers()
		if d != nil {
			for name, st := range d.States() {
				out["connector."+name] = st
			}
		}
		return out
	}
}

// lateTools is a tool source known only after the component that uses it
// was built (the workflow engine is built before the scheduler whose
// schedule tools its tool steps may call). Set src before anything runs.
type lateTools struct{ src tools.Source }

func (l *lateTools) Specs() []tools.Spec {
	if l.src == nil {
		return nil
	}
	return l.src.Specs()
}

// consoleSchedules gives the console the scheduler's own schedule parser
// (the job form's next fire times).
func consoleSchedules(expr string, loc *time.Location) (interface{ Next(time.Time) time.Time }, error) {
	return cron.ParseSchedule(expr, loc)
}
