package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/agentwork/agentwork/connectors"
)

const deliveriesUsage = `usage: agentwork deliveries <command> [flags]

commands:
  list [--connector c]        notifications that failed delivery for good, newest first
  show <id>                   one of them: the text, the target, the last error
  retry <id>...               send them again (same notification id, so a platform
                              with an idempotency key drops a repeat)
  retry --all [--connector c] send every listed one again
  retry --force ...           also those whose retry is queued already (it was lost)

A failed delivery is kept for 30 days, until a retry delivers it.
Every command takes --data-dir / --url / --config to find the server, and --json.`

// cmdDeliveries implements `agentwork deliveries list|show|retry` on the
// bus of a running server.
func cmdDeliveries(ctx context.Context, e *env, args []string) error {
	verb, fs, gf, done, err := group{"deliveries", deliveriesUsage}.verb(e, args)
	if done {
		return err
	}
	cf, asJSON, timeout := &gf.conn, gf.json, gf.timeout
	var connector *string
	var all, force *bool
	switch verb {
	case "list":
		connector = fs.String("connector", "", "only this connector's")
	case "show":
	case "retry":
		connector = fs.String("connector", "", "with --all: only this connector's")
		all = fs.Bool("all", false, "retry every failed delivery (of --connector)")
		force = fs.Bool("force", false, "retry even if a retry is queued already (one that was lost)")
	default:
		fmt.Fprintln(e.stderr, deliveriesUsage)
		return usageError{fmt.Sprintf("deliveries: unknown command %q (want list, show or retry)", verb)}
	}
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return quietHelp(err)
	}
	switch {
	case verb == "list" && len(pos) > 0:
		return usageError{fmt.Sprintf("deliveries list: unexpected argument %q (filter with --connector)", pos[0])}
	case verb == "show" && len(pos) != 1:
		return usageError{"deliveries show: want one notification id (see agentwork deliveries list)"}
	case verb == "retry" && *all && len(pos) > 0:
		return usageError{"deliveries retry: give notification ids or --all, not both"}
	case verb == "retry" && !*all && len(pos) == 0:
		return usageError{"deliveries retry: want notification ids, or --all (see agentwork deliveries list)"}
	case verb == "retry" && !*all && *connector != "":
		return usageError{"deliveries retry: --connector selects with --all only"}
	}
	dctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	b, err := cf.dial(dctx)
	if err != nil {
		return err
	}
	defer b.Close()
	dl := connectors.NewDeadLetters(b)
	switch verb {
	case "list":
		list, err := dl.List(dctx, *connector)
		if err != nil {
			return err
		}
		if *asJSON {
			if list == nil {
				list = []connectors.DeadLetter{}
			}
			return printJSON(e.stdout, struct {
				Deliveries []connectors.DeadLetter `json:"deliveries"`
			}{list})
		}
		printDeadLetters(e.stdout, list)
		return nil
	case "show":
		return show(e, *asJSON, printDeadLetter)(dl.Get(dctx, pos[0]))
	}
	ids := pos
	if *all {
		list, err := dl.List(dctx, *connector)
		if err != nil {
			return err
		}
		for _, d := range list {
			if !d.Pending() || *force {
				ids = append(ids, d.Notification.ID)
			}
		}
		if len(ids) == 0 {
			fmt.Fprintln(e.stdout, "no failed deliveries to retry")
			return nil
		}
	}
	var errs []error
	var queued []connectors.DeadLetter
	for _, id := range ids {
		d, err := dl.Retry(dctx, id, *force)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			continue
		}
		queued = append(queued, d)
		if !*asJSON {
			fmt.Fprintf(e.stdout, "queued %s for %s again (retry %d); its outcome is a delivery event: agentwork events tail --source delivery\n", d.Notification.ID, d.Notification.Target, d.Retries)
		}
	}
	if *asJSON {
		if err := printJSON(e.stdout, struct {
			Queued []connectors.DeadLetter `json:"queued"`
		}{queued}); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

func printDeadLetters(w io.Writer, list []connectors.DeadLetter) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no failed deliveries")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAILED\tTARGET\tID\tATTEMPTS\tERROR")
	for _, d := range list {
		state := d.FailedAt.Local().Format("2006-01-02 15:04:05")
		if d.Pending() {
			state += " (retry queued)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", state, d.Notification.Target, d.Notification.ID, d.Attempts, oneLine(d.Error, 70))
	}
	_ = tw.Flush()
}

func printDeadLetter(w io.Writer, d connectors.DeadLetter) {
	n := d.Notification
	fmt.Fprintf(w, "notification  %s\n", n.ID)
	fmt.Fprintf(w, "target        %s (connector %s)\n", n.Target, d.Connector)
	fmt.Fprintf(w, "from          %s/%s, run %s\n", n.Source, n.Name, n.RunID)
	fmt.Fprintf(w, "failed        %s after %d attempts", d.FailedAt.Local().Format(time.RFC3339), d.Attempts)
	if d.Permanent {
		fmt.Fprint(w, " (permanent: fix the cause before a retry)")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "error         %s\n", d.Error)
	if d.Receipt != nil && d.Receipt.Parts > 0 {
		fmt.Fprintf(w, "delivered     %d parts before the failure (a retry sends the rest)\n", d.Receipt.Parts)
	}
	if d.Retries > 0 {
		fmt.Fprintf(w, "retries       %d, last %s", d.Retries, d.RetriedAt.Local().Format(time.RFC3339))
		if d.Pending() {
			fmt.Fprint(w, " (queued)")
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "text\n%s\n", n.Text)
}
