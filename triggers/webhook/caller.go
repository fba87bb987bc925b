package webhook

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentwork/agentwork/api"
)

// Authenticate authenticates a caller of another public route, POST
// /v1/workflows/{name}/runs (an api.CallerAuth), with the webhook's
// credentials: a bearer token, or Standard Webhooks signature headers over
// body. The caller may start the workflows its grant allows with kind
// workflow (sources: [workflow]) and the workflow's name (names).
func (h *Handler) Authenticate(r *http.Request, body []byte) (api.Caller, error) {
	if len(h.tokens) == 0 && len(h.verifier.keys) == 0 {
		return api.Caller{}, errors.New("this server has no webhook credentials configured (webhook.tokens, webhook.secrets); send the admin token")
	}
	sig, isSigned, sigErr := signedHeaders(r.Header)
	switch {
	case isSigned && sigErr != nil:
		return api.Caller{}, sigErr
	case isSigned:
		if len(h.verifier.keys) == 0 {
			return api.Caller{}, errors.New("signed requests are not accepted: no webhook.secrets are configured")
		}
		k, err := h.verifier.verify(sig, body, h.now())
		if err != nil {
			return api.Caller{}, err
		}
		return api.Caller{Name: k.name, Allows: k.grant.Allows, SignedID: sig.id}, nil
	}
	c, detail := h.bearer(r)
	if c == nil {
		return api.Caller{}, errors.New(detail)
	}
	return api.Caller{Name: c.Name, Allows: c.Grant.Allows}, nil
}

// MCPCaller is a token the MCP server accepts: its name and what it may
// do there.
type MCPCaller struct {
	Name  string
	Field string // webhook.tokens[i]
	Grant Grant
	MCP   MCPGrant
}

// ErrNoMCPGrant: the token is valid, but its grant has no mcp section.
var ErrNoMCPGrant = errors.New("webhook: the token has no mcp grant")

// MCP finds the token credential tok for the MCP server: ok false when no
// configured token is tok; ErrNoMCPGrant when it is one without an mcp
// grant. Tokens are compared in constant time.
func (h *Handler) MCP(tok string) (MCPCaller, error) {
	sum := sha256.Sum256([]byte(tok))
	var found *namedToken
	for i := range h.tokens { // compare against all: timing does not tell which matched
		if subtle.ConstantTimeCompare(sum[:], h.tokens[i].sum[:]) == 1 && found == nil {
			found = &h.tokens[i]
		}
	}
	if found == nil {
		return MCPCaller{}, errors.New("the bearer token is not valid")
	}
	if found.mcp == nil {
		return MCPCaller{Name: found.name, Field: found.field}, fmt.Errorf("%w: credential %q may not use the MCP server; add `mcp: {}` (or mcp: {read_only: true}) to %s", ErrNoMCPGrant, found.name, found.field)
	}
	return MCPCaller{Name: found.name, Field: found.field, Grant: found.grant, MCP: *found.mcp}, nil
}

// byName returns the token credential called name, as a Credential.
func (h *Handler) byName(name string) (Credential, bool) {
	for i := range h.tokens {
		if h.tokens[i].name == name {
			return Credential{Name: name, Grant: h.tokens[i].grant, Field: h.tokens[i].field}, true
		}
	}
	return Credential{}, false
}

// Lookup finds the token credential called name (an api.CredentialLookup):
// its caller, with the grant Authenticate gives it, and the SHA-256 of its
// token. The web console checks its sessions with it at every request.
func (h *Handler) Lookup(name string) (api.Caller, [sha256.Size]byte, bool) {
	for i := range h.tokens {
		if h.tokens[i].name == name {
			return api.Caller{Name: name, Allows: h.tokens[i].grant.Allows}, h.tokens[i].sum, true
		}
	}
	return api.Caller{}, [sha256.Size]byte{}, false
}
