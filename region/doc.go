// Package region shares global limits among regions that each decide
// locally: a customer's 1,000 calls a minute, or 50 million units a month,
// across every region a service runs in, each region with its own Redis.
//
// A Region is a tollgate.Store over this region's store (its own Redis,
// through store.NewRedis, or a Memory store): every call is decided there,
// under this region's share of the global limit, with no round trip to
// another region. A goroutine the Region owns reports the region's demand
// to a Home every rebalance interval and renews its shares: max-min fair by
// the demands the regions report, handed out so that the shares in force
// never add up to more than the limit, even when a region cannot be
// reached.
//
// A share of a rate (TokenBucket, GCRA) is a lease: a part of the rate
// and of the burst for a limited time. A region that cannot reach the Home
// serves from its lease until it ends, then from its floor, a part of the
// limit reserved for it; the Home gives a region's share to the others only
// after its lease has ended there. A share of a window (FixedWindow, of a
// period or a calendar day, week, month or year) is a part of what is left
// in the window, which the region keeps until the window ends. The design,
// the bound and its proof sketch are in docs/multi-region.md.
//
// The Home is one Redis (NewRedisHome; a Sentinel or Cluster client for
// availability), holding each region's share and demand, updated by one
// short script per report. NewMemoryHome is the same in process, for tests
// and examples.
package region
