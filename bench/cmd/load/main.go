// Command load measures tollgate against github.com/go-redis/redis_rate on
// one Redis, in one run, and prints one table: decisions per second and
// their p50/p99 latency at 1, 16 and 64 concurrent callers on random and hot
// identities, gRPC calls per second over bufconn with no limiter, with
// go-grpc-middleware's ratelimit interceptor on redis_rate and with
// tollgate's interceptor, Redis microseconds per script call, script calls
// per decision, and Redis bytes per identity; one hot tenant on four
// replicas with and without the local tier (package lease); and the Redis
// memory request-id markers hold.
//
// It starts its own redis-server on a loopback port unless -redis names one
// (that Redis must be on this machine and will get CONFIG RESETSTAT; its
// keys are left alone, every run writes under fresh prefixes). Each cell
// runs for -d; tollgate and redis_rate cells alternate, -reps times, and
// the table shows medians, with each tollgate/redis_rate ratio computed
// within a repetition.
//
//	go run ./cmd/load                 # docs/performance.md's tables, a few minutes
//	go run ./cmd/load -quick          # about 30 seconds
//	go run ./cmd/load -variants       # adds unbatched, go-redis AutoPipeline, no-deny-cache and Memory-store rows
//	go run ./cmd/load -sections lease,markers   # the local tier and request-id markers only, under a minute
//	go run ./cmd/load -sections cluster -callers 64   # a 3-primary Cluster: default and tagged layouts beside redis_rate
//	go run ./cmd/load -sections settle -callers 64    # settled calls and in-flight seats beside one decision and redis_rate
//	go run ./cmd/load -sections rls -callers 64 -reps 6   # tollgate-rls beside envoyproxy/ratelimit, both as Envoy Gateway runs them
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/bench"
)

type config struct {
	d          time.Duration
	reps       int
	identities int
	callers    []int
	variants   bool
	sections   map[string]bool
	subjects   string // substring filter on subject names; "" keeps all
	markdown   bool
}

func main() {
	var (
		cfg        config
		redisURL   = flag.String("redis", "", "Redis URL on this machine (redis://127.0.0.1:6379/0); default: start a redis-server")
		quick      = flag.Bool("quick", false, "a ~30s run: -d 250ms -reps 1")
		sections   = flag.String("sections", "store,grpc,memory,markers,lease,cluster", "comma-separated sections to run (cluster starts a 3-primary Cluster of its own; not run by default: journal, with a replica of its own and then on a Cluster with replicas, journalstall, with a replica frozen for -stall, settle, http and connect, the front doors over loopback, and rls, Envoy's rate limit service as Envoy Gateway runs it beside envoyproxy/ratelimit)")
		cpuprofile = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
		callers    = flag.String("callers", "1,16,64", "comma-separated numbers of concurrent callers")
	)
	flag.DurationVar(&cfg.d, "d", 2*time.Second, "duration of each cell")
	flag.IntVar(&cfg.reps, "reps", 3, "repetitions of each cell; the table shows medians")
	flag.IntVar(&cfg.identities, "identities", 10_000, "identities for the random-key cells")
	flag.BoolVar(&cfg.variants, "variants", false, "also measure tollgate unbatched, on go-redis's AutoPipeline, without the deny cache, and its interceptor on the Memory store")
	flag.StringVar(&cfg.subjects, "subjects", "", "only subjects whose name contains this (the reference always runs)")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print the table in Markdown")
	flag.Parse()
	if *quick {
		cfg.d, cfg.reps = 250*time.Millisecond, 1
	}
	for _, f := range strings.Split(*callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "load: -callers %q: %q is not a positive number\n", *callers, f)
			os.Exit(2)
		}
		cfg.callers = append(cfg.callers, n)
	}
	cfg.sections = map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		cfg.sections[strings.TrimSpace(s)] = true
	}
	if err := run(cfg, *redisURL, *cpuprofile); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

func run(cfg config, redisURL, cpuprofile string) error {
	var opts *redis.Options
	version := ""
	if redisURL != "" {
		o, err := redis.ParseURL(redisURL)
		if err != nil {
			return fmt.Errorf("-redis: %w", err)
		}
		if host := strings.Split(o.Addr, ":")[0]; host != "127.0.0.1" && host != "localhost" && host != "[::1]" {
			return fmt.Errorf("-redis %s: only a Redis on this machine (loopback) may be measured", o.Addr)
		}
		o.ContextTimeoutEnabled = true
		opts = o
	} else {
		srv, err := bench.StartRedis()
		if err != nil {
			return err
		}
		defer srv.Close()
		opts = srv.Options()
	}
	admin := redis.NewClient(cloneOptions(opts))
	defer admin.Close()
	ctx := context.Background()
	if info, err := admin.Info(ctx, "server").Result(); err == nil {
		// Valkey answers redis_version with the Redis it is compatible
		// with, and its own in valkey_version.
		var valkey string
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = "Redis " + v
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "valkey_version:"); ok {
				valkey = v
			}
		}
		if valkey != "" {
			version = "Valkey " + valkey
		}
	} else {
		return fmt.Errorf("redis at %s: %w", opts.Addr, err)
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	m := &measurer{cfg: cfg, opts: opts, admin: admin}
	start := time.Now()
	var rows []row
	// Memory first: the other sections leave keys expiring for minutes
	// (request-id markers), which would blur used_memory.
	if cfg.sections["memory"] {
		r, err := m.memorySection(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	var notes []string
	if cfg.sections["markers"] {
		n, err := m.markersSection(ctx)
		if err != nil {
			return err
		}
		notes = append(notes, n...)
	}
	if cfg.sections["store"] {
		r, err := m.storeSection(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	if cfg.sections["grpc"] {
		r, err := m.grpcSection(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	if cfg.sections["http"] {
		r, err := m.httpSection(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	if cfg.sections["connect"] {
		r, err := m.connectSection(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	if cfg.sections["settle"] {
		r, err := m.settleSection(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	if cfg.sections["cluster"] {
		r, err := m.clusterSection(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	if cfg.sections["lease"] {
		r, n, err := m.leaseSection(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
		notes = append(notes, n...)
	}
	if cfg.sections["journal"] {
		r, n, err := m.journalSection(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
		notes = append(notes, n...)
	}
	if cfg.sections["rls"] {
		n, err := m.rlsSection(ctx)
		if err != nil {
			return err
		}
		notes = append(notes, n...)
	}
	if cfg.sections["journalstall"] {
		n, err := m.journalStallSection(ctx)
		if err != nil {
			return err
		}
		notes = append(notes, n...)
	}
	fmt.Printf("tollgate vs redis_rate: %s on loopback, %d CPUs (GOMAXPROCS %d), %s, -d %s -reps %d, %d identities; took %s\n\n",
		version, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), cfg.d, cfg.reps, cfg.identities, time.Since(start).Round(time.Second))
	if len(rows) > 0 {
		if err := writeTable(os.Stdout, rows, cfg.markdown); err != nil {
			return err
		}
	}
	if len(notes) > 0 {
		fmt.Println()
		fmt.Println(strings.Join(notes, "\n"))
	}
	return nil
}

func cloneOptions(o *redis.Options) *redis.Options {
	c := *o
	return &c
}
