package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate/internal/redistest"
)

// configMap lays dir out as Kubernetes mounts a ConfigMap: the files in a
// hidden directory, a ..data symlink to it, and each file a symlink through
// ..data. Its update swaps ..data atomically for a new hidden directory, as
// the kubelet does.
type configMap struct {
	t   *testing.T
	dir string
	n   int
}

func (c *configMap) update(files map[string]string) {
	c.t.Helper()
	c.n++
	gen := "..gen" + strings.Repeat("x", c.n)
	if err := os.Mkdir(filepath.Join(c.dir, gen), 0o700); err != nil {
		c.t.Fatal(err)
	}
	for name, data := range files {
		writeFile(c.t, filepath.Join(c.dir, gen), name, data)
		link := filepath.Join(c.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
}

// A ConfigMap update under load reloads the server without a dropped call;
// an update with a bad file keeps the old configuration serving, and is
// logged with its file, line and descriptor and counted in the reloads
// metric. The metrics listener serves the loaded configuration.
func TestConfigMapSwapUnderLoad(t *testing.T) {
	dir := t.TempDir()
	cm := &configMap{t: t, dir: dir}
	domain := strings.ReplaceAll(redistest.KeyPrefix(t), ":", "_")
	cm.update(map[string]string{"shop.yaml": limitYAML(domain, 3)})
	cc, logs, _ := startCommand(t, nil, "-config", dir, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0")
	client := pb.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ask, admitted := tenantCalls(t, ctx, client, domain)
	if n := admitted("a", 5); n != 3 {
		t.Fatalf("before the update: %d of 5 admitted, want 3", n)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls, failures atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				calls.Add(1)
				if _, err := ask("busy"); err != nil {
					failures.Add(1)
				}
			}
		})
	}

	reloaded := logs.Count("reloaded")
	cm.update(map[string]string{"shop.yaml": limitYAML(domain, 7)})
	logs.Await(t, "reloaded", reloaded+1)
	if n := admitted("b", 9); n != 7 {
		t.Fatalf("after the swap: %d of 9 admitted, want 7", n)
	}
	rejected := logs.Count("reload rejected")
	cm.update(map[string]string{"shop.yaml": limitYAML(domain, 7), "bad.yaml": "domain: other\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n"})
	logs.Await(t, "reload rejected", rejected+1)
	if !strings.Contains(logs.String(), "bad.yaml:5: descriptor other.k: invalid rate limit unit") {
		t.Fatalf("the rejection does not name file, line and descriptor:\n%s", logs.String())
	}
	if n := admitted("c", 9); n != 7 {
		t.Fatalf("after a bad swap: %d of 9 admitted, want 7 (the configuration in force)", n)
	}
	close(stop)
	wg.Wait()
	if failures.Load() != 0 || calls.Load() < 10 {
		t.Fatalf("%d of %d calls failed during the swaps", failures.Load(), calls.Load())
	}

	metrics := regexp.MustCompile(`metrics on http://([^/]+)/metrics`).FindStringSubmatch(logs.String())
	if metrics == nil {
		t.Fatalf("no metrics address in the log:\n%s", logs.String())
	}
	body := get(t, "http://"+metrics[1]+"/metrics")
	for _, want := range []string{`tollgate_rls_config_reloads_total{otel_scope_name="github.com/tollgate/tollgate/cmd/tollgate-rls",otel_scope_schema_url="",otel_scope_version="",result="error"}`, `result="ok"`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	var dump []struct {
		Domain      string `json:"domain"`
		Descriptors []struct {
			Key    string   `json:"key"`
			Limits []string `json:"limits"`
		} `json:"descriptors"`
	}
	if err := json.Unmarshal([]byte(get(t, "http://"+metrics[1]+"/config")), &dump); err != nil {
		t.Fatal(err)
	}
	if len(dump) != 1 || dump[0].Domain != domain || len(dump[0].Descriptors) != 1 || strings.Join(dump[0].Descriptors[0].Limits, ";") != "fixed_window 7/24h0m0s" {
		t.Fatalf("config dump = %+v", dump)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
