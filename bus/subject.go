package bus

import (
	"fmt"
	"strings"
)

// Outcomes of a run, the last token of an event subject.
const (
	OutcomeDone  = "done"
	OutcomeSkip  = "skip"
	OutcomeError = "error"
)

// Sources that the runtime itself produces. Webhook callers may only use
// SourceTask (or sources their token allows, never these two).
const (
	SourceHeartbeat = "heartbeat"
	SourceCron      = "cron"
	SourceTask      = "task"
	SourceDelivery  = "delivery"
	// SourceWorkflow is the workflow runs' own events
	// (agentwork.workflow.<outcome>); SourceStep is the source of the
	// runner requests of agent steps, and so of their events.
	SourceWorkflow = "workflow"
	SourceStep     = "step"
)

// Subjects builds subject names under a prefix (default "agentwork").
type Subjects struct{ Prefix string }

// Request is <prefix>.request.<source>.<name>.
func (s Subjects) Request(source, name string) string {
	return s.p() + ".request." + source + "." + name
}

// Requests is the wildcard of all requests.
func (s Subjects) Requests() string { return s.p() + ".request.>" }

// Event is <prefix>.event.<source>.<outcome>.
func (s Subjects) Event(source, outcome string) string {
	return s.p() + ".event." + source + "." + outcome
}

// Events is the wildcard of all events.
func (s Subjects) Events() string { return s.p() + ".event.>" }

// Delivery is <prefix>.delivery.<connector>.
func (s Subjects) Delivery(connector string) string { return s.p() + ".delivery." + connector }

// Deliveries is the wildcard of all deliveries.
func (s Subjects) Deliveries() string { return s.p() + ".delivery.>" }

// Service is the subject prefix of the request-reply control services
// (<prefix>.api.<service>.<verb>).
func (s Subjects) Service(service, verb string) string {
	return s.p() + ".api." + service + "." + verb
}

// Workflow is <prefix>.workflow.<verb>.<name>: a command of the workflow
// engine (verb start, cancel, retry or child; name a workflow or run id).
func (s Subjects) Workflow(verb, name string) string {
	return s.p() + ".workflow." + verb + "." + name
}

// Workflows is <prefix>.workflow.>: every workflow command.
func (s Subjects) Workflows() string { return s.p() + ".workflow.>" }

// TimerFired is <prefix>.timer.fired.<key>: where the timer of key is copied
// when it fires. A consumer of one kind of timer filters on
// TimerFired("cron") + ".>".
func (s Subjects) TimerFired(key string) string { return s.p() + ".timer.fired." + key }

// TimersPending is the wildcard of all pending timers: a timer of key is
// pending on <prefix>.timer.pending.<key>.<id>, id unique per Timers.Set.
func (s Subjects) TimersPending() string { return s.p() + ".timer.pending.>" }

// TimersFired is the wildcard of all fired timers.
func (s Subjects) TimersFired() string { return s.p() + ".timer.fired.>" }

func (s Subjects) p() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// ParseRequest splits a request subject into source and name.
func (s Subjects) ParseRequest(subject string) (source, name string, err error) {
	rest, ok := strings.CutPrefix(subject, s.p()+".request.")
	if !ok {
		return "", "", fmt.Errorf("bus: %q is not a request subject", subject)
	}
	source, name, ok = strings.Cut(rest, ".")
	if !ok || strings.Contains(name, ".") {
		return "", "", fmt.Errorf("bus: %q: want %s.request.<source>.<name>", subject, s.p())
	}
	return source, name, nil
}

// ValidToken reports whether t may be used as one subject token:
// 1-64 characters of [a-z0-9_-].
func ValidToken(t string) bool {
	return len(t) <= 64 && tokenChars(t)
}

// tokenChars reports whether s is one or more of a-z, 0-9, _ and -. A
// loop, not a regexp: a config of 100,000 cron jobs checks as many ids.
func tokenChars(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// CheckToken returns an error naming field when t is not a valid token.
func CheckToken(field, t string) error {
	if !ValidToken(t) {
		return fmt.Errorf("%s: %q: want 1-64 characters of a-z, 0-9, _ and -", field, t)
	}
	return nil
}

// Token folds s into a valid subject token: lower case, any other character
// replaced by '-', cut to 64. An empty result becomes "default".
func Token(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= 64 {
			break
		}
	}
	t := b.String()
	if t == "" {
		return "default"
	}
	return t
}
