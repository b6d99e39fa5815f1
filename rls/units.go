package rls

import (
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/tollgate/tollgate"
)

// unit is one of envoyproxy/ratelimit's units: its name in configuration
// files, its values in responses and in limit overrides, and its window.
// Fixed windows are aligned to multiples of the length since the Unix
// epoch, as that project aligns them (it divides the Unix time by the
// unit's seconds), so a month is 30 days and a year 365 days, not calendar
// ones: the tollgate extension offers calendar windows (calendar).
type unit struct {
	name     string
	response pb.RateLimitResponse_RateLimit_Unit
	override typev3.RateLimitUnit // RateLimitUnit_UNKNOWN: an override cannot name the unit
	period   time.Duration
	calendar tollgate.Calendar
}

var units = []unit{
	{"second", pb.RateLimitResponse_RateLimit_SECOND, typev3.RateLimitUnit_SECOND, time.Second, tollgate.NoCalendar},
	{"minute", pb.RateLimitResponse_RateLimit_MINUTE, typev3.RateLimitUnit_MINUTE, time.Minute, tollgate.NoCalendar},
	{"hour", pb.RateLimitResponse_RateLimit_HOUR, typev3.RateLimitUnit_HOUR, time.Hour, tollgate.NoCalendar},
	{"day", pb.RateLimitResponse_RateLimit_DAY, typev3.RateLimitUnit_DAY, 24 * time.Hour, tollgate.Day},
	{"week", pb.RateLimitResponse_RateLimit_WEEK, typev3.RateLimitUnit_UNKNOWN, 7 * 24 * time.Hour, tollgate.Week},
	{"month", pb.RateLimitResponse_RateLimit_MONTH, typev3.RateLimitUnit_MONTH, 30 * 24 * time.Hour, tollgate.Month},
	{"year", pb.RateLimitResponse_RateLimit_YEAR, typev3.RateLimitUnit_YEAR, 365 * 24 * time.Hour, tollgate.Year},
}

// unitNames lists the units for errors: "second, minute, ... or year".
var unitNames = func() string {
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = u.name
	}
	return orList(names)
}()

// orList writes names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// unitNamed returns the unit a configuration file names, in any case.
func unitNamed(name string) (unit, bool) {
	name = strings.ToLower(name)
	for _, u := range units {
		if name == u.name {
			return u, true
		}
	}
	return unit{}, false
}

// overrideUnit returns the unit a limit override names.
func overrideUnit(o typev3.RateLimitUnit) (unit, bool) {
	for _, u := range units {
		if o == u.override && o != typev3.RateLimitUnit_UNKNOWN {
			return u, true
		}
	}
	return unit{}, false
}

// unitOfPeriod returns the largest unit of which d is a whole number, for
// the limit a response reports (unit and unit_multiplier); the zero unit
// (UNKNOWN) when d is not a whole number of seconds.
func unitOfPeriod(d time.Duration) unit {
	for i := len(units) - 1; i >= 0; i-- {
		if u := units[i]; u.calendar == tollgate.NoCalendar || u.name == "day" {
			if d%u.period == 0 {
				return u
			}
		}
	}
	return unit{}
}
