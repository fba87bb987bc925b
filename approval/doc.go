// Package approval holds the approvals: a person's yes or no that work
// waits for before it goes on (a workflow's approval step, a tool call the
// scope marks for approval).
//
// An approval is one durable record in the KV bucket agentwork_approvals,
// written before the question is sent. It is decided once, by
// compare-and-set: pending → approved | rejected (a person), expired (its
// deadline, a timer of the one time engine) or cancelled (its run was).
// Every channel is a thin way to ask for that one decision: Decide (the
// Go API), the HTTP API (package api), the CLI, the signed links to a
// small page this package serves (PublicRoutes), and chat buttons
// (Telegram callbacks call Decide).
//
// When decided, the approval publishes what its asker gave it to publish
// (Resume) and an event on agentwork.event.approval.<outcome>, each under
// a message id derived from the approval, so a repeat is stored once.
// The work after the compare-and-set is made crash-safe by the approval's
// timer: Decide sets it to fire at once before it writes, and the timer's
// handler (Run) finishes whatever a crashed Decide left undone.
//
// The package sits below agentwork and workflow (both use it): it never
// imports them, and Resume is how each says what to publish.
package approval
