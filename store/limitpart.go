package store

import "github.com/tollgate/tollgate"

// LimitPart names the state of limit l within an identity that has
// several limits: its period, or its calendar unit ("1s", "1h0m0s",
// "daily"). With PartKey, each limit of one identity keeps its own state on
// the identity's hash tag; package interceptor (Rule.Limits) and package
// rls (several limits on a descriptor) name parts alike, so that the edge
// and the services share state.
func LimitPart(l tollgate.Limit) string {
	if l.Calendar != tollgate.NoCalendar {
		return l.Calendar.String()
	}
	return l.Period.String()
}
