package cron

import (
	"testing"
	"time"
)

// BenchmarkScheduleNext is the next tick of a job, as the arming pass
// works it out for every job (100,000 of them at a start): daily, in UTC
// and in a zone with DST, and every two seconds.
//
//	go test ./triggers/cron/ -run '^$' -bench ScheduleNext
func BenchmarkScheduleNext(b *testing.B) {
	from := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ name, expr, zone string }{
		{"daily UTC", "17 9 * * *", "UTC"},
		{"daily Berlin", "17 9 * * *", "Europe/Berlin"},
		{"every 2s", "*/2 * * * * *", "UTC"},
	} {
		loc, err := time.LoadLocation(tc.zone)
		if err != nil {
			b.Fatal(err)
		}
		s, err := ParseSchedule(tc.expr, loc)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if s.Next(from).IsZero() {
					b.Fatal("no next tick")
				}
			}
		})
	}
}
