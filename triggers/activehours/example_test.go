package activehours_test

import (
	"fmt"
	"time"

	"github.com/agentwork/agentwork/triggers/activehours"
)

func Example() {
	s, err := activehours.Parse("heartbeat.active_hours", activehours.Window{
		Start: "22:00", End: "06:00", Timezone: "Europe/Berlin", Days: []string{"fri"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	fri23 := time.Date(2026, 3, 13, 23, 0, 0, 0, berlin)
	sat03 := time.Date(2026, 3, 14, 3, 0, 0, 0, berlin)
	sat12 := time.Date(2026, 3, 14, 12, 0, 0, 0, berlin)
	fmt.Println(s)
	fmt.Println(s.Contains(fri23), s.Contains(sat03), s.Contains(sat12))
	fmt.Println(s.Next(sat12).In(berlin).Format("Mon 2006-01-02 15:04"))

	_, err = activehours.Parse("heartbeat.active_hours", activehours.Window{Start: "09:00", End: "25:00"})
	fmt.Println(err)
	// Output:
	// 22:00-06:00 Europe/Berlin fri
	// true true false
	// Fri 2026-03-20 22:00
	// heartbeat.active_hours.end: "25:00" is not a time (want HH:MM, 00:00-24:00)
}
