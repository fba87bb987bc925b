package cron

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/agentwork/agentwork/tools/schedule"
	"github.com/agentwork/agentwork/triggers/budget"
)

// fill sets every field of the struct v points to, down into nested
// structs, to a value that is not zero: a field Job gains is set too.
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint8, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n))
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(t, s.Index(0), n)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, n)
		fill(t, e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), n)
		v.Set(p)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(int64(1_800_000_000+*n), 0).UTC()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), n)
			}
		}
	default:
		t.Fatalf("fill: a field of kind %s: teach fill to set it", v.Kind())
	}
}

// TestHeldJobRoundTrip: the scheduler gives back every job it holds as
// it was given, with each field set (a field Job gains and held forgets
// fails here), with the policies in their tables and out of them, and
// with nothing set but the id.
func TestHeldJobRoundTrip(t *testing.T) {
	var all Job
	n := 0
	fill(t, reflect.ValueOf(&all).Elem(), &n)
	no := false
	cases := map[string]Job{
		"every field set, policies out of the tables": all,
		"only the id":            {ID: "x"},
		"normalized config job":  {ID: "x", Schedule: "@daily", Prompt: "p", Enabled: &no, Deliver: "none", Overlap: OverlapAllow, Catchup: Catchup{Policy: CatchupRunAll, Max: 10}, Origin: OriginConfig},
		"empty lists, not nil":   {ID: "x", Targets: []string{}, Tools: []string{}, Metadata: map[string]string{}},
		"an agent's job":         {ID: "x", Origin: OriginAgent, Creator: &schedule.Owner{Source: "task", Name: "n"}, Budget: budget.Budget{DailyTokens: 5}},
		"a workflow's cron":      {ID: "x", Origin: OriginWorkflow, Workflow: "w", Deliver: "auto", Overlap: OverlapQueue, Catchup: Catchup{Policy: CatchupSkip}},
		"each policy's last one": {ID: "x", Deliver: "reply", Origin: OriginConsole},
	}
	for _, p := range delivers {
		cases["deliver "+p] = Job{ID: "x", Deliver: p, Origin: OriginMCP}
	}
	// Each field alone: held keeps it out of line, or inline.
	job := reflect.TypeFor[Job]()
	for i := range job.NumField() {
		var j Job
		fill(t, reflect.ValueOf(&j).Elem().Field(i), &n)
		cases["only "+job.Field(i).Name] = j
	}
	for name, j := range cases {
		h := hold(&j)
		if got := h.job(); !reflect.DeepEqual(got, j) {
			t.Errorf("%s: held and given back\n got %+v\nwant %+v", name, got, j)
		}
		if got := h.originOf(); got != j.Origin {
			t.Errorf("%s: origin %q, want %q", name, got, j.Origin)
		}
	}
	if h := hold(&Job{ID: "x", Schedule: "@daily", Deliver: "none", Overlap: OverlapSkip, Catchup: Catchup{Policy: CatchupRunOnce}, Origin: OriginConfig}); h.more != nil {
		t.Errorf("a job that sets only inline fields and policies in the tables holds more: %+v", *h.more)
	}
}

// TestHeldJobSize pins what a job costs the scheduler when it sets no
// field out of line: the size class a held job takes (Job's is 480 B).
func TestHeldJobSize(t *testing.T) {
	if size := unsafe.Sizeof(held{}); size > 192 {
		t.Errorf("a held job is %d bytes; it was 192 (Job is %d): keep the rarely set fields in heldMore", size, unsafe.Sizeof(Job{}))
	}
}
