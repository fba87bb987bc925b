package model

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/agentwork/agentwork/internal/httpheader"
	"github.com/agentwork/agentwork/internal/secret"
)

// Config is the model section of agentwork.yaml shared by the HTTP providers.
// Secrets come in resolved: the config loader expands ${ENV} references, and
// a provider never logs, returns or emits APIKey.
type Config struct {
	// Provider selects the client: "openai" (any OpenAI-compatible server),
	// "anthropic", or "script" (offline, deterministic). Default "script".
	Provider string `yaml:"provider" json:"provider,omitempty" jsonschema:"enum=script,enum=openai,enum=anthropic,default=script"`
	// BaseURL is the API root, e.g. https://api.openai.com/v1 or
	// http://127.0.0.1:11434/v1 for Ollama. Default per provider.
	BaseURL string `yaml:"base_url" json:"base_url,omitempty"`
	// Model is the model name sent to the server.
	Model string `yaml:"model" json:"model,omitempty"`
	// APIKey is the key, normally written as ${OPENAI_API_KEY}. Optional for
	// local servers.
	APIKey string `yaml:"api_key" json:"api_key,omitempty"`
	// APIKeyEnv is the environment variable APIKey was read from, when the
	// config wrote it as a ${VAR} reference (set by the config loader, not
	// written by users): error hints name it.
	APIKeyEnv string `yaml:"-" json:"-"`
	// Section is where the config file has this model: "model" (the
	// default, also when empty) or "models.<name>" (set by the config
	// loader, not written by users): errors and hints name its fields so.
	Section string `yaml:"-" json:"-"`
	// Timeout bounds one model call. Default 120s.
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// MaxTokens caps the reply. Default 1024 (Anthropic requires a value).
	MaxTokens int `yaml:"max_tokens" json:"max_tokens,omitempty"`
	// Temperature, if set, is sent as is.
	Temperature *float64 `yaml:"temperature" json:"temperature,omitempty"`
	// Headers are extra HTTP headers sent with every call.
	Headers map[string]string `yaml:"headers" json:"headers,omitempty"`
}

// Defaults for Config.
const (
	DefaultTimeout   = 120 * time.Second
	DefaultMaxTokens = 1024
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Provider == "" {
		c.Provider = "script"
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxTokens <= 0 {
		c.MaxTokens = DefaultMaxTokens
	}
	return c
}

// Field returns the name of one of its fields as the config file writes
// it, e.g. "model.api_key" or "models.cheap.api_key".
func (c Config) Field(name string) string {
	if c.Section == "" {
		return "model." + name
	}
	return c.Section + "." + name
}

// Validate checks the fields every provider shares.
func (c Config) Validate() error {
	switch c.Provider {
	case "", "script", "openai", "anthropic":
	default:
		return fmt.Errorf("%s: %q is not a provider (want script, openai or anthropic)", c.Field("provider"), c.Provider)
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: %q is not an http(s) URL", c.Field("base_url"), secret.URL(c.BaseURL))
		}
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%s: %s is negative", c.Field("timeout"), c.Timeout)
	}
	if c.MaxTokens < 0 {
		return fmt.Errorf("%s: %d is negative", c.Field("max_tokens"), c.MaxTokens)
	}
	if c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2) {
		return fmt.Errorf("%s: %g is out of range (want 0-2)", c.Field("temperature"), *c.Temperature)
	}
	if c.Provider == "anthropic" && c.Temperature != nil && *c.Temperature > 1 {
		return fmt.Errorf("%s: %g is out of range for Anthropic (want 0-1)", c.Field("temperature"), *c.Temperature)
	}
	if err := checkHeaders(c); err != nil {
		return err
	}
	if (c.Provider == "openai" || c.Provider == "anthropic") && c.Model == "" {
		return fmt.Errorf("%s: required for provider %s (e.g. gpt-4o-mini, claude-sonnet-4-5, llama3.1)", c.Field("model"), c.Provider)
	}
	return nil
}

// checkHeaders rejects an API key or extra header that cannot be sent in
// an HTTP header, without quoting the value. The key is checked as it is
// sent: trimmed (a key read from a file often ends in a newline).
func checkHeaders(c Config) error {
	if !httpheader.ValidValue(strings.TrimSpace(c.APIKey)) {
		return fmt.Errorf("%s: contains a control character (check the ${...} reference or the file it reads)", c.Field("api_key"))
	}
	for k, v := range c.Headers {
		if !httpheader.ValidName(k) {
			return fmt.Errorf("%s: %q is not a header name", c.Field("headers"), k)
		}
		if !httpheader.ValidValue(v) {
			return fmt.Errorf("%s: the value of %q contains a control character", c.Field("headers"), k)
		}
	}
	return nil
}

// KeyHint is the hint of a 401: check model.api_key (Field), naming the variable
// it comes from when the config said (see APIKeyEnv). how, if not empty,
// says how the key is sent (e.g. "sent as x-api-key").
func (c Config) KeyHint(how string) string {
	var parts []string
	if how != "" {
		parts = append(parts, how)
	}
	switch {
	case c.APIKeyEnv != "":
		parts = append(parts, "is $"+"{"+c.APIKeyEnv+"} set in the server's environment, and is the key valid for this server?")
	case c.APIKey == "":
		parts = append(parts, "it is empty; set it, e.g. api_key: $"+"{OPENAI_API_KEY}")
	default:
		parts = append(parts, "is the key valid for this server?")
	}
	return "check " + c.Field("api_key") + " (" + strings.Join(parts, "; ") + ")"
}

// ProviderFunc adapts a function to Provider.
type ProviderFunc func(ctx context.Context, req Request) (Reply, error)

// Complete calls f.
func (f ProviderFunc) Complete(ctx context.Context, req Request) (Reply, error) { return f(ctx, req) }
