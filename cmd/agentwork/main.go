// Command agentwork runs the agentwork runtime (serve) and talks to a running
// one (task, events, heartbeat, cron, deliveries, tools, memory), and checks
// configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// A second Ctrl-C (or SIGTERM) while shutting down exits at once.
		<-ctx.Done()
		stop()
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		<-again
		fmt.Fprintln(os.Stderr, "agentwork: second signal, exiting without waiting")
		os.Exit(130)
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var u usageError
		if errors.As(err, &u) {
			fmt.Fprintln(os.Stderr, "agentwork:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "agentwork:", err)
		os.Exit(1)
	}
}

// env is what every subcommand gets.
type env struct {
	stdout, stderr io.Writer
}

// command is one subcommand: it parses its own flags from args.
type command struct {
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"serve":      {"run the runtime: bus, runner, triggers, connectors, HTTP API", cmdServe},
		"task":       {"send a task request (task send \"prompt\" [--wait])", cmdTask},
		"events":     {"follow run events (events tail [--source s] [--outcome o])", cmdEvents},
		"heartbeat":  {"heartbeat status|wake|history", cmdHeartbeat},
		"cron":       {"cron list|add|show|pause|resume|run|delete|history", cmdCron},
		"deliveries": {"deliveries list|show|retry: notifications that failed delivery", cmdDeliveries},
		"approvals":  {"approvals list|show|approve|reject: the questions work waits on", cmdApprovals},
		"usage":      {"model tokens per day, source, name and model (usage [--since 7d] [--by name])", cmdUsage},
		"tools":      {"tools list|call: the tools in scope, the MCP servers, a call by hand", cmdTools},
		"memory":     {"memory show|edit|restore|export|import: the agent's memory as Markdown", cmdMemory},
		"workflow":   {"workflow list|show|run|runs|status|cancel|retry: multi-step work", cmdWorkflow},
		"mcp":        {"serve agentwork's MCP tools over stdio (for Claude Desktop and other MCP clients)", cmdMCP},
		"config":     {"config check|schema", cmdConfig},
		"version":    {"print the version", cmdVersion},
	}
}

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return usageError{"no command given"}
		}
		return nil
	}
	c, ok := commands()[args[0]]
	if !ok {
		usage(stderr)
		return usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
	return c.run(ctx, e, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: agentwork <command> [flags]\n\ncommands:")
	for _, name := range []string{"serve", "task", "events", "heartbeat", "cron", "deliveries", "approvals", "usage", "tools", "memory", "workflow", "mcp", "config", "version"} {
		fmt.Fprintf(w, "  %-11s %s\n", name, commands()[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'agentwork <command> -h' for its flags.")
}
