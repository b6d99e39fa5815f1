package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
)

// writeAtomically replaces name's content in one rename, as a secret
// rotation does.
func writeAtomically(t *testing.T, name string, data []byte) {
	t.Helper()
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

// Mutual TLS: a client with a certificate the CA signed is served; one
// without a certificate, or with one another CA signed, is refused; a
// rotated server certificate is served to new connections without a
// restart.
func TestMutualTLS(t *testing.T) {
	dir, conf := t.TempDir(), t.TempDir()
	writeFile(t, conf, "shop.yaml", limitYAML("shop", 100))
	ca, stranger := grpctest.NewCA(t, "tollgate test CA"), grpctest.NewCA(t, "another CA")
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	c1, k1 := ca.Issue(101, false)
	writeAtomically(t, certFile, c1)
	writeAtomically(t, keyFile, k1)
	writeAtomically(t, caFile, ca.PEM)

	cfg, err := parseFlags([]string{"-config", conf, "-addr", "127.0.0.1:0", "-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", caFile},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, lis, make(chan os.Signal, 1), &grpctest.Log{}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	roots := ca.Pool()
	// call dials a new connection with clientCert (none when nil) and
	// returns the serial of the certificate the server presented.
	call := func(clientCert []tls.Certificate) (int64, error) {
		creds := credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: clientCert, MinVersion: tls.VersionTLS12})
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			return 0, err
		}
		defer cc.Close()
		var p peer.Peer
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "a"}}},
		}}, grpc.Peer(&p))
		if err != nil {
			return 0, err
		}
		return p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber.Int64(), nil
	}
	if serial, err := call(ca.ClientCert(201)); err != nil || serial != 101 {
		t.Fatalf("client signed by the CA: serial %d, %v; want served by certificate 101", serial, err)
	}
	if _, err := call(nil); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if _, err := call(stranger.ClientCert(301)); err == nil {
		t.Fatal("a client signed by another CA was served")
	}

	c2, k2 := ca.Issue(102, false)
	writeAtomically(t, keyFile, k2)
	writeAtomically(t, certFile, c2)
	redistest.Eventually(t, 5*time.Second, func() error {
		if serial, err := call(ca.ClientCert(202)); err != nil || serial != 102 {
			return fmt.Errorf("after rotating the certificate: serial %d, %v; want 102 without a restart", serial, err)
		}
		return nil
	})
}
