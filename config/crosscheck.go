package config

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/builtin"
	"github.com/agentwork/agentwork/tools/mcp"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/tools/schedule"
	"github.com/agentwork/agentwork/triggers/cron"
)

// validateTargets checks that every target names a configured connector: a
// typo would otherwise drop that target's notifications on every run. A
// connector on the bus (type nats) may publish on none of agentwork's own
// subjects, neither as its subject nor as a target's destination.
func (f *File) validateTargets() error {
	names := make([]string, 0, len(f.Connectors))
	for n := range f.Connectors {
		names = append(names, n)
	}
	slices.Sort(names)
	var errs []error
	sub := bus.Subjects{Prefix: f.Bus.Prefix}
	for _, n := range names {
		if bc, ok := f.Connectors[n].(connectors.BusChecker); ok {
			if err := bc.CheckBus(sub, ""); err != nil {
				errs = append(errs, fmt.Errorf("connectors.%s.%w", n, err))
			}
		}
	}
	check := func(field string, targets []string) {
		for i, t := range targets {
			name, dest := connectors.SplitTarget(t)
			c, ok := f.Connectors[name]
			if !ok {
				errs = append(errs, fmt.Errorf("%s[%d]: %q is not a connector (configured: %s)", field, i, name, strings.Join(names, ", ")))
				continue
			}
			if err := connectors.CheckDestinationOn(c, sub, dest); err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %q: %w", field, i, t, err))
			}
		}
	}
	check("runner.targets", f.Runner.Targets)
	check("runner.approvals.targets", f.Runner.Approvals.Targets)
	check("heartbeat.targets", f.Heartbeat.Targets)
	check("cron.targets", f.Cron.Targets)
	for i := range f.Cron.Jobs {
		// The field is written only for a job with targets (of 100,000
		// jobs, most have none).
		if j := &f.Cron.Jobs[i]; len(j.Targets) > 0 {
			check(fmt.Sprintf("cron.jobs[%d].targets", i), j.Targets)
		}
	}
	return errors.Join(errs...)
}

// validateWebhookSources rejects source patterns: serve registers a runner
// policy per granted source, so every source a webhook may request must be
// spelled out (a pattern would pass the grant and then fail every run with
// "unknown source").
func (f *File) validateWebhookSources() error {
	var errs []error
	check := func(field string, sources []string) {
		for i, s := range sources {
			if strings.ContainsAny(s, "*?[") {
				errs = append(errs, fmt.Errorf("%s.sources[%d]: %q: list each source a credential may request (patterns are allowed in names, not sources)", field, i, s))
			}
		}
	}
	for i, t := range f.Webhook.Tokens {
		check(fmt.Sprintf("webhook.tokens[%d]", i), t.Sources)
		errs = append(errs, f.validateGrantTargets(fmt.Sprintf("webhook.tokens[%d]", i), t.Targets)...)
	}
	for i, s := range f.Webhook.Secrets {
		check(fmt.Sprintf("webhook.secrets[%d]", i), s.Sources)
		errs = append(errs, f.validateGrantTargets(fmt.Sprintf("webhook.secrets[%d]", i), s.Targets)...)
	}
	return errors.Join(errs...)
}

// builtinTools are the names of every built-in tool, on or off.
func builtinTools() []string {
	return slices.Concat([]string{tools.NotifyName}, memory.Names, schedule.Names, builtin.Names)
}

