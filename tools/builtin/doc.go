// Package builtin holds the built-in tools a run may be given besides
// notify_user, each off unless the tools section of agentwork.yaml
// configures it:
//
//   - http_fetch (Fetch) fetches URLs under allow-listed prefixes with GET,
//     HEAD or POST. It connects to no loopback, private, link-local or
//     cloud metadata address unless the prefix's entry allows it: the check
//     runs on each address the dialer connects to, after the name was
//     resolved (internal/netguard, which the webhook connector uses too),
//     and again for every redirect, whose target must be allow-listed too.
//     A call has a time limit, a redirect limit and a cap on the body it
//     reads; the entries' headers (secrets) are cut out of what it returns.
//   - exec (Exec) runs commands whose argv starts with an allow-listed
//     prefix, without a shell, with only PATH and the configured variables
//     in their environment, in a process group of its own that is killed
//     at the time limit and when the command exits, with a cap on the
//     output it returns.
//
// A call these tools refuse before doing anything (a URL or argv outside
// the allow-list) is a tool error that wraps tools.ErrRefused, so the
// run's record says "refused". Like every tool, they are offered only to
// the runs whose scope names them (tools.Scope).
package builtin
