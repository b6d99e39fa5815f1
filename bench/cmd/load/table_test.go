package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestTable checks the table code on made-up rows: one header and one line
// per row, every column present, in both forms, and medians.
func TestTable(t *testing.T) {
	rows := []row{
		{section: "store", keys: "random", callers: 64, subject: "redis_rate", perSec: 33_000, p50: 1500 * time.Microsecond, p99: 4700 * time.Microsecond, usPerScript: 12.5, scriptsPerOp: 1},
		{section: "store", keys: "random", callers: 64, subject: "tollgate gcra", perSec: 70_000, p50: 700 * time.Microsecond, p99: 2 * time.Millisecond, ratio: 2.12, ratioRef: "redis_rate", usPerScript: 11.9, scriptsPerOp: 1},
		{section: "memory", subject: "tollgate gcra", bytesPerID: 98, keyBytes: 88},
	}
	var plain, md bytes.Buffer
	if err := writeTable(&plain, rows, false); err != nil {
		t.Fatal(err)
	}
	if err := writeTable(&md, rows, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(plain.String(), "\n"), "\n")
	if len(lines) != 1+len(rows) {
		t.Fatalf("%d lines for %d rows:\n%s", len(lines), len(rows), plain.String())
	}
	for _, want := range []string{"70.0k", "2.12× redis_rate", "700µs", "2.00ms", "11.90", "98", "88"} {
		if !strings.Contains(plain.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, plain.String())
		}
	}
	mdLines := strings.Split(strings.TrimRight(md.String(), "\n"), "\n")
	if len(mdLines) != 2+len(rows) || strings.Count(mdLines[0], "|") != len(header)+1 || !strings.HasPrefix(mdLines[1], "| --- ") {
		t.Fatalf("Markdown table malformed:\n%s", md.String())
	}
	for _, l := range mdLines[2:] {
		if strings.Count(l, "|") != len(header)+1 {
			t.Errorf("Markdown row with %d cells, want %d: %s", strings.Count(l, "|")-1, len(header), l)
		}
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median(3,1,2) = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median(4,1,3,2) = %v", m)
	}
}
