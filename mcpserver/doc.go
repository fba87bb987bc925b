// Package mcpserver is agentwork's MCP server (docs/mcp-server.md): the
// operations of the HTTP API as MCP tools and resources, on the official
// go-sdk's server side, for the assistants people already talk to.
//
// The tools are thin clients of the HTTP API (DESIGN.md §5: every surface
// is a client of one API; none has a private way to change state). Served
// at /mcp by the api server (Handler), a tool calls the API's own handler
// in process, on behalf of its caller (api.Actor), after checking the
// caller's grant: read-only or not, and the kinds of work it may touch
// (jobs, tasks, workflows, approvals, memory). Served over stdio by
// `agentwork mcp` (Remote), the same tools call the running server's API
// with the CLI's credentials.
//
// Every tool call, resource read and call the SDK refuses (an argument
// its schema does not allow, an unknown tool) is logged at info with the
// caller's credential name, never the token. A tool's error is a tool result with isError set whose text is
// {"code": ..., "message": ...}: the message says what to do.
package mcpserver
