package main

import (
	"slices"
	"testing"

	"github.com/agentwork/agentwork/config"
)

// The build's connector types have unique names, one of them the type of
// the connector a config without a connectors section gets.
func TestConnectorTypes(t *testing.T) {
	t.Parallel()
	names := connectorTypes().Names()
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(names) {
		t.Errorf("connector types %v: a name is listed twice", names)
	}
	if !slices.Contains(names, config.DefaultConnector) {
		t.Errorf("connector types %v lack %s, the default connector's type", names, config.DefaultConnector)
	}
}
