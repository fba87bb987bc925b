package openai_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/modeltest"
	"github.com/agentwork/agentwork/model/openai"
	"github.com/agentwork/agentwork/model/openai/openaifake"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	modeltest.Run(t, modeltest.Harness{
		Features: modeltest.Features{
			Usage:        true,
			ToolCallIDs:  true,
			Requests:     true,
			StatusErrors: true,
			RawBodies:    true,
			Hang:         true,
			Timeout:      true,
			Disconnect:   true,
		},
		New: func(t *testing.T, s modeltest.Setup) modeltest.Backend {
			srv := openaifake.New(t)
			srv.SetKey(s.APIKey)
			for _, turn := range s.Turns {
				srv.Enqueue(fakeResponse(turn))
			}
			cfg := srv.Config()
			cfg.Model, cfg.Timeout = s.Model, s.Timeout
			c, err := openai.New(cfg)
			if err != nil {
				t.Fatalf("openai.New() error = %v", err)
			}
			return modeltest.Backend{Provider: c, Requests: func() []model.Request {
				var out []model.Request
				for _, r := range srv.Requests() {
					out = append(out, r.Conversation)
				}
				return out
			}}
		},
	})
}

// fakeResponse translates a suite turn into the fake's terms.
func fakeResponse(turn modeltest.Turn) openaifake.Response {
	switch {
	case turn.Fail != nil:
		r := openaifake.Error(turn.Fail.Status, turn.Fail.Message)
		if turn.Fail.RetryAfter > 0 {
			r.Header = http.Header{"Retry-After": {strconv.Itoa(int(turn.Fail.RetryAfter.Seconds()))}}
		}
		return r
	case turn.Body != "":
		return openaifake.Response{Body: turn.Body}
	case turn.Hang:
		return openaifake.Response{Hang: true}
	case turn.Disconnect:
		return openaifake.Response{Disconnect: true}
	}
	r := openaifake.Response{Reply: turn.Reply, OmitIDs: true}
	if turn.PlainStop {
		r.Reply.StopReason = "stop"
	}
	return r
}
