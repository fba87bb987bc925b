// Package openai is a model.Provider for the OpenAI Chat Completions API
// (POST {base_url}/chat/completions) and every server that speaks it: OpenAI,
// Ollama (http://127.0.0.1:11434/v1), vLLM, llama.cpp's llama-server, LM Studio
// and OpenAI-compatible gateways.
//
// It is a small net/http client. Each Complete call makes exactly one HTTP
// request without streaming; retries are the runner's job. Failures are
// *model.Error values classified as transient (429, 5xx, connection errors;
// with the server's Retry-After), timeout, or permanent (400, 401, 403, 404,
// 422, replies that are not a chat completion) with a message saying which
// config field to fix. The API key never appears in an error or a log line.
//
// Replies are read leniently, because OpenAI-compatible servers differ: tool
// calls are returned whenever present, whatever finish_reason says; content
// may be null, a string or a list of text parts; tool call arguments may be a
// JSON string (kept verbatim) or a JSON object (re-encoded as a string); a
// missing tool call id is replaced by a generated one.
//
// Package openaifake is an httptest fake of the API for tests.
package openai
