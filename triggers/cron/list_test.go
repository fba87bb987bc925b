package cron

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers/budget"
)

// listIDs walks List's pages of q (limit 2) and returns the ids.
func listIDs(t *testing.T, s *Scheduler, q ListQuery) []string {
	t.Helper()
	var ids []string
	q.Limit = 2
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatalf("List does not end: %v", ids)
		}
		page, more, err := s.List(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range page {
			ids = append(ids, st.Job.ID)
		}
		if !more {
			return ids
		}
		q.After = ids[len(ids)-1]
	}
}

// TestListFollowsChanges: List's pages are in id order as jobs come and
// go (the sorted ids are kept between pages, and sorted again after a
// change), a page may start after an id that is gone, and ?budget=true
// lists only the jobs with a daily token budget, its Link carrying the
// filter to the next page.
func TestListFollowsChanges(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	var jobs []Job
	for i := range 5 {
		j := Job{ID: fmt.Sprintf("job-%d", i*2), Schedule: "0 0 1 1 *", Prompt: "x"}
		if i%2 == 0 {
			j.Budget = budget.Budget{DailyTokens: 500}
		}
		jobs = append(jobs, j)
	}
	s, _ := startScheduler(t, b, Config{Jobs: jobs}, make(chan TickResult, 100))
	if got, want := listIDs(t, s, ListQuery{}), []string{"job-0", "job-2", "job-4", "job-6", "job-8"}; !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	c := NewClient(bustest.Client(t, b))
	ctx := t.Context()
	for _, id := range []string{"job-3", "job-9", "a-first"} {
		j := Job{ID: id, Schedule: "0 0 1 1 *", Prompt: "x"}
		if id == "job-3" {
			j.Budget = budget.Budget{DailyTokens: 10}
		}
		if _, err := c.Add(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"a-first", "job-0", "job-2", "job-3", "job-4", "job-6", "job-8", "job-9"}
	eventually(t, func() bool { return slices.Equal(listIDs(t, s, ListQuery{}), want) })
	if err := c.Delete(ctx, "job-3"); err != nil {
		t.Fatal(err)
	}
	want = slices.DeleteFunc(want, func(id string) bool { return id == "job-3" })
	eventually(t, func() bool { return slices.Equal(listIDs(t, s, ListQuery{}), want) })
	page, _, err := s.List(ctx, ListQuery{After: "job-3", Limit: 2})
	if err != nil || len(page) != 2 || page[0].Job.ID != "job-4" || page[1].Job.ID != "job-6" {
		t.Errorf("List after a deleted id = %+v, %v; want job-4, job-6", page, err)
	}
	if got, want := listIDs(t, s, ListQuery{Budget: true}), []string{"job-0", "job-4", "job-8"}; !slices.Equal(got, want) {
		t.Errorf("List(budget) = %v, want %v", got, want)
	}

	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/v1/jobs?budget=true&limit=2")
	if err != nil {
		t.Fatal(err)
	}
	var got []Status
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || len(got) != 2 || got[0].Job.ID != "job-0" || got[1].Job.ID != "job-4" {
		t.Fatalf("GET ?budget=true = %+v, %v", got, err)
	}
	if link := resp.Header.Get("Link"); link != `</v1/jobs?after=job-4&budget=true&limit=2>; rel="next"` {
		t.Errorf("Link = %q, want the next page of budgets", link)
	}
	resp, err = http.Get(srv.URL + "/v1/jobs?budget=maybe")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "budget") || !strings.Contains(string(body), "want true") {
		t.Errorf("GET ?budget=maybe = %d %s, want 400 naming the field", resp.StatusCode, body)
	}
}

