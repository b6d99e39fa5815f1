// Package overload is the vocabulary of a server's overload control: how
// much a call matters (Criticality, carried in Header from client to
// server and on through the context to the calls its handler makes), how
// the control is configured (Options, given to engine.Config.Overload, so
// that the gRPC, net/http and Connect doors all apply it), and a client's
// own throttle (Throttle).
//
// The control is an adaptive concurrency limit with a bounded waiting
// room. The limit follows the handlers' latency: it settles where a
// handler takes Tolerance times what it takes alone, so a CPU-bound server
// runs a few calls at a time and queues the rest instead of slowing every
// call down. Under overload the lowest criticality is shed first, in
// order; within a criticality, the tenants served least recently go first
// (start-time fair queueing), so one tenant's storm gets what the others
// leave. A queue that stays non-empty for an Interval switches to
// newest-first and to the short Target wait (CoDel with adaptive LIFO). A
// shed call is refused with a jittered RetryAfter. docs/overload.md has
// the design and the figures.
package overload
