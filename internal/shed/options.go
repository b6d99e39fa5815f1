package shed

import (
	"fmt"
	"time"

	"github.com/tollgate/tollgate/overload"
)

// settle applies o's defaults and checks every field, naming the first bad one.
func settle(o overload.Options) (overload.Options, error) {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MinLimit", int64(o.MinLimit)}, {"MaxLimit", int64(o.MaxLimit)}, {"InitialLimit", int64(o.InitialLimit)},
		{"Interval", int64(o.Interval)}, {"ProbeSamples", int64(o.ProbeSamples)}, {"MaxWait", int64(o.MaxWait)},
		{"Target", int64(o.Target)}, {"MaxQueue", int64(o.MaxQueue)}, {"RetryAfter", int64(o.RetryAfter)},
		{"MaxTenants", int64(o.MaxTenants)},
	} {
		if f.v < 0 {
			return o, fmt.Errorf("overload: Options.%s is %d: want 0 (the default) or more", f.name, f.v)
		}
	}
	if o.Tolerance != 0 && !(o.Tolerance >= 1) {
		return o, fmt.Errorf("overload: Options.Tolerance is %v: want 0 (the default, 2) or at least 1", o.Tolerance)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.MinLimit, 1)
	def(&o.MaxLimit, 1000)
	def(&o.InitialLimit, max(16, o.MinLimit))
	def(&o.ProbeSamples, 5)
	def(&o.MaxQueue, 1000)
	def(&o.MaxTenants, 10000)
	defD(&o.Interval, 100*time.Millisecond)
	defD(&o.ProbeInterval, 10*time.Second)
	defD(&o.MaxWait, 100*time.Millisecond)
	defD(&o.Target, min(5*time.Millisecond, o.MaxWait))
	defD(&o.RetryAfter, 100*time.Millisecond)
	if o.Tolerance == 0 {
		o.Tolerance = 2
	}
	switch {
	case o.MinLimit > o.MaxLimit:
		return o, fmt.Errorf("overload: Options.MinLimit %d is above MaxLimit %d", o.MinLimit, o.MaxLimit)
	case o.InitialLimit < o.MinLimit || o.InitialLimit > o.MaxLimit:
		return o, fmt.Errorf("overload: Options.InitialLimit %d is outside [MinLimit %d, MaxLimit %d]", o.InitialLimit, o.MinLimit, o.MaxLimit)
	case o.Target > o.MaxWait:
		return o, fmt.Errorf("overload: Options.Target %s is above MaxWait %s", o.Target, o.MaxWait)
	}
	return o, nil
}
