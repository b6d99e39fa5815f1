// Package fairshare is the Go mirror of the share script's water-filling
// (lua/share.lua): the Memory store's Share computes with it what the
// script computes on Redis, for every split of a quota (the regions of
// package region, the quota servers of rls).
package fairshare

import "slices"

// Of is a member's max-min fair share of limit when it asks demand and
// the others ask others (reordered): water-filling from the smallest
// demand, the member after the others of its own demand, each share an
// equal split of what is left rounded down, or the demand if less; plus
// its part of half the spare, what the demands leave, split among the
// members. The share script (lua/share.lua) computes the same.
func Of(limit int64, others []int64, demand int64) int64 {
	slices.Sort(others)
	n, left, fair := int64(len(others)+1), limit, int64(0)
	placed, i := false, 0
	for k := range n {
		var d int64
		member := !placed && (i == len(others) || others[i] > demand)
		if member {
			d, placed = demand, true
		} else {
			d, i = others[i], i+1
		}
		share := min(d, left/(n-k))
		if member {
			fair = share
		}
		left -= share
	}
	return fair + left/(2*n)
}
