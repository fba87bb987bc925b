// Package mcp connects agentwork to Model Context Protocol servers and
// offers their tools to the model. Config names the servers: stdio servers,
// which agentwork starts as child processes, and streamable HTTP servers;
// ToolName is the name the model sees for each of their tools.
package mcp
