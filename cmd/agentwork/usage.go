package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	tokenusage "github.com/agentwork/agentwork/agentwork/usage"
	"github.com/agentwork/agentwork/api"
)

// cmdUsage implements `agentwork usage`: the model tokens of runs per UTC
// day, source, name and model, read from the bus of a running server.
func cmdUsage(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("usage", e)
	var cf connFlags
	cf.register(fs)
	since := fs.String("since", "7d", "days to show: 7d is today and the 6 days before (UTC); a duration (36h) reaches back that far; \"\" every day kept (90)")
	source := fs.String("source", "", "only this source (heartbeat, cron, task, ...)")
	name := fs.String("name", "", "only this name (a cron job's id, a heartbeat's or a task's name)")
	by := fs.String("by", "", "sum by these, comma-separated: day, source, name, model (default all four: one row per day, source, name and model)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the server")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return quietHelp(err)
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("usage: unexpected argument %q (filter with --source and --name)", pos[0])}
	}
	f, err := tokenusage.ParseFilter(*since, *source, *name, *by, time.Now())
	if err != nil {
		return usageError{err.Error()}
	}
	dctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	b, err := cf.dial(dctx)
	if err != nil {
		return err
	}
	defer b.Close()
	list, err := tokenusage.Query(dctx, b, f)
	if err != nil {
		return err
	}
	if *asJSON {
		if list == nil {
			list = []tokenusage.Record{}
		}
		return printJSON(e.stdout, api.UsageReply{Since: f.Since, Usage: list})
	}
	printUsage(e.stdout, list)
	return nil
}

func printUsage(w io.Writer, list []tokenusage.Record) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no model usage recorded for these days")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "DAY\tSOURCE\tNAME\tMODEL\tRUNS\tINPUT\tOUTPUT\tTOTAL\t")
	var runs, in, out int64
	for _, r := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t\n", dash(r.Day), dash(r.Source), dash(r.Name), dash(r.Model), r.Runs, r.InputTokens, r.OutputTokens, r.Total())
		runs, in, out = runs+r.Runs, in+r.InputTokens, out+r.OutputTokens
	}
	if len(list) > 1 {
		fmt.Fprintf(tw, "all\t\t\t\t%d\t%d\t%d\t%d\t\n", runs, in, out, in+out)
	}
	_ = tw.Flush()
}

// dash stands for a dimension summed over.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
