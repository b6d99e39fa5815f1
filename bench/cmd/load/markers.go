package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/store"
)

const (
	// markerCalls admitted calls carrying request ids are measured, each
	// with a markerDeadline, spread over markerIdentities identities.
	markerCalls      = 20_000
	markerDeadline   = time.Second
	markerIdentities = 1000
	// markerMargin is added to a call's time left for its ReplayTTL: a
	// retry cannot come later than the call's deadline.
	markerMargin = 100 * time.Millisecond
	// markerWait is how long after the calls used_memory is read again.
	markerWait = 3 * time.Second
)

// markerLimit admits every marker call (20 per identity of 100 per hour)
// and keeps each identity's state for minutes, so that only markers come
// and go while the section measures.
func markerLimit() tollgate.Limit {
	return tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 100, Period: time.Hour}
}

// markersSection measures the Redis memory request-id markers hold:
// markerCalls admitted calls with fresh ids, each under a markerDeadline
// context and with Request.ReplayTTL = its time left + markerMargin, on
// identities whose state exists beforehand. It reads used_memory and the
// key count before, right after, and markerWait later, and returns them
// as lines for below the table. A store that ignores ReplayTTL keeps its
// markers for its whole replay TTL (store.DefaultReplayTTL).
func (m *measurer) markersSection(ctx context.Context) ([]string, error) {
	c := redis.NewClient(cloneOptions(m.opts))
	defer c.Close()
	st := store.NewRedis(c, store.WithPrefix(prefix()))
	limit := markerLimit()
	ids := make([]string, markerIdentities)
	for i := range ids {
		ids[i] = "marker-" + strconv.Itoa(i)
		if _, err := st.Allow(ctx, tollgate.Request{Key: ids[i], Limit: limit}); err != nil {
			return nil, fmt.Errorf("markers: %w", err)
		}
	}
	type reading struct {
		mem, keys int64
	}
	read := func() (reading, error) {
		mem, err := bench.UsedMemory(ctx, m.admin)
		if err != nil {
			return reading{}, err
		}
		keys, err := m.admin.DBSize(ctx).Result()
		return reading{mem, keys}, err
	}
	before, err := read()
	if err != nil {
		return nil, err
	}
	idPrefix := prefix()
	var next, denied atomic.Int64
	const workers = 16
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > markerCalls {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, markerDeadline)
				deadline, _ := cctx.Deadline()
				d, err := st.Allow(cctx, tollgate.Request{
					Key: ids[n%markerIdentities], Limit: limit,
					RequestID: idPrefix + strconv.FormatInt(n, 36),
					ReplayTTL: time.Until(deadline) + markerMargin,
				})
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if !d.Allowed {
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("markers: %w", err)
	}
	if denied.Load() > 0 {
		return nil, fmt.Errorf("markers: %d of %d calls denied: the measurement needs admissions", denied.Load(), markerCalls)
	}
	after, err := read()
	if err != nil {
		return nil, err
	}
	time.Sleep(markerWait)
	later, err := read()
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "load: markers done")
	mb := func(b int64) string { return fmt.Sprintf("%.2f MB", float64(b)/1e6) }
	return []string{
		fmt.Sprintf("request-id markers: %d admitted calls with ids, %s deadlines, ReplayTTL = time left + %s, on %d identities:",
			markerCalls, markerDeadline, markerMargin, markerIdentities),
		fmt.Sprintf("  right after: used_memory +%s (%.0f B per call), %+d keys", mb(after.mem-before.mem),
			float64(after.mem-before.mem)/markerCalls, after.keys-before.keys),
		fmt.Sprintf("  %s later:   used_memory +%s (%.0f B per call), %+d keys", markerWait, mb(later.mem-before.mem),
			float64(later.mem-before.mem)/markerCalls, later.keys-before.keys),
	}, nil
}
