// Package workflow is the engine of workflows: multi-step work whose state
// lives on the bus, so that it survives crashes and any instance can carry
// a run on.
//
// A workflow is a definition (Workflow, decoded from YAML by Decode, Load
// and DecodeFile, checked by Set.Validate) of steps: agent prompts, tool
// calls, notifications, waits, child workflows, parallel branches and
// foreach loops, with conditions and templates in one expression language
// (expr-lang/expr, see Eval and Render).
//
// A run (Run) is plain JSON-serialisable state. Decide is the engine's one
// decision function: it takes a run, an event (Started, StepFinished,
// TimerFired, ChildFinished, Cancel, RetryFrom) and the time, and returns the
// new run and the effects to carry out (RunAgent, CallTool, SendNotification,
// StartChild, SetTimer, CancelTimer, CancelStep, Emit, Alert), each with an
// idempotency key. It does no I/O: a driver writes the new state at its
// revision and then carries out the effects, so a crash between the two
// repeats only effects that are safe to repeat.
package workflow