// TestListPagesFitAMessage: the page verb cuts a page at pageBytes (a
// thousand jobs with long prompts would not fit in a NATS message) and
// says whether more follow; Client.List, which asks it for MaxListLimit
// a page, gets every job once, in order, in a tenth of the round trips
// pages of DefaultListLimit take. The list verb's pages are never cut:
// older clients end the listing at a short page.
func TestListPagesFitAMessage(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	const n = 1200
	long := strings.Repeat("a long prompt ", 500) // 7 KB: 100 of them are past pageBytes
	var jobs []Job
	for i := range n {
		p := "short"
		if i < DefaultListLimit {
			p = long
		}
		jobs = append(jobs, Job{ID: fmt.Sprintf("job-%04d", i), Schedule: "0 0 1 1 *", Prompt: p})
	}
	startScheduler(t, b, Config{Jobs: jobs}, make(chan TickResult, 10))
	cb := bustest.Client(t, b)
	call := func(verb, after string, limit int, out any) int {
		t.Helper()
		var raw json.RawMessage
		if err := cb.Call(t.Context(), "cron", verb, ServiceRequest{After: after, Limit: limit}, &raw); err != nil {
			t.Fatalf("%s after %q, limit %d: %v", verb, after, limit, err)
		}
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
		return len(raw)
	}
	for _, limit := range []int{DefaultListLimit, MaxListLimit} {
		var page []Status
		if size := call(VerbList, "", limit, &page); len(page) != limit || size <= pageBytes {
			t.Errorf("list, limit %d: %d jobs in %d bytes; want all %d, past %d bytes (not cut)", limit, len(page), size, limit, pageBytes)
		}
	}
	var ids []string
	pages := 0
	for after := ""; ; {
		var page ServicePage
		size := call(VerbPage, after, MaxListLimit, &page)
		pages++
		if size > pageBytes {
			t.Errorf("page %d: %d bytes, want at most %d", pages, size, pageBytes)
		}
		for _, st := range page.Jobs {
			ids = append(ids, st.Job.ID)
		}
		if !page.More {
			break
		}
		if pages > n {
			t.Fatal("the pages do not end")
		}
		after = ids[len(ids)-1]
	}
	if pages < 2 || pages > n/DefaultListLimit/2 {
		t.Errorf("%d pages of up to %d jobs, want several and fewer than %d", pages, MaxListLimit, n/DefaultListLimit/2)
	}
	all, err := NewClient(cb).List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range all {
		got = append(got, st.Job.ID)
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("job-%04d", i)
	}
	if !slices.Equal(ids, want) || !slices.Equal(got, want) {
		t.Errorf("pages gave %d ids, Client.List %d; want each of the %d once, in order", len(ids), len(got), n)
	}
	t.Logf("%d jobs in %d pages", n, pages)
}

// On a NATS server of one's own, with its default max_payload (1 MB): a
// page is cut at half of what the server takes when that is less than
// pageBytes; and a client lists every job through an instance of an
// earlier version that serves only the list verb (a rolling upgrade), at
// DefaultListLimit a page, which fits where MaxListLimit jobs of 2 KB
// would not.
func TestListThroughAServerOfOnesOwn(t *testing.T) {
	t.Parallel()
	const n = MaxListLimit
	prompt := strings.Repeat("p", 2000)
	var jobs []Job
	for i := range n {
		jobs = append(jobs, Job{ID: fmt.Sprintf("job-%04d", i), Schedule: "0 0 1 1 *", Prompt: prompt})
	}
	t.Run("small max_payload", func(t *testing.T) {
		t.Parallel()
		b := bustest.External(t, 256<<10)
		startScheduler(t, b, Config{Jobs: jobs}, make(chan TickResult, 10))
		var raw json.RawMessage
		if err := b.Call(t.Context(), "cron", VerbPage, ServiceRequest{Limit: MaxListLimit}, &raw); err != nil || len(raw) > 128<<10 {
			t.Errorf("a page on a server taking 256 KB: %d bytes, %v; want at most 128 KB", len(raw), err)
		}
		all, err := NewClient(b).List(t.Context())
		if err != nil || len(all) != n {
			t.Errorf("Client.List: %d jobs, %v; want all %d", len(all), err, n)
		}
	})
	t.Run("earlier version", func(t *testing.T) {
		t.Parallel()
		b := bustest.External(t, 0)
		s, _ := startSchedulerNoWait(t, b, Config{Jobs: jobs}, make(chan TickResult, 10))
		earlierVersion(t, b, s)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		all, err := NewClient(b).List(ctx)
		if err != nil || len(all) != n {
			t.Errorf("Client.List through the earlier version: %d jobs, %v; want all %d", len(all), err, n)
		}
	})
}

