package shed

// tenants orders the calls of tenants by start-time fair queueing (Goyal,
// Vin and Cheng, 1996), one unit of work per call. A call entering the
// room gets a start tag, the larger of the clock and its tenant's finish
// tag, and pushes that finish tag one past it; the clock is the start tag
// of the last call admitted. The room serves the lowest tag first (within
// a criticality), so a tenant asking less than its share always has the
// lowest tags, and the tenants asking more split what is left equally:
// max-min fairness by demand. A tenant that was idle banks no credit: its
// finish tag is behind the clock and its next call starts at the clock.
//
// Finish tags at or behind the clock say nothing (a tag never starts
// below the clock), so a sweep forgets them; past max tenants the tenants
// one call ahead are forgotten too, and if that is not enough, all of
// them: fairness restarts from equal, memory stays bounded.
type tenants struct {
	finish map[string]int64
	clock  int64
	max    int
}

func newTenants(maxTenants int) tenants {
	return tenants{finish: map[string]int64{}, max: maxTenants}
}

// next is the start tag a call of the tenant would get now.
func (t *tenants) next(id string) int64 {
	return max(t.finish[id], t.clock)
}

// take gives a call of the tenant its start tag.
func (t *tenants) take(id string) int64 {
	s := t.next(id)
	t.finish[id] = s + 1
	return s
}

// maxLead bounds how far a tenant's finish tag runs ahead of the clock
// through refused calls.
const maxLead = 32

// withinShare is how many calls past the clock a tenant's start tag may
// be while it counts as within its fair share: the clock moves one round
// of the tenants at a time, and a tenant asking a little less than its
// share still has a few calls in one round now and then (a Poisson
// tenant asking 0.8 of a call per round has three or more in 5% of the
// rounds, five or more in 0.1%).
const withinShare = 4

// within reports whether a call with start tag tag is within its
// tenant's share.
func (t *tenants) within(tag int64) bool {
	return tag <= t.clock+withinShare
}

// charge counts a refused call of the tenant as demand: its finish tag
// moves one further ahead, at most maxLead past the clock, so a tenant
// whose calls are refused ranks behind those that ask less; once it asks
// less, it is level again within maxLead admissions.
func (t *tenants) charge(id string) {
	t.finish[id] = min(t.next(id)+1, t.clock+maxLead)
}

// admitted advances the clock to the start tag of a call admitted.
func (t *tenants) admitted(tag int64) {
	t.clock = max(t.clock, tag)
}

// sweep forgets what no longer ranks a tenant apart, and more past max.
func (t *tenants) sweep() {
	for _, keep := range []int64{0, 1} {
		for id, f := range t.finish {
			if f <= t.clock+keep {
				delete(t.finish, id)
			}
		}
		if len(t.finish) <= t.max {
			return
		}
	}
	clear(t.finish)
}
