package workflow

import (
	"fmt"
	"maps"
	"slices"
)

// Walk calls fn for every step of w, those of parallel branches included,
// in the order of the file, with the step's path relative to the workflow
// ("steps[2]", "steps[3].parallel.a[0]"): the config's cross-checks (tool
// names, targets, models) use it to place their errors with ErrorAt.
func (w *Workflow) Walk(fn func(rel string, s *Step)) {
	var walk func(steps []Step, rel string)
	walk = func(steps []Step, rel string) {
		for i := range steps {
			s := &steps[i]
			srel := fmt.Sprintf("%s[%d]", rel, i)
			fn(srel, s)
			for _, b := range slices.Sorted(maps.Keys(s.Parallel)) {
				walk(s.Parallel[b], srel+".parallel."+b)
			}
		}
	}
	walk(w.Steps, "steps")
}

// ErrorAt returns an *Error about the field at rel of w (relative to the
// workflow, as Walk gives it; "" for the workflow itself) and step (may be
// ""), placed at the field's line in w's file.
func (w *Workflow) ErrorAt(rel, step, format string, args ...any) *Error {
	return w.errorf(rel, step, format, args...)
}
