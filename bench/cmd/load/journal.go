package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/store"
)

// journalCallers is the concurrency of the journal cells.
const journalCallers = 64

// journalSubject is tollgate's token bucket with the failover journal on
// (the default) or off; peak receives, for the journal, the most
// admissions and bytes it held during a cell.
func journalSubject(name string, on bool, peak *journalPeak) subject {
	return subject{name: name, reference: !on, make: func(m *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		c := redis.NewClient(cloneOptions(m.opts))
		opts := []store.RedisOption{store.WithPrefix(prefix())}
		if !on {
			opts = append(opts, store.WithJournal(0))
		}
		st, err := redisStore(c, opts...)
		if err != nil {
			return nil, nil, err
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if on {
			wg.Go(func() { peak.watch(st, stop) })
		}
		release := func() {
			close(stop)
			wg.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = st.Close(ctx)
			_ = c.Close()
		}
		return bench.Tollgate{Store: st, Limit: limit(tollgate.TokenBucket)}, release, nil
	}}
}

// journalPeak is the largest journal seen, over every cell.
type journalPeak struct {
	mu             sync.Mutex
	entries, bytes []float64 // per cell
}

func (p *journalPeak) watch(st *store.Redis, stop <-chan struct{}) {
	var entries, bytes int64
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			p.mu.Lock()
			p.entries, p.bytes = append(p.entries, float64(entries)), append(p.bytes, float64(bytes))
			p.mu.Unlock()
			return
		case <-t.C:
		}
		s := st.Stats()
		entries, bytes = max(entries, int64(s.Journal)), max(bytes, s.JournalBytes)
	}
}

// journalSection measures the failover journal's cost: the token bucket
// with it and without it, alternating -reps times, journalCallers callers
// on -identities identities, on the measured Redis with a replica of its
// own attached (so that admissions stay in the journal until the replica
// acknowledges them, as in production). It returns the rows and a note
// with the journal's peak size.
func (m *measurer) journalSection(ctx context.Context) ([]row, []string, error) {
	host, port, err := net.SplitHostPort(m.opts.Addr)
	if err != nil {
		return nil, nil, err
	}
	replica, err := bench.StartRedis("--replicaof", host, port)
	if err != nil {
		return nil, nil, err
	}
	defer replica.Close()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, _ := rc.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("journal: the replica %s of %s did not sync", replica.Addr, m.opts.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ids := make([]string, m.cfg.identities)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	peak := &journalPeak{}
	subjects := []subject{
		journalSubject("tollgate token_bucket, journal off", false, nil),
		journalSubject("tollgate token_bucket, journal on", true, peak),
	}
	rows, err := m.compare(ctx, "journal", "random", journalCallers, subjects, func(s subject) (*sample, error) {
		d, release, err := s.make(m, storeLimit)
		if err != nil {
			return nil, err
		}
		defer release()
		return m.cell(ctx, d, journalCallers, ids, false)
	})
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(os.Stderr, "load: journal done")
	perSec := rows[1].perSec
	note := fmt.Sprintf("journal: at %d callers (%.0f decisions/s, median), the journal held at most %.0f admissions and %.0f bytes (medians of the cells' peaks), %.0f bytes per admitted decision per second",
		journalCallers, perSec, median(peak.entries), median(peak.bytes), median(peak.bytes)/perSec)
	return rows, []string{note}, nil
}
