// Package api is agentwork's HTTP server (DESIGN.md §4): the event stream
// as Server-Sent Events (GET /v1/events), recent runs (GET /v1/runs), the
// tools and their MCP servers (GET /v1/tools, POST /v1/tools/{tool}/call),
// health and readiness probes, Prometheus metrics, and the routes of other
// parts, which it finds through small capability interfaces it owns:
// Router (admin routes: cron jobs, heartbeat), PublicRouter (routes that
// authenticate callers themselves: the task webhook, POST /v1/tasks) and
// Readier (for /readyz), and Console (the web console at "/", which calls
// the API in-process through Server.Local and logs people in with
// Server.Authenticate). It imports no trigger: the runtime hands it the
// triggers that have these capabilities.
//
// Everything under /v1 except the public routes needs the admin token
// (Authorization: Bearer), generated on first start into
// <data_dir>/admin-token unless http.admin_token sets it. /healthz and
// /readyz are open; /metrics is open to loopback clients. Errors are RFC
// 9457 problem details written by api/problem, which the mounted routes use
// too. The server listens on 127.0.0.1:8080 by default and refuses a
// non-loopback address unless http.allow_remote is set.
//
// See docs/http.md for every route, its parameters and its answers.
package api
