// Package budget is the daily token budget of the triggers that run on
// their own (a cron job's and the heartbeat's `budget: {daily_tokens: N}`):
// the count of a day's tokens a trigger keeps in its state, and the one
// rule that pauses the trigger until its next midnight when its next run
// would pass the budget.
//
// The count lives in the trigger's state (written by its run observer in
// the write it makes for every run, once per run id), not in
// agentwork_usage: the state is written as each run ends, on the trigger's
// own day, while the usage fold may lag.
package budget

import (
	"fmt"
	"time"
)

// Budget is a cap on the model tokens of a trigger's runs.
type Budget struct {
	// DailyTokens is how many tokens (input plus output, as the provider
	// reports them) the runs may use per day. The trigger pauses when
	// today's tokens plus those of its last run would pass it: a run is
	// not started that would likely go over. 0: no cap.
	DailyTokens int64 `yaml:"daily_tokens" json:"daily_tokens,omitempty"`
}

// IsZero reports whether no budget is set.
func (b Budget) IsZero() bool { return b == Budget{} }

// Check validates b; field is where it is written in agentwork.yaml
// (e.g. "heartbeat.budget").
func (b Budget) Check(field string) error {
	if b.DailyTokens < 0 {
		return fmt.Errorf("%s.daily_tokens: %d: must not be negative (0: no cap)", field, b.DailyTokens)
	}
	return nil
}

// Spent counts the model tokens of a trigger's runs on one day (in the
// trigger's time zone). The observer adds each run's usage as it records
// the run, once per run id.
type Spent struct {
	// Day is the date, YYYY-MM-DD in the trigger's time zone.
	Day string `json:"day"`
	// Tokens are the input plus output tokens of the day's runs (since a
	// resume, which starts the count afresh).
	Tokens int64 `json:"tokens"`
	// LastRun are the tokens of the latest run: the budget expects the
	// next to use as many.
	LastRun int64 `json:"last_run"`
	// Runs counts the runs that reported a usage.
	Runs int `json:"runs"`
}

// Reset starts the day's count afresh: a resume by hand lets the trigger
// spend its budget once more today. A nil s is left alone.
func (s *Spent) Reset() {
	if s != nil {
		s.Tokens = 0
	}
}

// Over reports whether the next run would pass the budget on the day of
// now in loc: that day's tokens so far plus those of the last run (s nil,
// or of another day: nothing spent).
func (b Budget) Over(s *Spent, now time.Time, loc *time.Location) bool {
	return b.DailyTokens > 0 && s != nil && s.Day == now.In(loc).Format(time.DateOnly) && s.Tokens+s.LastRun > b.DailyTokens
}

// Pause is the pause a budget asks for: until the next midnight of the
// trigger's time zone, with the reason to show and alert.
type Pause struct {
	Until time.Time
	// Reason says what was spent and until when the trigger pauses; Used
	// says only what was spent.
	Reason, Used string
}

// Spend adds a run's tokens to the day's count s (nil, or of another day
// in loc: a fresh count) and returns the count. When b caps the day and
// the next run would pass it (today's tokens plus the last run's), it
// also returns the pause: until the next midnight in loc. A trigger that
// is paused already keeps its pause (and sends no second alert).
func Spend(s *Spent, b Budget, tokens int, now time.Time, loc *time.Location) (*Spent, *Pause) {
	local := now.In(loc)
	day := local.Format(time.DateOnly)
	if s == nil || s.Day != day {
		s = &Spent{Day: day}
	}
	used := int64(max(tokens, 0))
	s.Tokens += used
	s.LastRun = used
	s.Runs++
	if !b.Over(s, now, loc) {
		return s, nil
	}
	y, m, d := local.Date()
	until := time.Date(y, m, d+1, 0, 0, 0, 0, loc).UTC()
	spent := fmt.Sprintf("used %d tokens today of its daily budget of %d (its last run %d: the next would pass it)", s.Tokens, b.DailyTokens, s.LastRun)
	return s, &Pause{Until: until, Used: spent, Reason: spent + "; paused until " + until.In(loc).Format("2006-01-02 15:04 MST")}
}
