package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
)

// memoryLimit keeps one decision's state for six seconds (one unit of ten
// per minute), long enough to be counted.
func memoryLimit(alg tollgate.Algorithm) tollgate.Limit {
	return tollgate.Limit{Algorithm: alg, Rate: 10, Period: time.Minute, Burst: 10}
}

// memorySection measures the Redis memory one identity's state costs, for
// redis_rate and each tollgate algorithm: used_memory's growth over
// m.cfg.identities identities deciding once each, and MEMORY USAGE of one
// identity's state key.
func (m *measurer) memorySection(ctx context.Context) ([]row, error) {
	subjects := []subject{redisRateSubject()}
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow} {
		subjects = append(subjects, tollgateSubject("tollgate "+alg.String(), alg, false))
	}
	subjects = m.filter(subjects)
	var rows []row
	for _, s := range subjects {
		perID, one, err := m.memoryOf(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("memory, %s: %w", s.name, err)
		}
		rows = append(rows, row{section: "memory", subject: s.name, bytesPerID: perID, keyBytes: one})
	}
	fmt.Fprintln(os.Stderr, "load: memory done")
	return rows, nil
}

func (m *measurer) memoryOf(ctx context.Context, s subject) (perID, one float64, err error) {
	d, release, err := s.make(m, memoryLimit)
	if err != nil {
		return 0, 0, err
	}
	defer release()
	n := m.cfg.identities
	if err := m.deleteKeys(ctx, "*mem-*"); err != nil {
		return 0, 0, err
	}
	baseKeys, err := m.admin.DBSize(ctx).Result()
	if err != nil {
		return 0, 0, err
	}
	before, err := bench.UsedMemory(ctx, m.admin)
	if err != nil {
		return 0, 0, err
	}
	const workers = 16
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				dctx, cancel := context.WithTimeout(ctx, decisionTimeout)
				_, err := d.Decide(dctx, "mem-"+strconv.Itoa(i), "")
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	keys, err := m.admin.DBSize(ctx).Result()
	if err != nil {
		return 0, 0, err
	}
	if keys-baseKeys != int64(n) {
		return 0, 0, fmt.Errorf("%d keys for %d identities: state expired, or keys other than state were written", keys-baseKeys, n)
	}
	after, err := bench.UsedMemory(ctx, m.admin)
	if err != nil {
		return 0, 0, err
	}
	var cursor uint64
	var key string
	for key == "" {
		keys, next, err := m.admin.Scan(ctx, cursor, "*mem-7*", 100000).Result()
		if err != nil {
			return 0, 0, err
		}
		for _, k := range keys {
			if strings.HasSuffix(k, "mem-7") || strings.Contains(k, "{mem-7}") {
				key = k
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	if key == "" {
		return 0, 0, fmt.Errorf("no state key for identity mem-7")
	}
	usage, err := m.admin.MemoryUsage(ctx, key).Result()
	if err != nil {
		return 0, 0, err
	}
	return float64(after-before) / float64(n), float64(usage), m.deleteKeys(ctx, "*mem-*")
}

// deleteKeys deletes every key matching pattern.
func (m *measurer) deleteKeys(ctx context.Context, pattern string) error {
	iter := m.admin.Scan(ctx, 0, pattern, 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := m.admin.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return m.admin.Unlink(ctx, batch...).Err()
	}
	return nil
}
