package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one line of the result table. Zero figures print as "-".
type row struct {
	section string // store, grpc, memory
	keys    string // random, hot
	callers int
	subject string
	// perSec is decisions (store) or calls (grpc) per second; p50 and p99
	// the latency of one.
	perSec   float64
	p50, p99 time.Duration
	// ratio is perSec over the reference's in the same repetitions
	// (redis_rate for store, no limiter for grpc); ratioRef names it.
	ratio    float64
	ratioRef string
	// ratioLo and ratioHi are the lowest and highest of the repetitions'
	// ratios (zero with one repetition): the spread of ratio.
	ratioLo, ratioHi float64
	// usPerScript is Redis microseconds per script call; scriptsPerOp
	// script calls per decision or call.
	usPerScript, scriptsPerOp float64
	// redisCPU and clientCPU are CPU microseconds per operation of the
	// Redis server and of the measuring process; cpuRatio is redisCPU over
	// the reference's in the same repetitions (0 when there is none).
	redisCPU, clientCPU float64
	cpuRatio            float64
	// bytesPerID is used_memory growth per identity; keyBytes the MEMORY
	// USAGE of one identity's state.
	bytesPerID, keyBytes float64
	// perRep is perSec, and cpuPerRep redisCPU, of each repetition, in
	// order (not printed): for ratios between rows.
	perRep, cpuPerRep []float64
}

// header names the table's columns.
var header = []string{"section", "keys", "callers", "subject", "per s", "p50", "p99", "ratio", "Redis µs/script", "scripts/op", "Redis CPU µs/op", "client CPU µs/op", "B/identity", "MEMORY USAGE"}

// cells formats r as the table's columns.
func (r row) cells() []string {
	ratio := "-"
	if r.ratio > 0 {
		ratio = fmt.Sprintf("%.2f× %s", r.ratio, r.ratioRef)
		if r.ratioHi > r.ratioLo {
			ratio = fmt.Sprintf("%.2f× %s (%.2f–%.2f)", r.ratio, r.ratioRef, r.ratioLo, r.ratioHi)
		}
	}
	return []string{r.section, dash(r.keys), count(r.callers), r.subject, rate(r.perSec),
		latency(r.p50), latency(r.p99), ratio,
		decimal(r.usPerScript, 2), decimal(r.scriptsPerOp, 3),
		redisCPU(r.redisCPU, r.cpuRatio), decimal(r.clientCPU, 1),
		decimal(r.bytesPerID, 0), decimal(r.keyBytes, 0)}
}

// writeTable prints rows as one table: aligned columns, or a Markdown
// table when markdown is set.
func writeTable(w io.Writer, rows []row, markdown bool) error {
	if markdown {
		var b strings.Builder
		b.WriteString("| " + strings.Join(header, " | ") + " |\n")
		b.WriteString(strings.Repeat("| --- ", len(header)) + "|\n")
		for _, r := range rows {
			b.WriteString("| " + strings.Join(r.cells(), " | ") + " |\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t")+"\t")
	}
	return tw.Flush()
}

// redisCPU formats Redis CPU per operation, with its ratio to the
// reference's when there is one.
func redisCPU(us, ratio float64) string {
	if ratio > 0 && us > 0 {
		return fmt.Sprintf("%.1f (%.2f×)", us, ratio)
	}
	return decimal(us, 1)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func count(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func rate(x float64) string {
	switch {
	case x == 0:
		return "-"
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

func latency(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

func decimal(x float64, places int) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f", places, x)
}

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
