// Package mcp connects agentwork to Model Context Protocol servers and
// offers their tools to the model, on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk).
//
// A Config names the servers: stdio servers, which agentwork starts as
// child processes (command, args, env, cwd), and streamable HTTP servers
// (url, headers). A Manager built from it does no I/O until Run, which
// starts every server, lists its tools, lists them again whenever the
// server sends notifications/tools/list_changed, restarts a server that
// exits or loses its session (with a backoff from 1s doubling to 1m), and
// stops them all when its context ends. A server that cannot start does
// not keep the others from running: Status reports it as down, with the
// reason.
//
// Specs returns the tools as tools.Spec values the runner's tool loop can
// call, named <server>__<tool> so that every name fits the OpenAI and
// Anthropic rules (^[a-zA-Z0-9_-]{1,64}$; see ToolName). A call has the
// server's timeout; its result reaches the model as text (text content,
// structured content as JSON, one line for each image, audio or resource
// block), cut to the server's max_output with a note that says so. A
// result flagged isError, a timeout, a server that is down: each comes
// back as an error whose text tells the model what happened, and whose
// kind (ErrToolError, ErrTimeout, ErrDown, ErrGone, ErrCall) tells the
// caller.
//
// Env and header values are secrets: they are never logged, and are cut
// out of every error and status that might quote them (as are the query
// values of a server's URL).
package mcp
