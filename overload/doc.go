// Package overload protects a server from more load than it can serve: an
// adaptive concurrency limit, a bounded waiting room ordered by the call's
// criticality and its tenant's recent service, and refusals that say when
// to come back.
//
// It knows no wire protocol. A door (gRPC, net/http, Connect) reads a
// call's Criticality and tenant from the request, asks Check before it
// spends anything on the call (a refusal there is the cheapest one), then
// Acquire for a seat, and calls Seat.Done when the handler returns. The
// limit follows the handler's latency: it settles where the handler takes
// Tolerance times what it takes alone, so a CPU-bound server runs a few
// calls at a time and queues the rest instead of slowing every call down.
//
// Under overload the lowest criticality is shed first, in order; within a
// criticality, tenants served least recently go first (start-time fair
// queueing), so one tenant's storm gets what the others leave. A queue
// that stays non-empty for an Interval switches to newest-first and to the
// short Target wait (CoDel with adaptive LIFO). docs/overload.md has the
// design and the figures.
package overload
