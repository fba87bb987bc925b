package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

func cmdEvents(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "tail" {
		return usageError{"events: want: events tail [--source s] [--outcome o] [--since 1h] [--json]"}
	}
	fs := newFlagSet("events tail", e)
	var cf connFlags
	cf.register(fs)
	source := fs.String("source", "", "only these sources, comma-separated (heartbeat, cron, task, delivery, ...)")
	outcome := fs.String("outcome", "", "only these outcomes, comma-separated ("+strings.Join(api.EventOutcomes, ", ")+")")
	since := fs.Duration("since", 0, "also show events from this long ago (default: only new ones)")
	asJSON := fs.Bool("json", false, "print each CloudEvents envelope as one JSON line")
	if _, err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	sources, outcomes := splitList(*source), splitList(*outcome)
	for _, s := range sources {
		if !bus.ValidToken(s) {
			return usageError{fmt.Sprintf("events tail: --source %q: want a source name of a-z, 0-9, _ and -", s)}
		}
	}
	for _, o := range outcomes {
		if !slices.Contains(api.EventOutcomes, o) {
			return usageError{fmt.Sprintf("events tail: --outcome %q: want one or more of %s, comma-separated", o, strings.Join(api.EventOutcomes, ", "))}
		}
	}
	b, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	if len(sources) == 0 {
		sources = []string{"*"}
	}
	if len(outcomes) == 0 {
		outcomes = []string{"*"}
	}
	occ := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy}
	for _, s := range sources {
		for _, o := range outcomes {
			occ.FilterSubjects = append(occ.FilterSubjects, b.Subjects.Event(s, o))
		}
	}
	if *since > 0 {
		start := time.Now().Add(-*since)
		occ.DeliverPolicy, occ.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	cons, err := b.JetStream().OrderedConsumer(ctx, bus.StreamEvents, occ)
	if err != nil {
		return fmt.Errorf("events tail: %w", err)
	}
	fmt.Fprintf(e.stderr, "following %s until Ctrl-C\n", strings.Join(occ.FilterSubjects, ", "))
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); it.Stop() }()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("events tail: %w", err)
		}
		if *asJSON {
			fmt.Fprintln(e.stdout, strings.TrimSpace(string(m.Data())))
			continue
		}
		ev, err := bus.DecodeEvent(m.Data())
		if err != nil {
			fmt.Fprintf(e.stdout, "(unreadable event on %s: %v)\n", m.Subject(), err)
			continue
		}
		fmt.Fprintln(e.stdout, eventLine(ev))
	}
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(out, p) {
			out = append(out, p) // once: overlapping filter subjects are refused
		}
	}
	return out
}

// eventLine renders any agentwork event as one or two lines.
func eventLine(ev bus.Event) string {
	if strings.HasPrefix(ev.Type, "agentwork.delivery.") {
		var r connectors.Result
		_ = json.Unmarshal(ev.Data, &r)
		s := fmt.Sprintf("%s  %-9s %s → %s (attempts %d)", ev.Time.Local().Format("15:04:05"), strings.TrimPrefix(ev.Type, "agentwork.delivery."), r.Notification.Source+"/"+r.Notification.Name, r.Connector, r.Attempts)
		if r.Error != "" {
			s += "  " + r.Error
		}
		return s
	}
	var r agentwork.Result
	if err := ev.DecodeData(&r); err != nil || r.Outcome == "" {
		return fmt.Sprintf("%s  %s %s", ev.Time.Local().Format("15:04:05"), ev.Type, ev.Subject)
	}
	return summarize(ev, r) + fmt.Sprintf("\n  run %s  request %s", ev.RunID, ev.CausationID)
}
