package region

import (
	"context"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store"
)

// memoryHome is a Home in process, for tests and examples: the regions
// sharing it are Regions of one process. It is the Memory store's share
// (store.Memory.ShareAll), which keeps the same holdings as the Redis
// script and answers the same, on its own clock.
type memoryHome struct {
	shares *store.Memory
}

var _ Home = (*memoryHome)(nil)

// NewMemoryHome returns an empty Home in process reading the clock now
// (time.Now when nil).
func NewMemoryHome(now func() time.Time) Home {
	var opts []store.MemoryOption
	if now != nil {
		opts = append(opts, store.WithClock(now))
	}
	st, err := store.NewMemory(opts...)
	if err != nil { // not reached: WithClock takes any non-nil clock
		panic(err)
	}
	return &memoryHome{shares: st}
}

// Share records and answers each report as the Redis Home's script does.
func (m *memoryHome) Share(ctx context.Context, reports []tollgate.Share) ([]tollgate.ShareGrant, error) {
	return m.shares.ShareAll(ctx, reports)
}

// Look returns what the Home holds of key in window, as the script's look.
func (m *memoryHome) Look(ctx context.Context, key string, window int64, lease time.Duration) (tollgate.ShareGrant, error) {
	return m.shares.LookShare(ctx, key, window, lease)
}
