package agentwork

// The models a run may use: the runner's provider is the default model
// (model.DefaultName); WithModels names the others, and a run's settings
// pick its model and its fallback list by name.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/model"
)

// WithModels gives the runner named providers beside its own, which is
// the model named model.DefaultName: runner.model, a source's model and a
// job's or task's model pick one by name, and their fallback lists name
// those that take over when it is unavailable (see model.Fallback).
func WithModels(models map[string]model.Provider) Option {
	return func(r *Runner) { r.models = maps.Clone(models) }
}

// ModelNames returns the names of the runner's models, sorted: its own
// (model.DefaultName) and those of WithModels.
func (r *Runner) ModelNames() []string {
	names := slices.Collect(maps.Keys(r.models))
	if !slices.Contains(names, model.DefaultName) {
		names = append(names, model.DefaultName)
	}
	slices.Sort(names)
	return names
}

// providerFor returns the provider of run with settings set: its model,
// wrapped in model.Fallback when it has a fallback list. A name the runner
// has no model by is a permanent error: the run fails at once, saying so.
func (r *Runner) providerFor(run *Run, set Settings) (model.Provider, error) {
	names := []string{set.Model}
	for _, f := range set.Fallback {
		if !slices.Contains(names, f) {
			names = append(names, f)
		}
	}
	chain := make([]model.Named, 0, len(names))
	for _, n := range names {
		p, ok := r.models[n]
		switch {
		case ok:
		case n == "" || n == model.DefaultName:
			p, n = r.provider, model.DefaultName
		default:
			return nil, &model.Error{Class: model.ClassPermanent,
				Message: fmt.Sprintf("%q: no such model (models: %s); name one of the models section, or add it there", n, strings.Join(r.ModelNames(), ", "))}
		}
		chain = append(chain, model.Named{Name: n, Provider: p})
	}
	if len(chain) == 1 {
		return chain[0].Provider, nil
	}
	log := r.log.With(zap.String("source", run.Request.Source), zap.String("name", run.Request.Name), zap.String("run", run.ID))
	return model.Fallback(log, chain...), nil
}

// CheckModels checks that model and each name of fallback is one of
// models; prefix is where the fields are (e.g. "cron.jobs[2]."), and
// errors read `cron.jobs[2].model: "x": no such model (models: a, b)`.
// An empty model is none of its own (the level above's).
func CheckModels(prefix, name string, fallback, models []string) error {
	var errs []error
	check := func(field, n string) {
		if !slices.Contains(models, n) {
			errs = append(errs, fmt.Errorf("%s%s: %q: no such model (models: %s)", prefix, field, n, strings.Join(models, ", ")))
		}
	}
	if name != "" {
		check("model", name)
	}
	for i, n := range fallback {
		check(fmt.Sprintf("fallback[%d]", i), n)
	}
	return errors.Join(errs...)
}
