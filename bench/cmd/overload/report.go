package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/overload"
)

type report struct {
	m     *measurer
	reps  int
	cells []*cell
}

// group returns the cells of one point and subject, one per repetition.
func (r *report) group(scenario string, x float64, subject string) []*cell {
	var cs []*cell
	for _, c := range r.cells {
		if c.Scenario == scenario && c.X == x && c.Subject == subject {
			cs = append(cs, c)
		}
	}
	return cs
}

// stat is a median with its spread over the repetitions.
type stat struct{ med, lo, hi float64 }

func statOf(cs []*cell, f func(*cell) float64) stat {
	if len(cs) == 0 {
		return stat{}
	}
	v := make([]float64, len(cs))
	for i, c := range cs {
		v[i] = f(c)
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return stat{med, v[0], v[len(v)-1]}
}

func (s stat) pct() string {
	if s.lo == s.hi {
		return fmt.Sprintf("%.1f%%", 100*s.med)
	}
	return fmt.Sprintf("%.1f%% (%.1f–%.1f)", 100*s.med, 100*s.lo, 100*s.hi)
}

func (s stat) num(format string) string {
	if s.lo == s.hi {
		return fmt.Sprintf(format, s.med)
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", s.med, s.lo, s.hi)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r *report) goodput(c *cell) float64 {
	return float64(c.sum(c.OK)) / c.Window.Seconds() / r.m.capacity
}

// points lists the distinct loads of a scenario in order.
func (r *report) points(scenario string) (xs []float64, subjects []string) {
	for _, c := range r.cells {
		if c.Scenario != scenario {
			continue
		}
		if !slices.Contains(xs, c.X) {
			xs = append(xs, c.X)
		}
		if !slices.Contains(subjects, c.Subject) {
			subjects = append(subjects, c.Subject)
		}
	}
	slices.Sort(xs)
	return xs, subjects
}

// unloaded is the p99 of every call to the unprotected server at the
// lowest load of the sweep, the reference of the p99 targets.
func (r *report) unloaded() stat {
	xs, _ := r.points("sweep")
	if len(xs) == 0 {
		return stat{}
	}
	return statOf(r.group("sweep", xs[0], subjectNone), func(c *cell) float64 { return ms(c.All.Quantile(0.99)) })
}

func (r *report) print(w io.Writer) {
	un := r.unloaded()
	if xs, subjects := r.points("sweep"); len(xs) > 0 {
		fmt.Fprintf(w, "Sweep: the mix at each load. Served: answered OK within the deadline, of the calls offered. Unloaded p99 (every call, %s at %.1f×): %s ms.\n\n", subjectNone, xs[0], un.num("%.2f"))
		classHeader(w)
		for _, x := range xs {
			for _, s := range subjects {
				cs := r.group("sweep", x, s)
				r.row(w, fmt.Sprintf("%.1f×", x), s, cs, un)
			}
		}
		fmt.Fprintln(w)
	}
	if xs, subjects := r.points("spike"); len(xs) > 0 {
		fmt.Fprintln(w, "Spike: the mix at 0.8× plus SHEDDABLE at 12×.")
		fmt.Fprintln(w)
		classHeader(w)
		for _, s := range subjects {
			r.row(w, fmt.Sprintf("%.1f×", xs[0]), s, r.group("spike", xs[0], s), un)
		}
		fmt.Fprintln(w)
	}
	if xs, subjects := r.points("tenant"); len(xs) > 0 {
		fmt.Fprintln(w, "Tenants: CRITICAL only; tenant-0 asks 10× its fair share (capacity/10), nine others 0.9× theirs.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| subject | goodput | tenant-0 served | well-behaved served, worst | well-behaved served, median of nine | the nine: refused, late |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, s := range subjects {
			cs := r.group("tenant", xs[0], s)
			heavy := statOf(cs, func(c *cell) float64 { return frac(c.Served[0], c.Asked[0]) })
			worst := statOf(cs, func(c *cell) float64 {
				v := 1.0
				for t := 1; t < tenants; t++ {
					v = min(v, frac(c.Served[t], c.Asked[t]))
				}
				return v
			})
			median := statOf(cs, func(c *cell) float64 {
				var v []float64
				for t := 1; t < tenants; t++ {
					v = append(v, frac(c.Served[t], c.Asked[t]))
				}
				slices.Sort(v)
				return v[len(v)/2]
			})
			nine := func(f func(c *cell) [tenants]int64) stat {
				return statOf(cs, func(c *cell) float64 {
					var n, asked int64
					for t := 1; t < tenants; t++ {
						n += f(c)[t]
						asked += c.Asked[t]
					}
					return frac(n, asked)
				})
			}
			refused := nine(func(c *cell) [tenants]int64 { return c.TRefused })
			late := nine(func(c *cell) [tenants]int64 { return c.TTimeout })
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s, %s |\n", s, statOf(cs, r.goodput).num("%.2f"), heavy.pct(), worst.pct(), median.pct(), refused.pct(), late.pct())
		}
		fmt.Fprintln(w)
	}
	for _, sc := range []struct{ name, title string }{
		{"mix", "Mix: CRITICAL only; 0.5× of the computing method and 1× of a method that waits (no CPU), neither short of anything."},
		{"dependency", "Dependency: CRITICAL only; 0.5× of the computing method, and twice what the waiting method's dependency serves."},
	} {
		if xs, subjects := r.points(sc.name); len(xs) > 0 {
			r.printTwoMethods(w, sc.name, sc.title, xs[0], subjects)
		}
	}
	if xs, _ := r.points("sweep"); len(xs) > 0 && xs[0] < 1 && len(r.group("sweep", xs[0], subjectNone)) > 0 {
		fmt.Fprintf(w, "Overhead at %.1f× (no shedding), each subject ÷ %s within a repetition:\n\n", xs[0], subjectNone)
		fmt.Fprintln(w, "| subject | calls/s served ÷ none | p99 ÷ none |")
		fmt.Fprintln(w, "|---|---|---|")
		base := r.group("sweep", xs[0], subjectNone)
		_, subjects := r.points("sweep")
		for _, s := range subjects {
			if s == subjectNone {
				continue
			}
			cs := r.group("sweep", xs[0], s)
			n := min(len(cs), len(base))
			ratioT := make([]float64, n)
			ratioP := make([]float64, n)
			for i := range n {
				ratioT[i] = float64(cs[i].sum(cs[i].OK)) / float64(max(1, base[i].sum(base[i].OK)))
				ratioP[i] = float64(cs[i].All.Quantile(0.99)) / float64(max(1, base[i].All.Quantile(0.99)))
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", s, statOfValues(ratioT).num("%.3f"), statOfValues(ratioP).num("%.2f"))
		}
		fmt.Fprintln(w)
	}
	if xs, subjects := r.points("refusal"); len(xs) > 0 {
		fmt.Fprintf(w, "Refusal cost: server CPU per call offered at %.0f× capacity (calls/s %.0f).\n\n", xs[0], xs[0]*r.m.capacity)
		fmt.Fprintln(w, "| subject | server CPU µs per call | answered OK |")
		fmt.Fprintln(w, "|---|---|---|")
		for _, s := range subjects {
			cs := r.group("refusal", xs[0], s)
			fmt.Fprintf(w, "| %s | %s | %s |\n", s, statOf(cs, r.cpuPerCall).num("%.1f"),
				statOf(cs, func(c *cell) float64 { return frac(c.sum(c.OK), c.sum(c.Offered)) }).pct())
		}
		fmt.Fprintln(w)
	}
	r.printServers(w)
}

// classHeader heads the tables of served fractions by class.
func classHeader(w io.Writer) {
	fmt.Fprintln(w, "| load | subject | goodput | CRITICAL_PLUS | CRITICAL | SHEDDABLE_PLUS | SHEDDABLE | p50 CRITICAL_PLUS ms | p99 CRITICAL_PLUS ms | ÷ unloaded p99 | timed out | gen. lag p99 ms | server CPU |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
}

// cpuPerCall is the server process's CPU over the whole cell (warmup and
// drain included) per call scheduled in it.
func (r *report) cpuPerCall(c *cell) float64 {
	calls := float64(c.sum(c.Offered)) * float64(c.Window+r.m.warmup) / float64(c.Window)
	return float64(c.Server.CPU) / float64(time.Microsecond) / calls
}

func statOfValues(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	slices.Sort(v)
	return stat{v[len(v)/2], v[0], v[len(v)-1]}
}

func frac(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func (r *report) row(w io.Writer, load, s string, cs []*cell, un stat) {
	if len(cs) == 0 {
		return
	}
	var served []string
	for k := overload.CriticalPlus; ; k-- {
		served = append(served, statOf(cs, func(c *cell) float64 { return c.served(k) }).pct())
		if k == 0 {
			break
		}
	}
	p50 := statOf(cs, func(c *cell) float64 { return ms(c.Lat[overload.CriticalPlus].Quantile(0.5)) })
	p99 := statOf(cs, func(c *cell) float64 { return ms(c.Lat[overload.CriticalPlus].Quantile(0.99)) })
	ratio := statOf(cs, func(c *cell) float64 {
		if un.med == 0 {
			return 0 // no sweep in this run: no unloaded p99
		}
		return ms(c.Lat[overload.CriticalPlus].Quantile(0.99)) / un.med
	})
	tout := statOf(cs, func(c *cell) float64 { return frac(c.sum(c.Timeout), c.sum(c.Offered)) })
	lag := statOf(cs, func(c *cell) float64 { return ms(c.Lag.Quantile(0.99)) })
	cpu := statOf(cs, func(c *cell) float64 { return float64(c.Server.CPU) / float64(c.Wall) })
	fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", load, s, statOf(cs, r.goodput).num("%.2f"),
		strings.Join(served, " | "), p50.num("%.1f"), p99.num("%.1f"), ratio.num("%.2f"), tout.pct(), lag.num("%.1f"), cpu.pct())
}

// printServers shows what the servers reported of themselves: tollgate's
// limit and shed counts, failsafe-go's limit.
func (r *report) printServers(w io.Writer) {
	fmt.Fprintln(w, "Servers at the end of each cell (first repetition):")
	fmt.Fprintln(w)
	for _, c := range r.cells[:len(r.cells)/max(1, r.reps)] {
		if c.Server.InServer[1] > 0 {
			fmt.Fprintf(w, "- %s %.1f× %s: CRITICAL_PLUS in the server p50 %.1f ms p99 %.1f ms, in the handler p50 %.1f ms p99 %.1f ms\n", c.Scenario, c.X, c.Subject,
				c.Server.InServer[0], c.Server.InServer[1], c.Server.InHandler[0], c.Server.InHandler[1])
		}
		switch {
		case c.Server.Tollgate != nil:
			st := c.Server.Tollgate
			fmt.Fprintf(w, "- %s %.1f× %s: limit %.1f, shed %v, by reason and share %v\n", c.Scenario, c.X, c.Subject, st.Limit, st.Shed, st.Why)
		case c.Server.Failsafe != nil:
			fmt.Fprintf(w, "- %s %.1f× %s: limit %d, inflight %d, queued %d\n", c.Scenario, c.X, c.Subject, c.Server.Failsafe.Limit, c.Server.Failsafe.Inflight, c.Server.Failsafe.Queued)
		}
	}
}

func (r *report) plot(path string) error { return plotSweep(r, path) }

// printTwoMethods is the table of a scenario of two methods (mix,
// dependency): what each was served, and the limits at the end.
func (r *report) printTwoMethods(w io.Writer, scenario, title string, x float64, subjects []string) {
	fmt.Fprintln(w, title)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| subject | computing method served | waiting method served | calls/s served ÷ offered | waiting method p99 ms | limit at the end | the rule's limit |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, s := range subjects {
		cs := r.group(scenario, x, s)
		cpu := statOf(cs, func(c *cell) float64 {
			return frac(c.sum(c.OK)-c.WaitServed, c.sum(c.Offered)-c.WaitAsked)
		})
		wait := statOf(cs, func(c *cell) float64 { return frac(c.WaitServed, c.WaitAsked) })
		all := statOf(cs, func(c *cell) float64 { return frac(c.sum(c.OK), c.sum(c.Offered)) })
		p99 := statOf(cs, func(c *cell) float64 { return ms(c.WaitLat.Quantile(0.99)) })
		limit := statOf(cs, func(c *cell) float64 {
			switch {
			case c.Server.Tollgate != nil:
				return c.Server.Tollgate.Limit
			case c.Server.Failsafe != nil:
				return float64(c.Server.Failsafe.Limit)
			}
			return 0
		})
		rule := statOf(cs, func(c *cell) float64 {
			if c.Server.Tollgate != nil {
				return c.Server.Tollgate.RuleLimit
			}
			return 0
		})
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", s, cpu.pct(), wait.pct(), all.pct(), p99.num("%.1f"), limit.num("%.1f"), rule.num("%.1f"))
	}
	fmt.Fprintln(w)
}
