package exampleserver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/examples/server/exampleserver"
	"github.com/tollgate/tollgate/examples/server/exampleserver/exampleservertest"
)

// scrape returns the text the server's metrics endpoint serves.
func scrape(t *testing.T, s *exampleservertest.Server) string {
	t.Helper()
	m := regexp.MustCompile(`metrics on (http://\S+)`).FindStringSubmatch(s.Log.String())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", s.Log.String())
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", m[1], resp.Status, err)
	}
	return string(body)
}

// sample finds the value of the sample of metric whose labels include every
// label in want (each written as name="value").
func sample(exposition, metric string, want ...string) (string, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, metric+"{"), "} ")
		if !ok || !strings.HasPrefix(line, metric+"{") {
			continue
		}
		found := true
		for _, w := range want {
			found = found && strings.Contains(","+labels+",", ","+w+",")
		}
		if found {
			return value, true
		}
	}
	return "", false
}

// TestMetricsForPrometheus runs the server with -metrics-addr, makes two
// admitted calls and one denied, and finds them in the Prometheus scrape,
// with the store's latency histogram.
func TestMetricsForPrometheus(t *testing.T) {
	s := start(t, parse(t, noEnv, "-rate", "2", "-period", "1h", "-metrics-addr", "127.0.0.1:0"))
	c := echo.NewClient(dial(t, s.Addr))
	for i := range 3 {
		_, err := say(t.Context(), c, "metrics")
		if want := map[bool]codes.Code{true: codes.OK, false: codes.ResourceExhausted}[i < 2]; status.Code(err) != want {
			t.Fatalf("call %d: %v, want %v", i, err, want)
		}
	}
	text := scrape(t, s)
	rule := `tollgate_rule="` + exampleserver.RuleName + `"`
	for outcome, want := range map[string]string{"allowed": "2", "denied": "1"} {
		got, ok := sample(text, "tollgate_decisions_total", rule, `tollgate_outcome="`+outcome+`"`)
		if !ok || got != want {
			t.Errorf("tollgate_decisions_total %s: %q (found %v), want %s\n%s", outcome, got, ok, want, text)
		}
	}
	if got, ok := sample(text, "tollgate_store_duration_seconds_count", rule, `tollgate_store_result="ok"`); !ok || got != "3" {
		t.Errorf("tollgate_store_duration_seconds_count: %q (found %v), want 3\n%s", got, ok, text)
	}
	if !strings.Contains(text, "tollgate_store_duration_seconds_bucket{") {
		t.Errorf("no store latency buckets:\n%s", text)
	}
}

// TestGrafanaDashboard checks docs/grafana/tollgate.json: it parses, and
// every tollgate_ name its queries use is a metric or label the exporter
// actually emits, as scraped from a running server.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/grafana/tollgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}

	s := start(t, parse(t, noEnv, "-rate", "1", "-period", "1h", "-metrics-addr", "127.0.0.1:0"))
	c := echo.NewClient(dial(t, s.Addr))
	for range 2 { // one admitted, one denied
		say(t.Context(), c, "dashboard")
	}
	text := scrape(t, s)
	emitted := map[string]bool{}
	name := regexp.MustCompile(`tollgate_\w+`)
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, n := range name.FindAllString(line, -1) {
			emitted[n] = true // a metric (with its _bucket, _sum, _count) or a label
		}
	}

	var queries []string
	for _, v := range dashboard.Templating.List {
		queries = append(queries, v.Definition)
	}
	for _, p := range dashboard.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			queries = append(queries, target.Expr)
		}
	}
	used := map[string]bool{}
	for _, q := range queries {
		for _, n := range name.FindAllString(q, -1) {
			used[n] = true
			if !emitted[n] {
				t.Errorf("query %q names %s, which the exporter does not emit", q, n)
			}
		}
	}
	for _, n := range []string{"tollgate_decisions_total", "tollgate_store_duration_seconds_bucket", "tollgate_rule", "tollgate_outcome"} {
		if !used[n] {
			t.Errorf("the dashboard does not use %s", n)
		}
	}
}
