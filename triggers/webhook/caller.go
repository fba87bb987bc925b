package webhook

import (
	"errors"
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
