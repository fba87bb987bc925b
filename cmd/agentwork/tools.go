package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
)

const toolsUsage = `usage: agentwork tools <command> [flags]

commands:
  list                          every tool the server has, and each MCP server's state
  list --source s [--name n]    the tools the runs of source s (and name n: a cron
                                job's id, a task's name) are offered, and their scope
  call <tool> [--args '{...}']  call a tool by hand, outside any scope, and print its
                                result (waits up to --timeout, default 2m)

Every command takes --data-dir / --url / --config to find the server, and --json.`

// callTimeout is the default --timeout of tools call: an MCP server's
// default call timeout (60s) and a margin.
const callTimeout = 2 * time.Minute

// cmdTools implements `agentwork tools list|call` over the tools NATS
// service of a running server.
func cmdTools(ctx context.Context, e *env, args []string) error {
	verb, fs, gf, done, err := group{"tools", toolsUsage}.verb(e, args)
	if done {
		return err
	}
	var run func(ctx context.Context, c *agentwork.ToolClient, pos []string) error
	switch verb {
	case "list":
		source := fs.String("source", "", "the source whose runs' tools to show: heartbeat, cron, task, ...")
		name := fs.String("name", "", "with --source: the name of the runs (a cron job's id, a task's name)")
		run = func(ctx context.Context, c *agentwork.ToolClient, pos []string) error {
			if len(pos) > 0 {
				return usageError{fmt.Sprintf("tools list: unexpected argument %q (choose the runs with --source and --name)", pos[0])}
			}
			if *name != "" && *source == "" {
				return usageError{"tools list: --name needs --source (e.g. --source cron --name sales-report)"}
			}
			return show(e, *gf.json, toolsPrintList)(c.List(ctx, *source, *name))
		}
	case "call":
		argsJSON := fs.String("args", "{}", "the tool's arguments, a JSON object")
		run = func(ctx context.Context, c *agentwork.ToolClient, pos []string) error {
			if len(pos) != 1 {
				return usageError{"tools call: want one tool name, e.g. agentwork tools call fs__list_directory --args '{\"path\":\"/srv\"}' (see agentwork tools list)"}
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal([]byte(*argsJSON), &obj); err != nil || obj == nil {
				return usageError{fmt.Sprintf("tools call --args: %q is not a JSON object (e.g. '{\"path\":\"/srv\"}')", *argsJSON)}
			}
			call, err := c.Call(ctx, pos[0], json.RawMessage(*argsJSON))
			if err != nil {
				return err
			}
			if *gf.json {
				if err := printJSON(e.stdout, call); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(e.stderr, "%s: %s in %s\n", call.Name, call.Outcome, toolsDuration(call.DurationMS))
				if call.Result != "" {
					fmt.Fprintln(e.stdout, call.Result)
				}
			}
			if call.Outcome != tools.OutcomeOK {
				return fmt.Errorf("%s %s: %s", call.Name, call.Outcome, call.Error)
			}
			return nil
		}
	default:
		fmt.Fprintln(e.stderr, toolsUsage)
		return usageError{fmt.Sprintf("tools: unknown command %q (want list or call)", verb)}
	}
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return quietHelp(err)
	}
	timeout := *gf.timeout
	if verb == "call" && !flagSet(fs, "timeout") {
		timeout = callTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := gf.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return run(ctx, agentwork.NewToolClient(b), pos)
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func toolsPrintList(w io.Writer, l agentwork.ToolList) {
	if l.Source != "" {
		runs := l.Source
		if l.Name != "" {
			runs += " " + l.Name
		}
		scope := strings.Join(l.Scope, ", ")
		if len(l.Scope) == 0 {
			scope = "none"
		}
		fmt.Fprintf(w, "runs of %s may use: %s (%s)\n", runs, scope, toolsScopeFrom(l))
		if l.Notify {
			fmt.Fprintln(w, "and notify_user: these runs send what the model passes to it")
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(l.Tools) == 0 {
		fmt.Fprintln(tw, "no tools")
	} else {
		fmt.Fprintln(tw, "TOOL\tDESCRIPTION")
		for _, t := range l.Tools {
			fmt.Fprintf(tw, "%s\t%s\n", t.Name, oneLine(t.Description, 90))
		}
	}
	_ = tw.Flush()
	if len(l.Servers) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MCP SERVER\tTRANSPORT\tSTATE\tSINCE\tTOOLS\tRESTARTS\tDETAIL")
	for _, s := range l.Servers {
		detail := s.LastError
		if !s.RetryAt.IsZero() {
			detail += fmt.Sprintf(" (next attempt %s)", s.RetryAt.Local().Format("15:04:05"))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.Name, s.Transport, s.State, s.Since.Local().Format("2006-01-02 15:04:05"), len(s.Tools), s.Restarts, oneLine(detail, 120))
	}
	_ = tw.Flush()
}

// toolsScopeFrom says where the scope of a list comes from, in the terms
// of agentwork.yaml.
func toolsScopeFrom(l agentwork.ToolList) string {
	switch {
	case l.From == agentwork.ScopeRunner:
		return "runner.tools"
	case l.From == agentwork.ScopeSource && l.Source == bus.SourceHeartbeat:
		return "heartbeat.tools"
	case l.From == agentwork.ScopeName && l.Source == bus.SourceCron:
		return "the tools of cron job " + l.Name
	case l.From == agentwork.ScopeName && l.Source == bus.SourceTask:
		return "tasks." + l.Name + ".tools"
	}
	return "the " + l.From + "'s tools"
}

func toolsDuration(ms float64) string {
	return time.Duration(ms * float64(time.Millisecond)).Round(time.Microsecond).String()
}
