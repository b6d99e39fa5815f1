package serving

import (
	"bytes"
	"context"
	"crypto/tls"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// reloads returns telemetry.MetricTLSReloads by result.
func reloads(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricTLSReloads {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				res, _ := dp.Attributes.Value("result")
				out[res.AsString()] += dp.Value
			}
		}
	}
	return out
}

// A bad rotation keeps the last good certificate serving, and is logged
// and counted once; a good one that follows is served, logged and counted.
// The files are looked at once a second at most: the test moves a synctest
// bubble's clock past that instead of waiting for it.
func TestTLSRotationIsLoggedAndCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		ca := grpctest.NewCA(t, "rotation CA")
		certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		write := func(name string, data []byte) {
			t.Helper()
			if err := os.WriteFile(name, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		c1, k1 := ca.Issue(1, false)
		write(certFile, c1)
		write(keyFile, k1)
		var logs bytes.Buffer
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		files := TLSFiles{Cert: certFile, Key: keyFile}
		tc, err := files.Config(ReloadReporter(log.New(&logs, "", 0), mp, "rls"))
		if err != nil {
			t.Fatal(err)
		}
		serial := func() int64 {
			t.Helper()
			c, err := tc.GetConfigForClient(&tls.ClientHelloInfo{})
			if err != nil {
				t.Fatal(err)
			}
			leaf := c.Certificates[0].Leaf // parsed by tls.LoadX509KeyPair
			if leaf == nil {
				t.Fatal("no parsed leaf")
			}
			return leaf.SerialNumber.Int64()
		}
		if serial() != 1 {
			t.Fatal("not serving the first certificate")
		}
		write(keyFile, []byte("not a key")) // a bad rotation
		time.Sleep(recheck + 50*time.Millisecond)
		serial()
		time.Sleep(recheck + 50*time.Millisecond)
		if got := serial(); got != 1 {
			t.Fatalf("after a bad rotation: serving %d, want the last good certificate 1", got)
		}
		if n := strings.Count(logs.String(), "refused"); n != 1 || !strings.Contains(logs.String(), "rls listener") {
			t.Fatalf("log = %q, want one refusal naming the listener", logs.String())
		}
		c2, k2 := ca.Issue(2, false)
		write(certFile, c2)
		write(keyFile, k2)
		time.Sleep(recheck + 50*time.Millisecond)
		if got := serial(); got != 2 {
			t.Fatalf("after a good rotation: serving %d, want 2", got)
		}
		if got := reloads(t, reader); got["error"] != 1 || got["ok"] != 1 {
			t.Fatalf("%s = %v, want one error and one ok", telemetry.MetricTLSReloads, got)
		}
		for files, want := range map[TLSFiles]string{{}: "plaintext", {Cert: "c", Key: "k"}: "TLS", {Cert: "c", Key: "k", ClientCA: "ca"}: "mutual TLS"} {
			if got := files.Mode(); got != want {
				t.Errorf("%+v.Mode() = %q, want %q", files, got, want)
			}
		}
	})
}

// With ClientSAN, a client whose certificate the CA signed but which does
// not name the SAN is refused during the handshake; one that names it is
// served.
func TestClientSAN(t *testing.T) {
	dir := t.TempDir()
	ca := grpctest.NewCA(t, "SAN CA")
	cert, key := ca.Issue(1, false)
	files := TLSFiles{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), ClientCA: filepath.Join(dir, "ca.crt"), ClientSAN: "envoy-gateway"}
	for name, data := range map[string][]byte{files.Cert: cert, files.Key: key, files.ClientCA: ca.PEM} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf, err := files.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_, _ = c.Write([]byte("x"))
			c.Close()
		}
	}()
	dial := func(client []tls.Certificate) error {
		c, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: ca.Pool(), Certificates: client, NextProtos: []string{"h2"}})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Read(make([]byte, 1)) // TLS 1.3: the client learns of a refusal on its first read
		return err
	}
	named, namedKey := ca.IssueBoth(2, "envoy-gateway")
	pair, err := tls.X509KeyPair(named, namedKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := dial([]tls.Certificate{pair}); err != nil {
		t.Fatalf("a client naming the SAN: %v", err)
	}
	if err := dial(ca.ClientCert(3)); err == nil {
		t.Fatal("a client not naming the SAN was served")
	}
}