// validateServerNames refuses a server named like built-in tools (see
// mcp.CheckBuiltins).
func (f *File) validateServerNames() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(f.MCP.Servers)) {
		if err := mcp.CheckBuiltins(name, builtinTools()); err != nil {
			errs = append(errs, fmt.Errorf("mcp.servers.%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// validateGrantTargets checks a grant's targets against the connectors:
// each must name (or match) a configured connector, and a destination
// pattern must be one the connector takes: a literal one is checked as a
// target's destination would be, one with * or ? only for a connector type
// that takes destinations. The webhook section checked their syntax.
func (f *File) validateGrantTargets(field string, targets []string) []error {
	names := slices.Sorted(maps.Keys(f.Connectors))
	sub := bus.Subjects{Prefix: f.Bus.Prefix}
	var errs []error
	for i, t := range targets {
		pn, pd, has := strings.Cut(t, ":")
		matched := slices.DeleteFunc(slices.Clone(names), func(n string) bool { ok, _ := path.Match(pn, n); return !ok })
		if len(matched) == 0 {
			errs = append(errs, fmt.Errorf("%s.targets[%d]: %q: no connector is called %q (configured: %s)", field, i, t, pn, strings.Join(names, ", ")))
			continue
		}
		if !has {
			continue
		}
		// A glob of names is right when one connector it matches takes
		// the destination.
		var first error
		for _, n := range matched {
			c := f.Connectors[n]
			var err error
			if strings.ContainsAny(pd, "*?") {
				if _, ok := c.(connectors.DestinationChecker); !ok {
					err = errors.New("this connector type takes no destination; name the connector alone")
				}
			} else {
				err = connectors.CheckDestinationOn(c, sub, pd)
			}
			if err == nil {
				first = nil
				break
			}
			if first == nil {
				first = fmt.Errorf("%s.targets[%d]: %q: connector %s: %w", field, i, t, n, err)
			}
		}
		if first != nil {
			errs = append(errs, first)
		}
	}
	return errs
}

// validateTools checks that every glob of every scope can match a tool:
// notify_user, a memory tool, a built-in tool the tools section turns on, or a tool of a
// configured MCP server (<server>__<tool>). A typo would otherwise leave
// the tool out of every run, silently. Which tools a server has is known
// only once it runs: a glob that names a server is taken to match some of
// them.
func (f *File) validateTools() error {
	var errs []error
	check := func(field string, globs []string) {
		for i, g := range globs {
			if msg := f.globProblem(g); msg != "" {
				errs = append(errs, fmt.Errorf("%s[%d]: %s", field, i, msg))
			}
		}
	}
	check("runner.tools", f.Runner.Tools)
	check("runner.approval", f.Runner.Approval)
	check("heartbeat.tools", f.Heartbeat.Tools)
	check("heartbeat.approval", f.Heartbeat.Approval)
	check("cron.agent.tools", f.Cron.Agent.Tools)
	for i := range f.Cron.Jobs {
		// The fields are written only for a job with tools or approval.
		if j := &f.Cron.Jobs[i]; len(j.Tools) > 0 {
			check(fmt.Sprintf("cron.jobs[%d].tools", i), j.Tools)
		}
		if j := &f.Cron.Jobs[i]; len(j.Approval) > 0 {
			check(fmt.Sprintf("cron.jobs[%d].approval", i), j.Approval)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.Tasks)) {
		check("tasks."+name+".tools", f.Tasks[name].Tools)
		check("tasks."+name+".approval", f.Tasks[name].Approval)
	}
	return errors.Join(errs...)
}

// globProblem says why the scope glob g can match no tool ("" when it
// can, or when the scope's own check refuses it and says so).
func (f *File) globProblem(g string) string {
	servers := slices.Sorted(maps.Keys(f.MCP.Servers))
	have := "mcp.servers has none"
	if len(servers) > 0 {
		have = "mcp.servers has " + strings.Join(servers, ", ")
	}
	on := f.Tools.Enabled()
	scope := tools.Scope{g}
	if err := scope.Check("tools"); err != nil {
		return "" // the section's Validate says so
	}
	if g == memory.ChecklistName && !f.Heartbeat.ChecklistInMemory {
		return fmt.Sprintf("%q: the heartbeat reads its checklist from a file, so the tool would change nothing: set heartbeat.checklist_in_memory: true, or leave it out", g)
	}
	if scope.Allows(tools.NotifyName) || slices.ContainsFunc(on, scope.Allows) || slices.ContainsFunc(schedule.Names, scope.Allows) || slices.ContainsFunc(memory.Names, scope.Allows) {
		return ""
	}
	server, _, named := strings.Cut(g, mcp.Separator)
	off := slices.DeleteFunc(slices.Clone(builtin.Names), func(n string) bool { return !scope.Allows(n) || slices.Contains(on, n) })
	switch {
	case !named && len(off) > 0:
		return fmt.Sprintf("%q matches no tool: the built-in %s is off (turn it on under tools.%s)", g, off[0], off[0])
	case !named:
		// A glob without "__" matches only built-in tools
		// (tools.Scope), so "fs*" matches none of fs's.
		why := ""
		if strings.ContainsAny(g, "*?[") {
			why = `; a glob without "__" matches only built-in tools`
		}
		return fmt.Sprintf("%q matches no tool: want notify_user, memory_* (the memory tools), schedule_*, a built-in tool that is on (tools section: %s), or <server>__<tool> for a tool of an MCP server (%s)%s",
			g, strings.Join(builtin.Names, ", "), have, why)
	case !slices.ContainsFunc(servers, func(s string) bool { ok, _ := path.Match(server, s); return ok }):
		return fmt.Sprintf("%q matches no tool: no MCP server is called %q (%s)", g, server, have)
	}
	return ""
}

// validateModels checks that every model and fallback list names a model:
// "default" (the model section) or one of the models section.
func (f *File) validateModels() error {
	names := f.ModelNames()
	errs := []error{
		agentwork.CheckModels("runner.", f.Runner.Model, f.Runner.Fallback, names),
		agentwork.CheckModels("heartbeat.", f.Heartbeat.Model, f.Heartbeat.Fallback, names),
	}
	for i := range f.Cron.Jobs {
		// The prefix is written only for a job that names models (of
		// 100,000 jobs, most name none).
		if j := &f.Cron.Jobs[i]; j.Model != "" || len(j.Fallback) > 0 {
			errs = append(errs, agentwork.CheckModels(fmt.Sprintf("cron.jobs[%d].", i), j.Model, j.Fallback, names))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.Tasks)) {
		errs = append(errs, agentwork.CheckModels("tasks."+name+".", f.Tasks[name].Model, f.Tasks[name].Fallback, names))
	}
	return errors.Join(errs...)
}

// validateApprovalWait checks that a gated tool call waits no longer than
// a parked run's claim lives: with runner.approvals.timeout unset, it
// waits approvals.timeout.
func (f *File) validateApprovalWait() error {
	if f.Runner.Approvals.Timeout != 0 || f.Approvals.Timeout <= agentwork.MaxParked {
		return nil
	}
	gated := len(f.Runner.Approval) > 0 || len(f.Heartbeat.Approval) > 0 || slices.ContainsFunc(f.Cron.Jobs, func(j cron.Job) bool { return len(j.Approval) > 0 })
	for _, tc := range f.Tasks {
		gated = gated || len(tc.Approval) > 0
	}
	if !gated {
		return nil
	}
	return fmt.Errorf("approvals.timeout: %s: a gated tool call's run waits at most %s; set runner.approvals.timeout to %s or less", f.Approvals.Timeout, agentwork.MaxParked, agentwork.MaxParked)
}

// validateApprovalReach refuses a webhook credential whose grant lets it
// deliver to where the question of a gated tool call of its runs goes,
// when whoever the question reaches may decide (runner.approvals.approvers
// empty, or naming link): its holder would read the question, with its
// buttons and signed links, and could approve its own calls. The question
// of a webhook's run goes to runner.approvals.targets, else
// runner.targets, else every connector; a grant target reaches one when it
// names its connector with a destination pattern that matches the
// target's destination, or any destination pattern where the target names
// the connector alone (its configured destination is not known here).
// Naming a connector alone in a grant reaches only the operator's
// configured destination, as the question does: that is not refused.
func (f *File) validateApprovalReach() error {
	gated := len(f.Runner.Approval) > 0
	for _, tc := range f.Tasks {
		gated = gated || len(tc.Approval) > 0
	}
	ap := f.Runner.Approvals.Approvers
	if !gated || (len(ap) > 0 && !slices.Contains(ap, approval.ByLink)) {
		return nil
	}
	question := f.Runner.Approvals.Targets
	if len(question) == 0 {
		question = f.Runner.Targets
	}
	if len(question) == 0 {
		question = slices.Sorted(maps.Keys(f.Connectors))
	}
	var errs []error
	check := func(field, name string, g []string) {
		for _, gt := range g {
			gn, gd, has := strings.Cut(gt, ":")
			if !has {
				continue
			}
			for _, q := range question {
				qn, qd := connectors.SplitTarget(q)
				if ok, _ := path.Match(gn, qn); !ok {
					continue
				}
				if (qd == "" && !strings.ContainsAny(gd, "*?")) || (qd != "" && !connectors.MatchDestination(gd, qd)) {
					continue
				}
				errs = append(errs, fmt.Errorf("%s (%s): its grant's target %q reaches %q, where the question of a gated tool call goes (runner.approvals.targets, else runner.targets, else every connector), and anyone it reaches may decide: whoever holds the credential could approve its own calls. Set runner.approvals.approvers to the people who may decide (not link), or runner.approvals.targets to a target the grant does not reach",
					field, name, gt, q))
				return
			}
		}
	}
	for i, t := range f.Webhook.Tokens {
		check(fmt.Sprintf("webhook.tokens[%d]", i), t.Name, t.Targets)
	}
	for i, s := range f.Webhook.Secrets {
		check(fmt.Sprintf("webhook.secrets[%d]", i), s.Name, s.Targets)
	}
	return errors.Join(errs...)
}

// validateApprovers refuses runner.approvals.approvers that no channel can
// record (see approverProblem).
func (f *File) validateApprovers() error {
	var errs []error
	for i, ap := range f.Runner.Approvals.Approvers {
		if msg := f.approverProblem(ap); msg != "" {
			errs = append(errs, fmt.Errorf("runner.approvals.approvers[%d]: %q: %s", i, ap, msg))
		}
	}
	return errors.Join(errs...)
}

// approverProblem says why the approver ap could never decide ("" when it
// can): an approver is link (whoever holds the question's signed links),
// admin (the HTTP API and the CLI, who may always decide), or a person
// of a platform a configured connector receives answers from
// (connectors.AnswersConfig: telegram:<user id>). Anyone else would wait
// for ever, and naming approvers without link drops the links.
func (f *File) approverProblem(ap string) string {
	if ap == approval.ByLink || ap == approval.ByAdmin {
		return ""
	}
	var as []string
	for _, name := range slices.Sorted(maps.Keys(f.Connectors)) {
		if a, ok := f.Connectors[name].(connectors.AnswersConfig); ok && !slices.Contains(as, a.AnswersAs()) {
			as = append(as, a.AnswersAs())
		}
	}
	platform, id, ok := strings.Cut(ap, ":")
	if ok && id != "" && slices.Contains(as, platform) {
		return ""
	}
	these := "none of the configured connectors does"
	if len(as) > 0 {
		these = "these do: " + strings.Join(as, ", ")
	}
	if !ok || id == "" {
		return fmt.Sprintf("want platform:user-id (telegram:123456789), link or admin (%s)", these)
	}
	return fmt.Sprintf("no connector receives the answers of %s users (%s), so this approver could never decide. Write link to let whoever holds the question's signed links decide, a telegram:<user id> of a Telegram connector's chat, or leave the approvers out and decide as admin (agentwork approvals approve|reject)", platform, these)
}
