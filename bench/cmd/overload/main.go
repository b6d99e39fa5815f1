// Command overload measures overload control on a gRPC server whose
// capacity is one CPU core: tollgate's (engine.Config.Overload through
// the gRPC door), failsafe-go's adaptive limiter and prioritizer, and no
// protection, in one run, as medians of alternating repetitions.
//
// The server is a separate process pinned to one CPU (-server-procs Ps on it);
// each call is -work of CPU in -steps steps with a yield between them, so
// calls in flight share the core and the server has a real knee. This
// process, pinned to another CPU, offers open-loop Poisson load with a
// -deadline per call in four criticalities (shares -shares, most critical
// first) from ten tenants, and counts what is served within the deadline.
// A fresh server process runs each cell.
//
//	go run ./cmd/overload                                   # sweep 0.5×–12×, a 12× Sheddable spike, one tenant at 10× its share
//	go run ./cmd/overload -sections refusal                 # server CPU per call accepted, refused in an interceptor, shed by tollgate's door
//	go run ./cmd/overload -base /tmp/overload-old -subjects tollgate,tollgate@base   # old code beside new
//	go run ./cmd/overload -json out.json -plot served.png   # the figures for docs/overload.md
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

type measurer struct {
	serverCPU, clientCPU int
	serverProcs          int
	steps, spin          int
	capacity             float64 // calls/s the server completes when saturated
	shares               []float64
	warmup, window       time.Duration
	profiles             string        // a directory for the servers' CPU profiles
	base                 string        // the server executable of the subjects named …@base
	wait                 time.Duration // how long a call of waitMethod waits (mix, dependency)
	depSlots             int           // the dependency's calls at once (dependency)
	streamWorkers        int           // grpc.NumStreamWorkers of the servers; 0: none
}

func main() {
	serveCfg := flag.String("serve", "", "run as the server process (internal)")
	sections := flag.String("sections", "sweep,spike,tenant", "comma-separated: sweep, spike, tenant, refusal, mix, dependency")
	loads := flag.String("loads", "0.5,1,2,4,8,12", "offered loads of the sweep, in capacities")
	subjects := flag.String("subjects", subjectNone+","+subjectFailsafe+","+subjectTollgate+","+subjectThrottle, "subjects, comma-separated")
	shares := flag.String("shares", "0.1,0.2,0.3,0.4", "shares of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE in the mix")
	reps := flag.Int("reps", 3, "repetitions; the tables show medians and the spread")
	workD := flag.Duration("work", time.Millisecond, "CPU per call")
	steps := flag.Int("steps", 10, "steps per call, with a yield between them")
	capacity := flag.Float64("capacity", 0, "the server's capacity in calls/s (default: measured closed-loop first)")
	jsonOut := flag.String("json", "", "write every cell to this file")
	plotOut := flag.String("plot", "", "write the sweep's served fraction per class against offered load to this PNG")
	m := &measurer{serverCPU: 1, clientCPU: 0}
	flag.DurationVar(&m.warmup, "warmup", 1500*time.Millisecond, "load before each cell's measurement")
	flag.DurationVar(&m.window, "window", 2500*time.Millisecond, "each cell's measurement")
	flag.IntVar(&m.serverProcs, "server-procs", 1, "GOMAXPROCS of the server process, all on its one CPU (with 1, a P always busy with handlers polls the network only every 10ms)")
	replot := flag.String("replot", "", "draw -plot from the cells of an earlier -json file (with its -capacity) and exit")
	flag.StringVar(&m.profiles, "profiles", "", "write each server's CPU profile into this directory")
	flag.DurationVar(&m.wait, "wait", 20*time.Millisecond, "how long a call of the waiting method waits (mix, dependency)")
	flag.IntVar(&m.streamWorkers, "stream-workers", 0, "grpc.NumStreamWorkers of every server (0: a goroutine per stream, grpc-go's default)")
	flag.IntVar(&m.depSlots, "dep-slots", 4, "how many calls of the waiting method its dependency serves at once (dependency)")
	flag.StringVar(&m.base, "base", "", "this command built at another commit: subjects named X"+baseSuffix+" run their server from it (old code beside new)")
	flag.Parse()
	if *serveCfg != "" {
		if err := serve(*serveCfg); err != nil {
			fmt.Fprintln(os.Stderr, "overload server:", err)
			os.Exit(1)
		}
		return
	}
	if *replot != "" {
		var cells []*cell
		b, err := os.ReadFile(*replot)
		if err == nil {
			err = json.Unmarshal(b, &cells)
		}
		if err == nil {
			m.capacity = *capacity
			err = (&report{m: m, reps: *reps, cells: cells}).plot(*plotOut)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
		return
	}
	if runtime.NumCPU() < 2 {
		fmt.Fprintln(os.Stderr, "overload: needs 2 CPUs, one for the server and one for the load")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(400) // the load's own garbage must not make it late
	if err := pin(m.clientCPU); err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
	for _, f := range strings.Split(*shares, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "overload: -shares:", err)
			os.Exit(2)
		}
		m.shares = append(m.shares, v)
	}
	if len(m.shares) != levels {
		fmt.Fprintf(os.Stderr, "overload: -shares needs %d values\n", levels)
		os.Exit(2)
	}
	m.steps = *steps
	m.spin = calibrateSpin(*workD / time.Duration(*steps))
	start := time.Now()
	m.capacity = *capacity
	if m.capacity == 0 {
		c, err := m.measureCapacity()
		if err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
		m.capacity = c
	}
	r := &report{m: m, reps: *reps}
	if err := m.runSections(r, *sections, *loads, strings.Split(*subjects, ","), *reps); err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
	fmt.Printf("overload: server pinned to CPU %d (GOMAXPROCS %d), load from CPU %d; %s; %d CPUs; %s of CPU per call in %d steps; capacity %.0f calls/s; deadline %s; shares %s; %d tenants; warmup %s, window %s, reps %d; took %s\n\n",
		m.serverCPU, m.serverProcs, m.clientCPU, runtime.Version(), runtime.NumCPU(), *workD, m.steps, m.capacity, deadline, *shares, tenants, m.warmup, m.window, *reps, time.Since(start).Round(time.Second))
	r.print(os.Stdout)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(r.cells, "", " ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
	}
	if *plotOut != "" {
		if err := r.plot(*plotOut); err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
	}
}

