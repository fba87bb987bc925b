package nats_test

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/nats"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    nats.Config
		want string // substring of the error; "" for valid
	}{
		{nats.Config{Subject: "alerts.agentwork"}, ""},
		{nats.Config{Subject: "alerts.agentwork", JetStream: true}, ""},
		{nats.Config{}, "subject: required for type nats (e.g. alerts.agentwork)"},
		{nats.Config{Subject: "alerts.>"}, "subject:"},
		{nats.Config{Subject: "alerts.>"}, "wildcard"},
		{nats.Config{Subject: "a..b"}, "empty token"},
	} {
		err := tc.c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v.Validate() = %v, want %q", tc.c, err, tc.want)
		}
	}
}

// TestType: an entry of agentwork.yaml becomes a connector publishing on
// BuildDeps.Bus; what only the bus can tell (agentwork's own subjects) is
// refused when it is built.
func TestType(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	types := connectors.Types{nats.Type}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("alerts: {type: nats, subject: alerts.agentwork, jetstream: true}\nloop: {type: nats, subject: agentwork.request.task.x}\n"), &n); err != nil {
		t.Fatal(err)
	}
	cs, err := types.Decode(&n)
	if err != nil {
		t.Fatalf("Decode = %v", err)
	}
	if want := (nats.Config{Subject: "alerts.agentwork", JetStream: true}); cs["alerts"] != want {
		t.Errorf("Decode: alerts = %+v, want %+v", cs["alerts"], want)
	}
	if err := cs.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	if _, err := types.Build("loop", cs["loop"], connectors.BuildDeps{Bus: b}); err == nil ||
		!strings.Contains(err.Error(), `connectors.loop: subject: "agentwork.request.task.x" is under agentwork.>, agentwork's own subjects`) {
		t.Errorf("Build(loop) = %v, want an error that the subject is agentwork's own", err)
	}
	if _, err := types.Build("alerts", cs["alerts"], connectors.BuildDeps{}); err == nil || !strings.Contains(err.Error(), "connectors.alerts: type nats needs the bus") {
		t.Errorf("Build without a bus = %v, want an error naming the bus", err)
	}

	c, err := types.Build("alerts", cs["alerts"], connectors.BuildDeps{Bus: b})
	if err != nil {
		t.Fatalf("Build(alerts) = %v", err)
	}
	if got, ok := c.(*nats.Connector); !ok || got.Subject() != "alerts.agentwork" {
		t.Fatalf("Build(alerts) = %T, want a *nats.Connector on alerts.agentwork", c)
	}
	// jetstream: true reached the connector: with no stream on the subject,
	// nothing acks the publish.
	if _, err := c.Send(t.Context(), connectortest.Notification("hello")); err == nil || !strings.Contains(err.Error(), "create a stream") {
		t.Errorf("Send with jetstream and no stream = %v, want an error that says to create a stream", err)
	}
}
