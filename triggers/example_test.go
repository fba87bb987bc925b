package triggers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers"
)

// reminder is a trigger with the smallest surface: a source, the
// runner's default policy, and a Run that would fire reminders (here it
// only waits). It also has an admin API on NATS and an admin route.
type reminder struct{}

var (
	_ triggers.Trigger  = reminder{}
	_ triggers.Servicer = reminder{}
	_ api.Router        = reminder{}
)

func (reminder) Sources() []string        { return []string{"reminder"} }
func (reminder) Policy() agentwork.Policy { return agentwork.Policy{} }

func (reminder) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (reminder) Service() bus.Service {
	return bus.Service{Name: "reminder", Endpoints: []bus.Endpoint{{Verb: "list", Handle: func(context.Context, []byte) (any, error) {
		return []string{}, nil
	}}}}
}

func (reminder) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/reminders", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "[]") })
}

// A runtime wires triggers from a list: the policies for the runner, and
// each capability the trigger has.
func Example() {
	list := []triggers.Trigger{reminder{}}
	policies, err := triggers.Policies(list...)
	if err != nil {
		panic(err)
	}
	fmt.Println("sources:", len(policies))
	for _, t := range list {
		if s, ok := t.(triggers.Servicer); ok {
			fmt.Println("NATS API:", s.Service().Name)
		}
		if _, ok := t.(api.Router); ok {
			fmt.Println("admin routes: yes")
		}
		if _, ok := t.(api.Readier); !ok {
			fmt.Println("readiness: always ready")
		}
	}
	// Output:
	// sources: 1
	// NATS API: reminder
	// admin routes: yes
	// readiness: always ready
}

type named struct {
	reminder
	sources []string
}

func (n named) Sources() []string { return n.sources }

func TestPoliciesRejectsASharedSource(t *testing.T) {
	t.Parallel()
	p, err := triggers.Policies(named{sources: []string{"task", "github", "github"}}, named{sources: []string{"reminder"}})
	if err != nil || len(p) != 3 {
		t.Fatalf("Policies = %v, %v; want task, github, reminder", p, err)
	}
	_, err = triggers.Policies(named{sources: []string{"task"}}, named{sources: []string{"cron", "task"}})
	if err == nil || !strings.Contains(err.Error(), `"task"`) {
		t.Fatalf("Policies with task twice = %v, want an error naming the source", err)
	}
}
