// Package anthropic is a model.Provider for the Anthropic Messages API
// (POST {base_url}/v1/messages) and the servers that speak it: Anthropic, and
// the Anthropic-compatible endpoints of Ollama, llama.cpp's llama-server and
// LM Studio.
//
// It is a small net/http client. Each Complete call makes exactly one HTTP
// request without streaming; retries are the runner's job. It sends
// x-api-key and anthropic-version: 2023-06-01, always sends max_tokens, puts
// the system prompt at the top level, and turns tool calls and tool results
// into tool_use and tool_result content blocks (consecutive tool results go
// into one user turn, with is_error when the tool failed). Text blocks of a
// reply are concatenated; tool calls are returned whenever present, whatever
// stop_reason says.
//
// Failures are *model.Error values classified as transient (429, 5xx, 529
// overloaded, connection errors; with Retry-After or the
// anthropic-ratelimit-*-reset headers), timeout, or permanent (400, 401,
// 403, 404, 422, replies that are not a message) with a message saying which
// config field to fix. The API key never appears in an error or a log line.
//
// Package anthropicfake is an httptest fake of the API for tests.
package anthropic
