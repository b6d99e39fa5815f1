package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/store"
)

// serverCommands are the commands -serverstats breaks a cell's Redis time
// into: the script calls and the commands the scripts run.
var serverCommands = []string{"evalsha", "mget", "get", "set", "time", "incr", "pexpire", "zadd", "info"}

// serverStats is what one cell cost each server measured, per operation:
// from INFO commandstats (calls and µs of each of serverCommands) and
// INFO stats (bytes in from clients, out to clients, out to replicas).
type serverStats map[string]float64

// readServerStats sums INFO commandstats and INFO stats over servers.
func readServerStats(ctx context.Context, servers []*redis.Client) (serverStats, error) {
	out := serverStats{}
	for _, c := range servers {
		cs, err := bench.CommandStats(ctx, c)
		if err != nil {
			return nil, err
		}
		for _, name := range serverCommands {
			out[name+" calls"] += float64(cs[name].Calls)
			out[name+" µs"] += float64(cs[name].Usec)
		}
		info, err := c.Info(ctx, "stats").Result()
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			switch k {
			case "total_net_input_bytes", "total_net_output_bytes", "total_net_repl_output_bytes":
				var n float64
				_, _ = fmt.Sscan(v, &n)
				out[k] += n
			}
		}
	}
	return out, nil
}

// perOp returns (after - before) / ops for every figure.
func (s serverStats) perOp(before serverStats, ops int64) serverStats {
	out := serverStats{}
	for k, v := range s {
		out[k] = (v - before[k]) / float64(ops)
	}
	return out
}

// serverNotes gathers -serverstats' lines, one per row, for below the table.
type serverNotes struct {
	mu    sync.Mutex
	lines []string
}

func (n *serverNotes) add(section, keys string, callers int, subject string, samples []*sample) {
	if n == nil {
		return
	}
	figures := map[string][]float64{}
	for _, s := range samples {
		for k, v := range s.server {
			figures[k] = append(figures[k], v)
		}
	}
	var parts []string
	for _, name := range serverCommands {
		calls, us := median(figures[name+" calls"]), median(figures[name+" µs"])
		if calls > 0 {
			parts = append(parts, fmt.Sprintf("%s %.3f calls %.2f µs", name, calls, us))
		}
	}
	for _, k := range []string{"total_net_input_bytes", "total_net_output_bytes", "total_net_repl_output_bytes"} {
		if v := median(figures[k]); v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f B", strings.TrimSuffix(strings.TrimPrefix(k, "total_net_"), "_bytes"), v))
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lines = append(n.lines, fmt.Sprintf("server, per decision (medians): %s %s %d callers, %s: %s", section, keys, callers, subject, strings.Join(parts, ", ")))
}

func (n *serverNotes) all() []string {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.lines)
}

// closeStore closes st, waiting at most 5 s for its goroutines.
func closeStore(st *store.Redis) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = st.Close(ctx)
}
