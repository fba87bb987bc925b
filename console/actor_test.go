package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/agentwork/agentwork/api"
)

// The console's changes reach the API as their user (api.Actor, via
// console): what they change is recorded as that user's, and approvals
// that name their approvers hold for the console too.
func TestChangesActAsTheUser(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		token string
		want  api.Actor
	}{
		{opToken, api.Actor{Via: "console", Name: "oper", Credential: "oper"}},
		{adminToken, api.Actor{Via: "console", Name: "admin"}},
	} {
		b := f.browser(t).login(tc.token)
		if p := b.do("POST", "/jobs/digest/pause", url.Values{"csrf": {b.csrf}}); p.status != http.StatusSeeOther {
			t.Fatalf("pause as %s = %d %s", tc.want.Name, p.status, p.body)
		}
		f.routes.mu.Lock()
		got := f.routes.actors[len(f.routes.actors)-1]
		f.routes.mu.Unlock()
		if got != tc.want {
			t.Errorf("the pause of %s reached the API as %+v, want %+v", tc.want.Name, got, tc.want)
		}
	}
}
