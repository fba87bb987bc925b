package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.uber.org/zap"
)

// DefaultName is the name of the model the model section of agentwork.yaml
// configures; the models section names the others.
const DefaultName = "default"

// Named is a provider under the name the config gives it (model.DefaultName
// or a key of the models section).
type Named struct {
	Name     string
	Provider Provider
}

// Fallback returns a provider that asks the first of chain and, when a
// call fails with an error another model may not have (see FallsBack),
// asks the next at once, for that call: the first that answers answers.
// Each call starts again with the first. When every model failed, the
// error names each with its error; its class is transient (the runner
// tries the run again later) when any of them was, else the last one's.
// A cancelled ctx ends it at once. log hears which model failed and which
// took over. A chain of one is that provider itself.
func Fallback(log *zap.Logger, chain ...Named) Provider {
	if len(chain) == 1 {
		return chain[0].Provider
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &fallback{chain: chain, log: log}
}

type fallback struct {
	chain []Named
	log   *zap.Logger
}

var _ Provider = (*fallback)(nil)

// Name names the chain, e.g. "cheap, then strong".
func (f *fallback) Name() string {
	names := make([]string, len(f.chain))
	for i, n := range f.chain {
		names[i] = n.Name
	}
	return strings.Join(names, ", then ")
}

// Complete implements Provider.
func (f *fallback) Complete(ctx context.Context, req Request) (Reply, error) {
	var failed []string
	var errs []error
	for i, n := range f.chain {
		rep, err := n.Provider.Complete(ctx, req)
		if err == nil {
			return rep, nil
		}
		if ctx.Err() != nil {
			return Reply{}, err
		}
		failed, errs = append(failed, fmt.Sprintf("%s: %v", n.Name, err)), append(errs, err)
		if !FallsBack(err) || i == len(f.chain)-1 {
			break
		}
		next := f.chain[i+1].Name
		f.log.Warn("model failed; the next in its fallback list takes over",
			zap.String("model", n.Name), zap.String("next", next), zap.String("class", string(Classify(err))), zap.Error(err))
	}
	if len(errs) == 1 {
		return Reply{}, errs[0]
	}
	last := errs[len(errs)-1]
	out := &Error{Class: Classify(last), Message: fmt.Sprintf("no model answered (%s)", strings.Join(failed, "; "))}
	var me *Error
	if errors.As(last, &me) {
		out.Status = me.Status
	}
	// The run is tried again later if a model may answer then: the first
	// of them sets the wait.
	for _, err := range errs {
		if Retryable(err) {
			out.Class, out.RetryAfter = Classify(err), RetryAfter(err)
			break
		}
	}
	return Reply{}, out
}

// FallsBack reports whether the next model of a fallback list should take
// over after err: for transient errors and timeouts (5xx, 429, overloaded,
// connection failures), and for permanent errors of the model or its
// account (401/403: key or access; 402 or 429 insufficient_quota: no
// credit; 404: no such model or base_url; a reply that is not one), which
// another model's config may not share. Not for a rejected request (400,
// 413, 422): the next model gets the same request. Not for a cancelled
// call.
func FallsBack(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var me *Error
	if Classify(err) != ClassPermanent || !errors.As(err, &me) {
		return true
	}
	switch me.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return false
	}
	return true
}
