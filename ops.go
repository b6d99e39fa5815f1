package tollgate

import (
	"context"
	"time"
)

// Pinger is a Store that can say whether it answers, so that a server can
// check its limiter's store before it serves and from its health service
// (engine.Limiter.Ready). Both stores of package store implement it.
type Pinger interface {
	Store
	// Ping returns nil when the store answers within ctx, else why not.
	Ping(ctx context.Context) error
}

// RefusedStore is a Store that also keeps the summaries of refused
// identities each replica publishes (engine.Limiter.TopRefused), so that any
// replica can merge them all. A summary is opaque bytes to the store. Both
// stores of package store implement it.
type RefusedStore interface {
	Store
	// PublishRefused keeps summary as replica's for rule, replacing its
	// last one; the store may forget it ttl after the last publication.
	PublishRefused(ctx context.Context, rule, replica string, summary []byte, ttl time.Duration) error
	// RefusedSummaries returns the summaries of rule kept, by replica.
	RefusedSummaries(ctx context.Context, rule string) (map[string][]byte, error)
}
