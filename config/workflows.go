package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/connectors"

	"github.com/agentwork/agentwork/triggers/cron"
	"github.com/agentwork/agentwork/workflow"
)

// decodeWorkflows decodes the workflows section (detached from root) and
// the files of workflows_dir into f.Workflows. Errors of the section are
// placed in the config file by the caller (inFile: they unwrap to
// *yamlstrict.Error); those of the directory's files name their own file
// (dirErr).
func (f *File) decodeWorkflows(root, section *yaml.Node) (sectionErr, dirErr error) {
	set := workflow.Set{}
	if section != nil {
		var err error
		if set, err = workflow.Decode(section, "workflows"); err != nil {
			sectionErr, set = err, workflow.Set{}
		}
		// Their errors name the config file (validation and cross-checks
		// place them there at their lines).
		for _, w := range set {
			w.File = f.path
		}
	}
	if f.WorkflowsDir != "" {
		dirSet, err := workflow.Load(f.Resolve(f.WorkflowsDir))
		if err != nil {
			var errs []error
			for _, e := range flatten(err) {
				if _, ok := errors.AsType[*workflow.Error](e); ok {
					errs = append(errs, e)
					continue
				}
				line := 0
				if n := lookupNode(root, "workflows_dir"); n != nil {
					line = n.Line
				}
				errs = append(errs, &Error{File: f.path, Line: line, Msg: fmt.Sprintf("workflows_dir: %v (the directory is relative to this file)", e)})
			}
			return sectionErr, errors.Join(errs...)
		}
		if err := set.Merge(dirSet); err != nil {
			return sectionErr, err
		}
	}
	if len(set) > 0 {
		f.Workflows = set
	}
	return sectionErr, nil
}

// flatten returns the errors err joins (err itself when it joins none).
func flatten(err error) []error {
	if many, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range many.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// validateWorkflows validates the workflows (steps, references, templates,
// child workflows across the section and the directory, cron schedules by
// the cron trigger's parser), then what they name elsewhere in the file:
// tools, connectors and models. Every error is a *workflow.Error naming its
// file and line.
func (f *File) validateWorkflows() error {
	if len(f.Workflows) == 0 {
		return nil
	}
	errs := flatten(f.Workflows.Validate(workflow.Options{Schedule: func(expr string, loc *time.Location) error {
		_, err := cron.ParseSchedule(expr, loc)
		return err
	}}))
	if len(errs) == 1 && errs[0] == nil {
		errs = nil
	}
	connNames := slices.Sorted(maps.Keys(f.Connectors))
	models := f.ModelNames()
	for _, name := range slices.Sorted(maps.Keys(f.Workflows)) {
		w := f.Workflows[name]
		target := func(rel, step, t string) {
			if strings.Contains(t, "${{") {
				return // known when the run gets there
			}
			cname, dest := connectors.SplitTarget(t)
			c, ok := f.Connectors[cname]
			if !ok {
				errs = append(errs, w.ErrorAt(rel, step, "%q is not a connector (configured: %s)", cname, strings.Join(connNames, ", ")))
				return
			}
			if err := connectors.CheckDestination(c, dest); err != nil {
				errs = append(errs, w.ErrorAt(rel, step, "%q: %v", t, err))
			}
		}
		for i, t := range w.Targets {
			target(fmt.Sprintf("targets[%d]", i), "", t)
		}
		w.Walk(func(rel string, s *workflow.Step) {
			switch {
			case s.Tool != "":
				if strings.ContainsAny(s.Tool, "*?[") {
					errs = append(errs, w.ErrorAt(rel+".tool", s.ID, "%q is a glob; a tool step calls one tool, named exactly", s.Tool))
				} else if msg := f.globProblem(s.Tool); msg != "" {
					errs = append(errs, w.ErrorAt(rel+".tool", s.ID, "%s", msg))
				}
			case s.Agent != nil:
				for i, g := range s.Agent.Tools {
					if msg := f.globProblem(g); msg != "" {
						errs = append(errs, w.ErrorAt(fmt.Sprintf("%s.agent.tools[%d]", rel, i), s.ID, "%s", msg))
					}
				}
				if s.Agent.Model != "" && !slices.Contains(models, s.Agent.Model) {
					errs = append(errs, w.ErrorAt(rel+".agent.model", s.ID, "%q: no such model (models: %s)", s.Agent.Model, strings.Join(models, ", ")))
				}
				for i, m := range s.Agent.Fallback {
					if !slices.Contains(models, m) {
						errs = append(errs, w.ErrorAt(fmt.Sprintf("%s.agent.fallback[%d]", rel, i), s.ID, "%q: no such model (models: %s)", m, strings.Join(models, ", ")))
					}
				}
			case s.Notify != nil:
				for i, t := range s.Notify.Targets {
					target(fmt.Sprintf("%s.notify.targets[%d]", rel, i), s.ID, t)
				}
			case s.Approval != nil:
				for i, t := range s.Approval.Targets {
					target(fmt.Sprintf("%s.approval.targets[%d]", rel, i), s.ID, t)
				}
				for i, ap := range s.Approval.Approvers {
					if msg := f.approverProblem(ap); msg != "" {
						errs = append(errs, w.ErrorAt(fmt.Sprintf("%s.approval.approvers[%d]", rel, i), s.ID, "%q: %s", ap, msg))
					}
				}
			}
		})
	}
	slices.SortStableFunc(errs, func(a, b error) int {
		wa, _ := errors.AsType[*workflow.Error](a)
		wb, _ := errors.AsType[*workflow.Error](b)
		if wa == nil || wb == nil {
			return 0
		}
		if c := strings.Compare(wa.File, wb.File); c != 0 {
			return c
		}
		return wa.Line - wb.Line
	})
	return errors.Join(errs...)
}