// A rolling upgrade rolled back (or its one new instance restarted) while
// a client lists: the instance serving page answers the first page and is
// gone before the second; instances of the earlier version still serve
// list. Client.List carries on through list from the last id.
func TestListFallsBackWhenPageGoesAwayMidListing(t *testing.T) {
	t.Parallel()
	const n = 2500
	var jobs []Job
	for i := range n {
		jobs = append(jobs, Job{ID: fmt.Sprintf("job-%04d", i), Schedule: "0 0 1 1 *", Prompt: "p"})
	}
	b := bustest.New(t)
	s, _ := startSchedulerNoWait(t, b, Config{Jobs: jobs}, make(chan TickResult, 10))
	earlierVersion(t, b, s)
	// The new instance: answers one page, and stops.
	var stopPage func() error
	var calls atomic.Int32
	stopPage, err := b.StartService(bus.Service{Name: bus.SourceCron, QueueGroup: ServiceQueue,
		Endpoints: []bus.Endpoint{{Verb: VerbPage, Handle: func(ctx context.Context, body []byte) (any, error) {
			calls.Add(1)
			var r ServiceRequest
			if err := json.Unmarshal(body, &r); err != nil {
				return nil, err
			}
			_ = stopPage() // gone before its reply is read
			return s.servicePage(context.Background(), r.After, r.Limit)
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	all, err := NewClient(b).List(ctx)
	if err != nil || len(all) != n {
		t.Errorf("Client.List as the instance serving page went away after %d page(s): %d jobs, %v; want all %d", calls.Load(), len(all), err, n)
	}
}

// A job whose prompt is 20 KB of '<' (a prompt of XML or HTML tags) on a
// server that takes 64 KB: encoded as json.Marshal does (each < six
// bytes), its status alone was past what the server takes, and every
// page holding it failed with reply_too_large. A page writes < > & as
// they are.
func TestListAPromptOfTags(t *testing.T) {
	t.Parallel()
	b := bustest.External(t, 64<<10)
	jobs := []Job{
		{ID: "a", Schedule: "0 0 1 1 *", Prompt: "short"},
		{ID: "b", Schedule: "0 0 1 1 *", Prompt: strings.Repeat("<", 20<<10)}, // 20 KB, 120 KB as JSON
		{ID: "c", Schedule: "0 0 1 1 *", Prompt: "short"},
	}
	startScheduler(t, b, Config{Jobs: jobs}, make(chan TickResult, 10))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	all, err := NewClient(b).List(ctx)
	if err != nil || len(all) != len(jobs) {
		t.Errorf("Client.List with a prompt of 20 KB of tags: %d jobs, %v; want all %d", len(all), err, len(jobs))
	}
}

// earlierVersion serves the jobs of s (run on b without its service, and
// waited for here) as an instance of the version before the page verb
// does: the list verb alone, pages of the limit asked, never cut.
func earlierVersion(t *testing.T, b *bus.Bus, s *Scheduler) {
	t.Helper()
	select {
	case <-s.Started():
	case <-time.After(time.Minute):
		t.Fatal("scheduler not ready")
	}
	stop, err := b.StartService(bus.Service{
		Name: bus.SourceCron, QueueGroup: ServiceQueue,
		Endpoints: []bus.Endpoint{{Verb: VerbList, Handle: func(ctx context.Context, body []byte) (any, error) {
			var r ServiceRequest
			if err := json.Unmarshal(body, &r); err != nil {
				return nil, err
			}
			page, _, err := s.List(ctx, ListQuery{After: r.After, Limit: r.Limit})
			return page, err
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
}
