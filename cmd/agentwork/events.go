package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
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
	source := fs.String("source", "", "only this source (heartbeat, cron, task, delivery, ...)")
	outcome := fs.String("outcome", "", "only this outcome (done, skip, error; delivered, failed)")
	since := fs.Duration("since", 0, "also show events from this long ago (default: only new ones)")
	asJSON := fs.Bool("json", false, "print each CloudEvents envelope as one JSON line")
	if _, err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	b, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	tok := func(s string) string {
		if s == "" {
			return "*"
		}
		return s
	}
	occ := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subjects.Event(tok(*source), tok(*outcome))},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	}
	if *since > 0 {
		start := time.Now().Add(-*since)
		occ.DeliverPolicy, occ.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	cons, err := b.JetStream().OrderedConsumer(ctx, bus.StreamEvents, occ)
	if err != nil {
		return fmt.Errorf("events tail: %w", err)
	}
	fmt.Fprintf(e.stderr, "following %s (Ctrl-C to stop)\n", occ.FilterSubjects[0])
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
