// Package console is agentwork's web console: server-rendered pages at
// "/" on the HTTP listener of `agentwork serve` (an api.Console the api
// server mounts), embedded in the binary, with no build step, no CDN and
// one small script for live updates.
//
// Pages: the overview (parts up or down, the heartbeat, runs of the last
// 24 hours by outcome, failed deliveries), runs (filters, paging, new runs
// live over the event stream) and each run, cron jobs (run now, pause,
// resume, delete; create and edit, checked as you type with the API's
// dry run and the next fire times, saved at the revision opened), the
// heartbeat (wake, pause, resume, history; its checklist shown and
// edited at its revision, a conflicting save shown beside the typed
// text), workflows (start one with a form typed by its declared inputs,
// a nonce per form as the run's idempotency key; a run's steps as a
// server-drawn SVG graph and a timeline), approvals, memory (rendered
// Markdown, markdown.go),
// failed deliveries (retry one or all), usage (tokens per day as a
// server-drawn SVG chart, per job and model, budgets) and tools (MCP
// servers, built-ins, scopes).
//
// Login takes the admin token or a webhook token whose grant has sources:
// [console] (read-only unless the grant has console: write). A session is
// an HttpOnly, SameSite=Strict cookie (Secure over TLS) naming a session
// kept on the bus (agentwork_console_sessions, under the SHA-256 of the
// cookie; no secret stored), so every instance shares it and a restart
// keeps it. Each request looks the session's credential up as the server
// accepts it now (api.Server.Credential): its grant then, not at login,
// and only while the token it was made with is still that credential's.
// Every form that changes state carries the session's CSRF token, derived
// from the cookie; sessions end at logout, after Config.SessionIdle
// without a request, and after Config.SessionMax. With the bus away,
// pages answer 503.
//
// The console is a client of the HTTP API: every page reads, and every
// form changes, through the API's own handlers called in-process
// (api.Server.Local), after the console has checked the session, the CSRF
// token and the grant. It has no other way to change state.
//
// What a model or a web page wrote is data: html/template escapes it
// everywhere, and the script builds rows with textContent. The one HTML
// made of it is a memory document's Markdown, rendered by a safe renderer
// (markdown.go: raw HTML as text, links only to http, https, mailto or a
// path, no image loaded). Every response
// has a Content-Security-Policy without inline script or style and
// frame-ancestors 'none'.
//
// See docs/console.md.
package console
