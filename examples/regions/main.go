// Command regions runs three regions on one machine sharing one global
// limit, each deciding on its own store, and prints what each admitted
// every second and in all.
//
// On Memory stores and a home in process (no Redis needed):
//
//	go run ./examples/regions
//
// On three redis-servers, the home on the first (two commands):
//
//	for p in 6391 6392 6393; do redis-server --port $p --save '' --daemonize yes; done
//	go run ./examples/regions -redis 127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393
//
// Each region asks the limit at its own rate (-demand); after a few
// seconds the busiest goes quiet and the quietest surges (-move), and the
// shares follow. docs/multi-region.md explains what is printed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/region"
	"github.com/tollgate/tollgate/store"
)

var names = []string{"us-east", "eu-west", "ap-south"}

func main() {
	addrs := flag.String("redis", "", "three comma-separated host:port, one redis-server per region (the home on the first); empty: Memory stores and a home in process")
	limit := flag.Int64("limit", 600, "the global limit, calls per second")
	demand := flag.String("demand", "10,50,1000", "calls per second each region asks")
	run := flag.Duration("for", 8*time.Second, "how long to run")
	move := flag.Duration("move", 4*time.Second, "after how many whole seconds the busiest region goes quiet and the quietest surges (0: never)")
	rebalance := flag.Duration("rebalance", 500*time.Millisecond, "the regions' rebalance interval")
	flag.Parse()
	if err := runRegions(*addrs, *limit, *demand, *run, *move, *rebalance); err != nil {
		log.Fatal(err)
	}
}

func runRegions(addrs string, limit int64, demand string, run, move, rebalance time.Duration) error {
	rates, err := parseDemand(demand)
	if err != nil {
		return err
	}
	global := tollgate.PerSecond(limit)
	locals, home, closeAll, err := open(addrs)
	if err != nil {
		return err
	}
	defer closeAll()
	var regions []*region.Region
	for i, local := range locals {
		r, err := region.New(local, home, region.Config{Region: names[i], Regions: names, Limits: []tollgate.Limit{global}, Rebalance: rebalance})
		if err != nil {
			return err
		}
		defer r.Close(context.Background())
		regions = append(regions, r)
	}
	fmt.Printf("%s shared by %s; asking %v calls/s; rebalance every %s\n", global, strings.Join(names, ", "), rates, rebalance)
	fmt.Printf("%-6s %9s %9s %9s %9s\n", "second", names[0], names[1], names[2], "total")

	var admitted [3]atomic.Int64
	var wanted [3]atomic.Int64
	for i, r := range rates {
		wanted[i].Store(int64(r))
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	for i := range regions {
		wg.Go(func() { ask(ctx, regions[i], global, &wanted[i], &admitted[i]) })
	}
	// A row is what each region admitted in one second; the demand moves
	// between two rows, so every row after the announcement is of the new
	// demand.
	moveAfter := int(move / time.Second)
	start := time.Now()
	var last, total [3]int64
	for s := 1; ; s++ {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(time.Duration(s) * time.Second))):
		}
		if ctx.Err() != nil {
			break
		}
		var row [3]int64
		for i := range row {
			now := admitted[i].Load()
			row[i], last[i] = now-last[i], now
			total[i] = now
		}
		fmt.Printf("%-6d %9d %9d %9d %9d\n", s, row[0], row[1], row[2], row[0]+row[1]+row[2])
		if s == moveAfter {
			busiest, quietest := extremes(rates)
			wanted[busiest].Store(int64(rates[quietest]))
			wanted[quietest].Store(int64(rates[busiest]))
			fmt.Printf("-- %s now asks %d/s, %s %d/s\n", names[busiest], int64(rates[quietest]), names[quietest], int64(rates[busiest]))
		}
	}
	wg.Wait()
	for i := range total {
		total[i] = admitted[i].Load()
	}
	fmt.Printf("%-6s %9d %9d %9d %9d\n", "all", total[0], total[1], total[2], total[0]+total[1]+total[2])
	pic, err := regions[0].PeekGlobal(context.Background(), tollgate.Request{Key: "tenant", Limit: global})
	if err != nil {
		return err
	}
	for _, h := range pic.Regions {
		fmt.Printf("home: %-8s holds %4d/s, demand %4d/s, %s of its lease left\n", h.Group, h.Share, h.Demand, h.Left.Round(100*time.Millisecond))
	}
	return nil
}

// ask asks r for one call of global at the rate wanted says until ctx
// ends, counting what is admitted.
func ask(ctx context.Context, r *region.Region, global tollgate.Limit, wanted, admitted *atomic.Int64) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	credit := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		credit += float64(wanted.Load()) / 100
		for ; credit >= 1; credit-- {
			d, err := r.Allow(context.Background(), tollgate.Request{Key: "tenant", Limit: global})
			if err != nil {
				log.Print(err)
				return
			}
			if d.Allowed {
				admitted.Add(1)
			}
		}
	}
}

// open returns the three regions' stores and the home: on the Redis
// servers addrs names, or in process.
func open(addrs string) ([]tollgate.Store, region.Home, func(), error) {
	if addrs == "" {
		var locals []tollgate.Store
		for range names {
			m, err := store.NewMemory()
			if err != nil {
				return nil, nil, nil, err
			}
			locals = append(locals, m)
		}
		return locals, region.NewMemoryHome(nil), func() {}, nil
	}
	list := strings.Split(addrs, ",")
	if len(list) != len(names) {
		return nil, nil, nil, fmt.Errorf("-redis names %d servers, want %d: one per region", len(list), len(names))
	}
	var clients []*redis.Client
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	var locals []tollgate.Store
	for _, a := range list {
		c := redis.NewClient(&redis.Options{Addr: strings.TrimSpace(a), ContextTimeoutEnabled: true})
		clients = append(clients, c)
		if err := c.Ping(context.Background()).Err(); err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("redis %s: %w (start it first: see go doc ./examples/regions)", a, err)
		}
		st, err := store.NewRedis(c)
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		locals = append(locals, st)
	}
	home, err := region.NewRedisHome(clients[0], "example:region:")
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return locals, home, closeAll, nil
}

func parseDemand(s string) ([]float64, error) {
	parts := strings.Split(s, ",")
	if len(parts) != len(names) {
		return nil, fmt.Errorf("-demand %q: want %d rates, one per region", s, len(names))
	}
	out := make([]float64, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 {
			return nil, errors.Join(fmt.Errorf("-demand %q: %q is not a rate", s, p), err)
		}
		out[i] = v
	}
	return out, nil
}

// extremes returns the busiest and the quietest region.
func extremes(rates []float64) (busiest, quietest int) {
	for i, r := range rates {
		if r > rates[busiest] {
			busiest = i
		}
		if r < rates[quietest] {
			quietest = i
		}
	}
	return busiest, quietest
}

func init() { log.SetFlags(0); log.SetOutput(os.Stderr) }
