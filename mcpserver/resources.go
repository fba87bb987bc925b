package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
)

// addResources offers the reads clients like to attach as resources:
// agentwork://runs/{id}, agentwork://jobs/{id}, agentwork://memory/{doc}.
// They check the caller's grant like the tools that read the same.
func (s *Server) addResources() {
	res := func(tmpl, name, desc, mime string, sp spec, kindOf func(id string) string, read func(ctx context.Context, c Caller, id string) (string, error)) {
		prefix := strings.TrimSuffix(tmpl, "{id}")
		prefix = strings.TrimSuffix(prefix, "{doc}")
		s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: tmpl, Name: name, Description: desc, MIMEType: mime},
			func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				uri := req.Params.URI
				id := strings.TrimPrefix(uri, prefix)
				c, err := s.caller(req.Extra)
				if err == nil {
					sp := sp
					if kindOf != nil {
						sp.kind = kindOf(id)
					}
					err = allow(c, name, sp)
				}
				text := ""
				if err == nil {
					text, err = read(ctx, c, id)
				}
				log := s.log.With(zap.String("resource", name), zap.String("uri", uri), zap.String("credential", c.Name))
				if err != nil {
					code := CodeInternal
					if e, ok := errors.AsType[*Error](err); ok {
						code = e.Code
					}
					log.Info("mcp resource read failed", zap.String("code", code))
					if code == CodeNotFound {
						return nil, mcp.ResourceNotFoundError(uri)
					}
					return nil, err
				}
				log.Info("mcp resource read")
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mime, Text: text}}}, nil
			})
	}
	asJSON := func(v any, err error) (string, error) {
		if err != nil {
			return "", err
		}
		b, err := json.MarshalIndent(v, "", "  ")
		return string(b), err
	}
	res("agentwork://runs/{id}", "run", "A run: outcome, model, tokens, tool calls, deliveries", "application/json", spec{}, nil,
		func(ctx context.Context, c Caller, id string) (string, error) {
			return asJSON(s.getRun(ctx, c, RunIn{ID: id}))
		})
	res("agentwork://jobs/{id}", "job", "A cron job and its state", "application/json", spec{kind: KindJobs}, nil,
		func(ctx context.Context, c Caller, id string) (string, error) {
			return asJSON(s.getJob(ctx, c, IDIn{ID: id}))
		})
	res("agentwork://memory/{doc}", "memory", "A memory document (long, today, yesterday, YYYY-MM-DD, checklist) as Markdown", "text/markdown", spec{kind: KindMemory}, docKind,
		func(ctx context.Context, c Caller, id string) (string, error) {
			d, err := s.readMemory(ctx, c, MemoryIn{Doc: id})
			return d.Text, err
		})
}
