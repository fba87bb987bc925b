package agentwork

// WithMaxConversation sets how many bytes of a run's conversation its
// claim keeps (default MaxConversation), for tests of the cut.
func WithMaxConversation(n int) Option { return func(r *Runner) { r.maxConversation = n } }
