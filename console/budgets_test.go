package console_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentwork/agentwork/api"
)

// manyBudgets answers GET /v1/jobs as the scheduler does over n jobs
// (ids job-00000...), each with a daily budget of 1,000 tokens: pages of
// ?limit= after ?after=, a Link to the next; ?budget=true keeps only the
// jobs with a budget (all of them here). The last job has spent 950.
type manyBudgets struct {
	n     int
	pages atomic.Int64
}

func (m *manyBudgets) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		m.pages.Add(1)
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		if limit == 0 {
			limit = 100
		}
		ids := make([]string, m.n)
		for i := range ids {
			ids[i] = fmt.Sprintf("job-%05d", i)
		}
		i, found := slices.BinarySearch(ids, q.Get("after"))
		if found {
			i++
		}
		end := min(i+limit, len(ids))
		var rows []string
		for _, id := range ids[i:end] {
			spent := 10
			if id == ids[len(ids)-1] {
				spent = 950
			}
			rows = append(rows, fmt.Sprintf(`{"job":{"id":%q,"schedule":"0 2 * * *","prompt":"p","origin":"api","budget":{"daily_tokens":1000}},"state":{"spent":{"day":"2029-12-31","tokens":%d}},"status":"active"}`, id, spent))
		}
		if end < len(ids) {
			next := fmt.Sprintf("after=%s&limit=%d", ids[end-1], limit)
			if q.Get("budget") == "true" {
				next += "&budget=true"
			}
			w.Header().Set("Link", fmt.Sprintf(`</v1/jobs?%s>; rel="next"`, next))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "[%s]", strings.Join(rows, ","))
	})
}

// The overview lists every budget near its limit, however many jobs
// there are: it read 100 jobs a page and stopped at 10,000, so the
// 12,000th job's budget at 95% was not shown. It now asks for the jobs
// with a budget, a thousand a page.
func TestOverviewBudgetsPastTenThousandJobs(t *testing.T) {
	t.Parallel()
	jobs := &manyBudgets{n: 12_000}
	f := newFixture(t, func(d *api.Deps) { d.Routes = []api.Router{jobs} })
	b := f.browser(t).login(viewerToken) // (which shows the overview)
	jobs.pages.Store(0)
	got := b.do("GET", "/", nil)
	if got.status != 200 {
		t.Fatalf("GET / = %d:\n%s", got.status, got.body)
	}
	for _, want := range []string{"12000 daily budgets", `<a href="/jobs#job-job-11999">job-11999</a>`} {
		if !strings.Contains(got.body, want) {
			t.Errorf("the overview lacks %q", want)
		}
	}
	if n := jobs.pages.Load(); n != 12 {
		t.Errorf("the overview read %d pages of jobs, want 12 (a thousand a page)", n)
	}
}
