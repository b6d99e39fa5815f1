package bench

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one line of INFO commandstats: how many times Redis ran a
// command and the microseconds of its main thread they took in all.
type CommandStat struct {
	Calls int64
	Usec  int64
}

// CommandStats returns INFO commandstats by lower-case command name
// ("evalsha", "eval", "hmget"...). Commands a script runs are counted under
// their own names too, and their time is also inside the script's.
func CommandStats(ctx context.Context, c *redis.Client) (map[string]CommandStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	stats := map[string]CommandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s CommandStat
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				s.Calls = n
			case "usec":
				s.Usec = n
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return stats, nil
}

// ScriptCalls sums the script commands (EVALSHA, EVAL and their read-only
// forms) of INFO commandstats: the calls and their Redis microseconds.
func ScriptCalls(stats map[string]CommandStat) CommandStat {
	var s CommandStat
	for _, name := range []string{"evalsha", "eval", "evalsha_ro", "eval_ro"} {
		s.Calls += stats[name].Calls
		s.Usec += stats[name].Usec
	}
	return s
}

// UsedMemory returns INFO memory's used_memory in bytes.
func UsedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, nil
}

// ServerCPU returns the CPU time the Redis server has used since it
// started (INFO cpu: used_cpu_user + used_cpu_sys), all its threads.
func ServerCPU(ctx context.Context, c *redis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// ProcessCPU returns the CPU time this process has used (user + system).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
