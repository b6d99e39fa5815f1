package overload

// tenants orders tenants by recent service: start-time fair queueing
// (Goyal, Vin and Cheng, 1996) with one unit of work per call. Each tenant
// has a finish tag, the clock's value when its last call was admitted plus
// one; the clock is the start tag of the last call admitted. A waiting call
// is ranked by its tenant's tag, never below the clock, so a tenant that
// was idle banks no credit, a tenant asking less than its share is always
// ahead of one asking more, and tenants that ask more than their share
// split what is left equally: max-min fairness by demand.
//
// Tags at or below the clock say nothing (they rank as the clock), so they
// are forgotten at every sweep; past MaxTenants the tenants one call ahead
// are forgotten too, and if that is not enough, all of them: fairness
// restarts from equal, memory stays bounded.
type tenants struct {
	tag   map[string]int64
	clock int64
	max   int
}

func newTenants(maxTenants int) tenants {
	return tenants{tag: map[string]int64{}, max: maxTenants}
}

// rank is the tenant's start tag: a lower rank goes first.
func (t *tenants) rank(id string) int64 {
	return max(t.tag[id], t.clock)
}

// over reports whether the tenant has been served more than one call ahead
// of the clock: it is above its share.
func (t *tenants) over(id string) bool {
	return t.tag[id] > t.clock+1
}

// served notes one call of the tenant admitted.
func (t *tenants) served(id string) {
	s := t.rank(id)
	t.tag[id], t.clock = s+1, s
}

// sweep forgets what no longer ranks a tenant apart, and more past max.
func (t *tenants) sweep() {
	for _, keep := range []int64{0, 1} {
		for id, f := range t.tag {
			if f <= t.clock+keep {
				delete(t.tag, id)
			}
		}
		if len(t.tag) <= t.max {
			return
		}
	}
	clear(t.tag)
}
