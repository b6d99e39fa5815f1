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

// markerLimit admits every marker call (41 per identity in all, of 100 per
// hour) and keeps each identity's state for minutes, so that only markers
// come and go while the section measures.
func markerLimit() tollgate.Limit {
	return tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 100, Period: time.Hour}
}

// markersSection measures the Redis memory request-id markers hold:
// markerCalls admitted calls with fresh ids, each under a markerDeadline
// context, on identities whose state exists beforehand, first without
// Request.ReplayTTL (the store's replay TTL applies, 2 minutes
// unless configured), then with ReplayTTL = the call's time left +
// markerMargin, as a caller that knows its deadline sets it. The first
// run's markers outlive the second's measurement, so they do not blur it.
// Each run reads used_memory and the key count before, right after, and
// markerWait later; the figures are returned as lines for below the table.
func (m *measurer) markersSection(ctx context.Context) ([]string, error) {
	c := redis.NewClient(cloneOptions(m.opts))
	defer c.Close()
	p := prefix()
	st, err := store.NewRedis(c, store.WithPrefix(p))
	if err != nil {
		return nil, err
	}
	limit := markerLimit()
	ids := make([]string, markerIdentities)
	for i := range ids {
		ids[i] = "marker-" + strconv.Itoa(i)
		if _, err := st.Allow(ctx, tollgate.Request{Key: ids[i], Limit: limit}); err != nil {
			return nil, fmt.Errorf("markers: %w", err)
		}
	}
	notes := []string{fmt.Sprintf("request-id markers: %d admitted calls with ids, %s deadlines, on %d identities; Redis used_memory and keys added:",
		markerCalls, markerDeadline, markerIdentities)}
	for _, withTTL := range []bool{false, true} {
		name := "no ReplayTTL"
		if withTTL {
			name = fmt.Sprintf("ReplayTTL = time left + %s", markerMargin)
		}
		n, err := m.markers(ctx, st, ids, withTTL)
		if err != nil {
			return nil, fmt.Errorf("markers, %s: %w", name, err)
		}
		notes = append(notes, fmt.Sprintf("  %-32s %s", name+":", n))
	}
	// The sections after this one measure CPU: no marker should expire
	// under them.
	if err := m.deleteKeys(ctx, p+"*"); err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "load: markers done")
	return notes, nil
}

// markers makes markerCalls admitted calls with fresh ids on st and
// describes the memory they hold right after and markerWait later.
func (m *measurer) markers(ctx context.Context, st *store.Redis, ids []string, withTTL bool) (string, error) {
	limit := markerLimit()
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
		return "", err
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
				req := tollgate.Request{Key: ids[n%markerIdentities], Limit: limit, RequestID: idPrefix + strconv.FormatInt(n, 36)}
				if withTTL {
					deadline, _ := cctx.Deadline()
					req.ReplayTTL = time.Until(deadline) + markerMargin
				}
				d, err := st.Allow(cctx, req)
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
		return "", err
	}
	if denied.Load() > 0 {
		return "", fmt.Errorf("%d of %d calls denied: the measurement needs admissions", denied.Load(), markerCalls)
	}
	after, err := read()
	if err != nil {
		return "", err
	}
	time.Sleep(markerWait)
	later, err := read()
	if err != nil {
		return "", err
	}
	mb := func(b int64) string { return fmt.Sprintf("%.2f MB", float64(b)/1e6) }
	return fmt.Sprintf("right after +%s (%.0f B per call), %+d keys; %s later +%s, %+d keys",
		mb(after.mem-before.mem), float64(after.mem-before.mem)/markerCalls, after.keys-before.keys,
		markerWait, mb(later.mem-before.mem), later.keys-before.keys), nil
}
