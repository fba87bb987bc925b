package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentwork/agentwork/connectors"
)

// validateTargets checks that every target names a configured connector: a
// typo would otherwise drop that target's notifications on every run.
func (f *File) validateTargets() error {
	names := make([]string, 0, len(f.Connectors))
	for n := range f.Connectors {
		names = append(names, n)
	}
	slices.Sort(names)
	var errs []error
	check := func(field string, targets []string) {
		for i, t := range targets {
			name, dest := connectors.SplitTarget(t)
			c, ok := f.Connectors[name]
			if !ok {
				errs = append(errs, fmt.Errorf("%s[%d]: %q is not a connector (configured: %s)", field, i, name, strings.Join(names, ", ")))
				continue
			}
			if err := connectors.CheckDestination(c, dest); err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %q: %w", field, i, t, err))
			}
		}
	}
	check("runner.targets", f.Runner.Targets)
	check("heartbeat.targets", f.Heartbeat.Targets)
	check("cron.targets", f.Cron.Targets)
	for i, j := range f.Cron.Jobs {
		check(fmt.Sprintf("cron.jobs[%d].targets", i), j.Targets)
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
	}
	for i, s := range f.Webhook.Secrets {
		check(fmt.Sprintf("webhook.secrets[%d]", i), s.Sources)
	}
	return errors.Join(errs...)
}
