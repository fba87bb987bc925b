package console

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/agentwork/agentwork/agentwork/usage"
	"github.com/agentwork/agentwork/api"
)

// usageSpans are the look-backs the usage page offers, in days.
var usageSpans = []int{7, 14, 30, 90}

// chart geometry (SVG user units): the bars fill plotW x plotH, left of
// them the axis labels.
const (
	chartW, chartH = 720, 240
	plotX, plotY   = 56, 10
	plotW, plotH   = chartW - plotX - 8, chartH - plotY - 30
	modelColours   = 8 // classes m0 … m7 in console.css
)

// usagePage is the data of the usage page.
type usagePage struct {
	Days    int
	Spans   []int
	Chart   *chart
	Rows    []usage.Record // per source, name and model
	Total   usage.Record
	Budgets []budgetRow
	JobsErr string
}

// chart is the server-drawn SVG bar chart of tokens per day, stacked by
// model: every number in it is computed here.
type chart struct {
	W, H, PlotX, PlotY, PlotW, PlotH int
	Max                              int64
	Ticks                            []tick
	Bars                             []bar
	Legend                           []legend
	Label                            string // the chart's text alternative
}

type tick struct {
	Y     float64
	Label string
}

type bar struct {
	Day          string
	Label        string // the day's axis label, "" between labelled days
	X, W, LabelX float64
	Total        int64
	Parts        []barPart
}

type barPart struct {
	Model  string
	Tokens int64
	Y, H   float64
	Class  string
}

type legend struct{ Model, Class string }

// The budgets' pages: at most maxBudgetPages of budgetPage jobs.
const (
	budgetPage     = 1000
	maxBudgetPages = 100
)

// budgetRow is a cron job, or the heartbeat, with a daily token budget.
type budgetRow struct {
	ID, Timezone string
	Href         string
	Reason       string // the heartbeat's pause: its reason says what paused it
	Daily        int64
	Today        int64
	Day          string
	Paused       bool // paused by its budget
	Until        *time.Time
	Percent      int
}

func (h *handler) usage(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Nav = "Usage", "usage"
	p := usagePage{Days: 14, Spans: usageSpans}
	if d, err := strconv.Atoi(r.URL.Query().Get("days")); err == nil && d >= 1 && d <= 366 {
		p.Days = d
	}
	since := strconv.Itoa(p.Days) + "d"
	var perDay, perJob api.UsageReply
	err := h.call(r.Context(), http.MethodGet, "/v1/usage?"+url.Values{"since": {since}, "by": {"day,model"}}.Encode(), nil, &perDay, nil)
	if err == nil {
		err = h.call(r.Context(), http.MethodGet, "/v1/usage?"+url.Values{"since": {since}, "by": {"source,name,model"}}.Encode(), nil, &perJob, nil)
	}
	if err != nil {
		v.Error = "The usage could not be read: " + err.Error()
	} else {
		p.Rows = perJob.Usage
		for _, rec := range p.Rows {
			p.Total.Runs += rec.Runs
			p.Total.InputTokens += rec.InputTokens
			p.Total.OutputTokens += rec.OutputTokens
			p.Total.CachedInputTokens += rec.CachedInputTokens
		}
		if len(perDay.Usage) > 0 {
			p.Chart = drawChart(perDay.Usage, perDay.Since, time.Now().UTC())
		}
	}
	p.Budgets, p.JobsErr = h.budgets(r)
	v.Data = p
	h.render(w, http.StatusOK, "usage", v)
}

// budgets are the heartbeat and the cron jobs with a daily token budget,
// and what they spent today (their state, as GET /v1/heartbeat and GET
// /v1/jobs show it).
func (h *handler) budgets(r *http.Request) ([]budgetRow, string) {
	var out []budgetRow
	var hb struct {
		Budget struct {
			DailyTokens int64 `json:"daily_tokens"`
		} `json:"budget"`
		BudgetZone   string     `json:"budget_zone"`
		Paused       bool       `json:"paused"`
		PausedReason string     `json:"paused_reason"`
		PausedUntil  *time.Time `json:"paused_until"`
		Spent        *struct {
			Day    string `json:"day"`
			Tokens int64  `json:"tokens"`
		} `json:"spent"`
	}
	if h.call(r.Context(), http.MethodGet, "/v1/heartbeat", nil, &hb, nil) == nil && hb.Budget.DailyTokens > 0 {
		b := budgetRow{ID: "heartbeat", Href: "/heartbeat", Timezone: hb.BudgetZone, Daily: hb.Budget.DailyTokens}
		if hb.Paused {
			b.Reason, b.Until = hb.PausedReason, hb.PausedUntil
		}
		if s := hb.Spent; s != nil {
			b.Today, b.Day = s.Tokens, s.Day
		}
		b.Percent = int(min(100, b.Today*100/b.Daily))
		out = append(out, b)
	}
	// Only the jobs with a budget, a thousand a page: the scheduler picks
	// them out, so a view costs the budgets, not every job.
	after := ""
	for pages := 0; ; pages++ {
		if pages == maxBudgetPages {
			return out, fmt.Sprintf("More than %d jobs have a budget: the first %d are shown.", maxBudgetPages*budgetPage, maxBudgetPages*budgetPage)
		}
		q := url.Values{"limit": {strconv.Itoa(budgetPage)}, "budget": {"true"}}
		if after != "" {
			q.Set("after", after)
		}
		var page []job
		var hdr http.Header
		if err := h.call(r.Context(), http.MethodGet, "/v1/jobs?"+q.Encode(), nil, &page, &hdr); err != nil {
			if status(err) == http.StatusNotFound || status(err) == http.StatusUnauthorized {
				return out, ""
			}
			return out, "The jobs' budgets could not be read: " + err.Error()
		}
		for _, j := range page {
			if j.Job.Budget.DailyTokens <= 0 {
				continue
			}
			b := budgetRow{ID: j.Job.ID, Href: "/jobs#job-" + j.Job.ID, Timezone: j.Job.Timezone, Daily: j.Job.Budget.DailyTokens,
				Paused: j.State.Paused && j.State.PausedBy == "budget", Until: j.State.PausedUntil}
			if s := j.State.Spent; s != nil {
				b.Today, b.Day = s.Tokens, s.Day
			}
			b.Percent = int(min(100, b.Today*100/b.Daily))
			out = append(out, b)
		}
		m := nextLink.FindStringSubmatch(hdr.Get("Link"))
		if m == nil {
			break
		}
		after, _ = url.QueryUnescape(m[1])
	}
	return out, ""
}

