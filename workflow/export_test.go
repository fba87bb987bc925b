package workflow

// SetHook makes e call hook at the points of its handlers ("written":
// after a write, before its effects; "call": before a tool call; "called":
// after it, before its result is written); an error stops the handler
// there, as if its process died.
func SetHook(e *Engine, hook func(point, key string) error) { e.hook = hook }