func (m *measurer) runSections(r *report, sections, loads string, subjects []string, reps int) error {
	want := map[string]bool{}
	for _, s := range strings.Split(sections, ",") {
		want[strings.TrimSpace(s)] = true
	}
	var xs []float64
	for _, f := range strings.Split(loads, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return fmt.Errorf("-loads: %w", err)
		}
		xs = append(xs, x)
	}
	type point struct {
		scenario string
		x        float64
		streams  []stream
		subjects []string
	}
	var points []point
	if want["sweep"] {
		for _, x := range xs {
			points = append(points, point{"sweep", x, m.mixOf(x), subjects})
		}
	}
	if want["spike"] {
		// The mix at 0.8× and a Sheddable spike of 12× on top.
		ss := m.mixOf(0.8)
		for t := range tenants {
			ss = append(ss, stream{rate: 12 * m.capacity / tenants, class: 0, tenant: t})
		}
		points = append(points, point{"spike", 12.8, ss, subjects})
	}
	if want["tenant"] {
		// One Critical class; nine tenants at 0.9 of their share, tenant 0
		// at 10×.
		fair := m.capacity / tenants
		ss := []stream{{rate: 10 * fair, class: 2, tenant: 0}}
		for t := 1; t < tenants; t++ {
			ss = append(ss, stream{rate: 0.9 * fair, class: 2, tenant: t})
		}
		points = append(points, point{"tenant", 10 + 0.9*9/10, ss, subjects})
	}
	if want["mix"] {
		// Two methods, neither short of anything: half a capacity of the
		// computing one, and a capacity of one that waits (about 19 in
		// flight at 20ms), all Critical. A limit that read the waiting
		// method's latency as the server slowing down would shed both.
		var ss []stream
		for t := range tenants {
			ss = append(ss, stream{rate: 0.5 * m.capacity / tenants, class: 2, tenant: t},
				stream{rate: m.capacity / tenants, class: 2, tenant: t, wait: true})
		}
		points = append(points, point{"mix", 1.5, ss, subjects})
	}
	if want["dependency"] {
		// The waiting method's dependency serves depSlots calls at once
		// (200 calls/s at 4 and 20ms), offered twice that, beside half a
		// capacity of the computing method: the dependency is short, the
		// CPU is not.
		depCap := float64(m.depSlots) / m.wait.Seconds()
		var ss []stream
		for t := range tenants {
			ss = append(ss, stream{rate: 0.5 * m.capacity / tenants, class: 2, tenant: t},
				stream{rate: 2 * depCap / tenants, class: 2, tenant: t, wait: true})
		}
		points = append(points, point{"dependency", 0.5 + 2*depCap/m.capacity, ss, subjects})
	}
	if want["refusal"] {
		// Every call refused or answered without work, at 5× capacity.
		ss := []stream{{rate: 5 * m.capacity, class: 2, tenant: 0}}
		rs := []string{subjectAcceptNoop, subjectRefuseIcpt, subjectRefuseSigs, subjectRefuseDoor}
		if m.base != "" {
			rs = append(rs, subjectRefuseDoor+baseSuffix)
		}
		points = append(points, point{"refusal", 5, ss, rs})
	}
	for rep := range reps {
		for _, p := range points {
			n := len(p.subjects)
			for i := range n {
				s := p.subjects[(i+rep)%n] // alternate the order between reps
				c, err := m.run(s, p.scenario, p.x, p.streams)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "rep %d %s %.1f× %s: served %.3f, goodput %.2f\n", rep+1, p.scenario, p.x, s, float64(c.sum(c.OK))/float64(max(1, c.sum(c.Offered))), float64(c.sum(c.OK))/c.Window.Seconds()/m.capacity)
				r.cells = append(r.cells, c)
			}
		}
	}
	return nil
}

// measureCapacity runs the unprotected server closed-loop, 8 calls always
// in flight, and returns the most calls/s it completes in three tries: on
// a shared machine another process can only take CPU away.
func (m *measurer) measureCapacity() (float64, error) {
	best := 0.0
	for range 3 {
		c, err := m.closedLoop(subjectNone, 8, 500*time.Millisecond, time.Second)
		if err != nil {
			return 0, err
		}
		best = max(best, c)
	}
	return best, nil
}
