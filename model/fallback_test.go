package model_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/anthropic"
	"github.com/agentwork/agentwork/model/anthropic/anthropicfake"
	"github.com/agentwork/agentwork/model/openai"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/tools"
)

// fakeModel is a provider named name on an OpenAI-compatible fake that
// expects the model id id.
func fakeModel(t *testing.T, name, id string) (model.Named, *openaifake.Server) {
	t.Helper()
	srv := openaifake.New(t)
	cfg := srv.Config()
	cfg.Model = id
	p, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return model.Named{Name: name, Provider: p}, srv
}

var hello = model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hello"}}}

func TestFallbackTakesOverOnUnavailableModels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		first openaifake.Response
	}{
		{"503 overloaded", openaifake.Error(http.StatusServiceUnavailable, "The server is overloaded")},
		{"404 no such model", openaifake.Error(http.StatusNotFound, "The model `cheap-1` does not exist")},
		{"401 bad key", openaifake.Error(http.StatusUnauthorized, "Incorrect API key provided")},
		{"429 rate limited", openaifake.RateLimited(time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cheap, a := fakeModel(t, "cheap", "cheap-1")
			strong, b := fakeModel(t, "strong", "strong-1")
			a.Enqueue(tt.first)
			b.Enqueue(openaifake.Text("hi from strong"))
			core, logs := observer.New(zapcore.WarnLevel)
			p := model.Fallback(zap.New(core), cheap, strong)
			rep, err := p.Complete(t.Context(), hello)
			if err != nil || rep.Text != "hi from strong" || rep.Model != "strong-1" {
				t.Fatalf("Complete = %+v, %v; want strong-1's answer", rep, err)
			}
			if got := a.Requests(); len(got) != 1 || got[0].Model != "cheap-1" {
				t.Errorf("cheap's server saw %d requests, want one for cheap-1", len(got))
			}
			if got := b.Requests(); len(got) != 1 || got[0].Model != "strong-1" {
				t.Errorf("strong's server saw %d requests, want one for strong-1", len(got))
			}
			warned := logs.FilterField(zap.String("model", "cheap")).FilterField(zap.String("next", "strong")).Len()
			if warned != 1 {
				t.Errorf("logged %v, want one warning that cheap failed and strong took over", logs.All())
			}
		})
	}
}

func TestFallbackStopsOnARejectedRequest(t *testing.T) {
	t.Parallel()
	cheap, a := fakeModel(t, "cheap", "cheap-1")
	strong, b := fakeModel(t, "strong", "strong-1")
	a.Enqueue(openaifake.Error(http.StatusBadRequest, "Invalid schema for function 'x'"))
	_, err := model.Fallback(nil, cheap, strong).Complete(t.Context(), hello)
	if model.Classify(err) != model.ClassPermanent || !strings.Contains(err.Error(), "Invalid schema") {
		t.Fatalf("Complete = %v, want cheap's permanent 400", err)
	}
	if n := len(b.Requests()); n != 0 {
		t.Errorf("strong's server saw %d requests, want none: the same request would be rejected there too", n)
	}
}

func TestFallbackAllFailNamesEachModel(t *testing.T) {
	t.Parallel()
	cheap, a := fakeModel(t, "cheap", "cheap-1")
	strong, b := fakeModel(t, "strong", "strong-1")
	backup, c := fakeModel(t, "backup", "backup-1")
	a.Enqueue(openaifake.Error(http.StatusServiceUnavailable, "cheap is overloaded"))
	b.Enqueue(openaifake.Error(http.StatusNotFound, "strong-1 does not exist"))
	c.Enqueue(openaifake.Error(http.StatusUnauthorized, "backup key revoked"))
	_, err := model.Fallback(nil, cheap, strong, backup).Complete(t.Context(), hello)
	if err == nil {
		t.Fatal("Complete = nil error, want every model's failure")
	}
	for _, want := range []string{"cheap: ", "cheap is overloaded", "strong: ", "strong-1 does not exist", "backup: ", "backup key revoked"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Complete = %v, want it to contain %q", err, want)
		}
	}
	// cheap was only overloaded: the run is worth trying again later.
	if c := model.Classify(err); c != model.ClassTransient {
		t.Errorf("class = %s, want transient (the first model may answer later)", c)
	}

	// All permanent: the run fails for good.
	a.Enqueue(openaifake.Error(http.StatusUnauthorized, "cheap key revoked"))
	b.Enqueue(openaifake.Error(http.StatusNotFound, "strong-1 does not exist"))
	c.Enqueue(openaifake.Error(http.StatusForbidden, "no access"))
	_, err = model.Fallback(nil, cheap, strong, backup).Complete(t.Context(), hello)
	if c := model.Classify(err); c != model.ClassPermanent || !strings.Contains(err.Error(), "no access") {
		t.Errorf("Complete = %v (%s), want a permanent error ending with backup's", err, c)
	}
}

func TestFallbackStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	cheap, a := fakeModel(t, "cheap", "cheap-1")
	strong, b := fakeModel(t, "strong", "strong-1")
	arrived := make(chan struct{})
	a.Enqueue(openaifake.Response{Hang: true, Check: func(openaifake.Request) error { close(arrived); return nil }})
	ctx, cancel := context.WithCancel(t.Context())
	p := model.Fallback(nil, cheap, strong)
	done := make(chan error, 1)
	go func() {
		_, err := p.Complete(ctx, hello)
		done <- err
	}()
	select {
	case <-arrived:
	case err := <-done:
		t.Fatalf("Complete returned %v before the call hung", err)
	}
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Complete = %v, want the cancellation", err)
	}
	if n := len(b.Requests()); n != 0 {
		t.Errorf("strong's server saw %d requests after the cancel, want none", n)
	}
}

func TestFallbackOfOneIsTheProvider(t *testing.T) {
	t.Parallel()
	cheap, _ := fakeModel(t, "cheap", "cheap-1")
	if p := model.Fallback(nil, cheap); p != cheap.Provider {
		t.Errorf("Fallback(one) = %T, want the provider itself", p)
	}
}

// A tool loop begun on one provider goes on on the other when the first
// becomes unavailable mid-run: the conversation (its tool calls and their
// results) is provider-neutral, and each fake checks it as its real API
// would (every result answers a call, no call is left unanswered).
func TestFallbackAcrossProvidersMidConversation(t *testing.T) {
	t.Parallel()
	oa := openaifake.New(t)
	an := anthropicfake.New(t)
	op, err := openai.New(oa.Config())
	if err != nil {
		t.Fatal(err)
	}
	ap, err := anthropic.New(an.Config())
	if err != nil {
		t.Fatal(err)
	}
	gpt, claude := model.Named{Name: "gpt", Provider: op}, model.Named{Name: "claude", Provider: ap}
	lookup := tools.Func("lookup", "look a host up", func(context.Context, struct{}) (string, error) { return "db-1 is down", nil })
	reg, err := tools.NewRegistry(lookup)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		chain []model.Named
	}{
		{"openai then anthropic", []model.Named{gpt, claude}},
		{"anthropic then openai", []model.Named{claude, gpt}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			call := model.ToolCall{ID: "call_1", Name: "lookup", Arguments: `{}`}
			if tt.chain[0].Name == "gpt" {
				oa.Enqueue(openaifake.ToolCalls(call), openaifake.Error(http.StatusServiceUnavailable, "overloaded"))
				an.Enqueue(anthropicfake.Text("db-1 is down, says claude"))
			} else {
				call.ID = "toolu_1"
				an.Enqueue(anthropicfake.ToolCalls(call), anthropicfake.Overloaded())
				oa.Enqueue(openaifake.Text("db-1 is down, says gpt"))
			}
			res, err := tools.Loop(t.Context(), model.Fallback(nil, tt.chain...), reg, hello, tools.Limits{})
			if err != nil || !strings.HasPrefix(res.Text, "db-1 is down, says ") || len(res.Calls) != 1 || res.Calls[0].Outcome != tools.OutcomeOK {
				t.Fatalf("Loop = %+v, %v; want the fallback's answer after the tool call", res, err)
			}
			if want := "says " + tt.chain[1].Name; !strings.HasSuffix(res.Text, want) {
				t.Errorf("the answer %q is not %s's", res.Text, tt.chain[1].Name)
			}
		})
	}
}
