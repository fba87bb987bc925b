package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/approval"
)

const approvalsUsage = `usage: agentwork approvals <command> [flags]

commands:
  list [--state s] [--limit n]   approvals, newest first (state: pending, approved,
                                 rejected, expired, cancelled)
  show <id>                      one: the question, the tool call, who may decide, the decision
  approve <id> [--comment c]     approve it (as "admin")
  reject <id> [--comment c]      reject it (as "admin")

A client of the HTTP API: --api (default $AGENTWORK_API, else http://127.0.0.1:8080)
with the admin token ($AGENTWORK_ADMIN_TOKEN, else the admin-token file in the data dir).
Every command takes --data-dir / --config, and --json.`

// cmdApprovals implements `agentwork approvals list|show|approve|reject`
// over the HTTP API.
func cmdApprovals(ctx context.Context, e *env, args []string) error {
	verb, fs, gf, done, err := group{"approvals", approvalsUsage}.verb(e, args)
	if done {
		return err
	}
	base := fs.String("api", "", "the HTTP API's address (default $AGENTWORK_API, else http://127.0.0.1:8080)")
	var state, comment *string
	var limit *int
	switch verb {
	case "list":
		state = fs.String("state", "", "only approvals in this state")
		limit = fs.Int("limit", 100, "at most this many")
	case "show":
	case "approve", "reject":
		comment = fs.String("comment", "", "a comment kept with the decision")
	default:
		fmt.Fprintln(e.stderr, approvalsUsage)
		return usageError{fmt.Sprintf("approvals: unknown command %q (want list, show, approve or reject)", verb)}
	}
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return quietHelp(err)
	}
	switch {
	case verb == "list" && len(pos) > 0:
		return usageError{fmt.Sprintf("approvals list: unexpected argument %q (filter with --state)", pos[0])}
	case verb != "list" && len(pos) != 1:
		return usageError{fmt.Sprintf("approvals %s: want one approval id (see agentwork approvals list)", verb)}
	}
	c, err := newAPIClient(&gf.conn, *base)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, *gf.timeout)
	defer cancel()
	switch verb {
	case "list":
		q := url.Values{}
		if *state != "" {
			q.Set("state", *state)
		}
		q.Set("limit", fmt.Sprint(*limit))
		var list struct {
			Approvals []approval.Approval `json:"approvals"`
		}
		if err := c.do(cctx, http.MethodGet, "/v1/approvals?"+q.Encode(), nil, &list); err != nil {
			return err
		}
		return show(e, *gf.json, printApprovals)(list, nil)
	case "show":
		var a approval.Approval
		return show(e, *gf.json, printApproval)(a, c.do(cctx, http.MethodGet, "/v1/approvals/"+url.PathEscape(pos[0]), nil, &a))
	default:
		var a approval.Approval
		body := map[string]string{}
		if *comment != "" {
			body["comment"] = *comment
		}
		err := c.do(cctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(pos[0])+"/"+verb, body, &a)
		return show(e, *gf.json, func(w io.Writer, a approval.Approval) {
			fmt.Fprintf(w, "%s %s by %s\n", a.ID, a.State, a.Decision.By)
		})(a, err)
	}
}

func printApprovals(w io.Writer, list struct {
	Approvals []approval.Approval `json:"approvals"`
}) {
	if len(list.Approvals) == 0 {
		fmt.Fprintln(w, "no approvals")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tDEADLINE\tRUN\tQUESTION")
	for _, a := range list.Approvals {
		q := a.Question
		if a.Tool != "" {
			q = a.Tool + " " + a.Args + " — " + q
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.ID, a.State, a.Deadline.UTC().Format("2006-01-02 15:04Z"), a.Run, oneLine(q, 70))
	}
	_ = tw.Flush()
}

func printApproval(w io.Writer, a approval.Approval) {
	fmt.Fprintf(w, "approval  %s (%s)\nstate     %s\n", a.ID, a.Kind, a.State)
	if a.Run != "" {
		fmt.Fprintf(w, "run       %s %s/%s %s\n", a.Run, a.Source, a.Name, a.Step)
	}
	if a.Tool != "" {
		fmt.Fprintf(w, "tool      %s\nargs      %s\n", a.Tool, a.Args)
	}
	fmt.Fprintf(w, "targets   %s\n", strings.Join(a.Targets, ", "))
	if len(a.Approvers) > 0 {
		fmt.Fprintf(w, "approvers %s (and admin)\n", strings.Join(a.Approvers, ", "))
	}
	fmt.Fprintf(w, "deadline  %s (then %s)\n", a.Deadline.UTC().Format("2006-01-02 15:04:05Z"), a.OnTimeout)
	if d := a.Decision; d != nil {
		fmt.Fprintf(w, "decision  %s by %s at %s", d.Verdict, d.By, d.At.UTC().Format("2006-01-02 15:04:05Z"))
		if d.Comment != "" {
			fmt.Fprintf(w, ": %s", d.Comment)
		}
		fmt.Fprintln(w)
	}
	if a.State == approval.Cancelled {
		fmt.Fprintf(w, "cancelled %s\n", a.CancelReason)
	}
	fmt.Fprintf(w, "\n%s\n", a.Question)
}

// apiClient calls the HTTP API with the admin token.
type apiClient struct {
	base, token string
	hc          *http.Client
}

// newAPIClient finds the API (--api, $AGENTWORK_API, the default
// listener) and the admin token ($AGENTWORK_ADMIN_TOKEN, else the data
// dir's admin-token file).
func newAPIClient(cf *connFlags, base string) (*apiClient, error) {
	if base == "" {
		base = os.Getenv("AGENTWORK_API")
	}
	if base == "" {
		base = "http://" + api.DefaultListen
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	tok := os.Getenv("AGENTWORK_ADMIN_TOKEN")
	if tok == "" {
		bc, err := cf.busConfig()
		if err != nil {
			return nil, err
		}
		if tok, err = api.ReadAdminToken(bc.WithDefaults().DataDir); err != nil {
			return nil, fmt.Errorf("%w (or set AGENTWORK_ADMIN_TOKEN)", err)
		}
	}
	return &apiClient{base: strings.TrimRight(base, "/"), token: tok, hc: &http.Client{}}, nil
}

// do sends body (JSON, if not nil) and decodes a 2xx answer into out; any
// other answer is an error with the problem's detail.
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("the HTTP API at %s: %w (is agentwork serve running there? set --api)", c.base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var d problem.Details
		if json.Unmarshal(raw, &d) != nil || d.Detail == "" {
			return fmt.Errorf("%s %s: %s", method, path, resp.Status)
		}
		if resp.StatusCode == http.StatusUnauthorized {
			return errors.New(d.Detail + " (the admin token of another server? set AGENTWORK_ADMIN_TOKEN or --data-dir)")
		}
		return errors.New(d.Detail)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}