// drawChart lays out the bars of recs (per day and model) from since's
// day to today's, oldest left: a day without usage has no bar.
func drawChart(recs []usage.Record, since, now time.Time) *chart {
	byDay := map[string][]usage.Record{}
	totals := map[string]int64{}
	first := now.Format(time.DateOnly)
	for _, r := range recs {
		byDay[r.Day] = append(byDay[r.Day], r)
		totals[r.Model] += r.Total()
		first = min(first, r.Day)
	}
	start, _ := time.Parse(time.DateOnly, first)
	if !since.IsZero() {
		start = since.UTC().Truncate(24 * time.Hour)
	}
	// Models by their tokens, most first: the first seven get a colour
	// each, the rest share the eighth.
	models := make([]string, 0, len(totals))
	for m := range totals {
		models = append(models, m)
	}
	sort.Slice(models, func(i, j int) bool {
		if totals[models[i]] != totals[models[j]] {
			return totals[models[i]] > totals[models[j]]
		}
		return models[i] < models[j]
	})
	class := map[string]string{}
	c := &chart{W: chartW, H: chartH, PlotX: plotX, PlotY: plotY, PlotW: plotW, PlotH: plotH}
	for i, m := range models {
		class[m] = "m" + strconv.Itoa(min(i, modelColours-1))
		name := m
		if name == "" {
			name = "(no model)"
		}
		c.Legend = append(c.Legend, legend{Model: name, Class: class[m]})
	}
	var days []string
	for d := start; !d.After(now); d = d.AddDate(0, 0, 1) {
		days = append(days, d.Format(time.DateOnly))
	}
	if len(days) == 0 {
		days = []string{now.Format(time.DateOnly)}
	}
	for _, d := range days {
		var t int64
		for _, r := range byDay[d] {
			t += r.Total()
		}
		c.Max = max(c.Max, t)
	}
	top := niceCeil(c.Max)
	slot := float64(plotW) / float64(len(days))
	labelEvery := max(1, len(days)/7)
	var sum int64
	for i, d := range days {
		b := bar{Day: d, X: plotX + float64(i)*slot + slot*0.15, W: slot * 0.7}
		b.LabelX = b.X + b.W/2
		if i%labelEvery == 0 || i == len(days)-1 && labelEvery == 1 {
			b.Label = d[5:]
		}
		rs := byDay[d]
		sort.Slice(rs, func(i, j int) bool {
			return class[rs[i].Model] < class[rs[j].Model] || class[rs[i].Model] == class[rs[j].Model] && rs[i].Model < rs[j].Model
		})
		y := float64(plotY + plotH)
		for _, r := range rs {
			hgt := float64(r.Total()) / float64(top) * plotH
			y -= hgt
			b.Parts = append(b.Parts, barPart{Model: r.Model, Tokens: r.Total(), Y: y, H: hgt, Class: class[r.Model]})
			b.Total += r.Total()
		}
		sum += b.Total
		c.Bars = append(c.Bars, b)
	}
	for i := 0; i <= 4; i++ {
		v := top * int64(i) / 4
		c.Ticks = append(c.Ticks, tick{Y: float64(plotY+plotH) - float64(v)/float64(top)*plotH, Label: tokens(v)})
	}
	c.Label = fmt.Sprintf("Model tokens per day from %s to %s, stacked by model: %s in all, at most %s on one day.",
		days[0], days[len(days)-1], tokens(sum), tokens(c.Max))
	return c
}

// niceCeil is the axis top: n rounded up to 1, 2 or 5 times a power of
// ten (at least 1).
func niceCeil(n int64) int64 {
	if n <= 1 {
		return 1
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
	}
}

// tokens writes n short: 950, 12.3k, 4.5M.
func tokens(n int64) string {
	switch {
	case n < 1000:
		return strconv.FormatInt(n, 10)
	case n < 1_000_000:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e3)) + "k"
	case n < 1_000_000_000:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e6)) + "M"
	}
	return trimZero(fmt.Sprintf("%.1f", float64(n)/1e9)) + "G"
}

func trimZero(s string) string {
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		return s[:len(s)-2]
	}
	return s
}
