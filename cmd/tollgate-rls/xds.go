package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate/tollgate/rls"
)

// rateLimitConfigType is the xDS resource type of envoyproxy/ratelimit's
// configuration.
const rateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// xdsSettings say where the configuration comes from over xDS (state of
// the world, aggregated) and how to reach it: envoyproxy/ratelimit's
// CONFIG_GRPC_XDS_* and XDS_CLIENT_* variables.
type xdsSettings struct {
	url      string
	node     *corev3.Node
	headers  map[string]string
	tls      *tls.Config // nil: plaintext
	maxMsg   int
	backoff  backoff
	certsErr error // the TLS files could not be read: reported at start
}

// xdsOf reads the xDS settings of env.
func xdsOf(env envSettings) (*xdsSettings, error) {
	x := &xdsSettings{
		url:     env.XDSServerURL,
		headers: env.XDSHeaders,
		maxMsg:  env.XDSMaxMsgSize,
		backoff: backoff{initial: env.XDSBackoffInitial, max: env.XDSBackoffMax, random: env.XDSBackoffRandom, jitter: env.XDSBackoffJitter},
		node:    &corev3.Node{Id: env.XDSNodeID, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{}}},
	}
	for _, kv := range strings.Split(env.XDSNodeMetadata, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			x.node.Metadata.Fields[k] = structpb.NewStringValue(v)
		}
	}
	if x.backoff.initial <= 0 || x.backoff.max < x.backoff.initial {
		return nil, fmt.Errorf("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=%s, XDS_CLIENT_BACKOFF_MAX_INTERVAL=%s: want 0 < initial <= max", x.backoff.initial, x.backoff.max)
	}
	if env.XDSUseTLS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: env.XDSServerSAN}
		if tc.ServerName == "" {
			// The server's certificate must name the URL's host, as
			// envoyproxy/ratelimit checks it.
			if host, _, err := net.SplitHostPort(x.url); err == nil {
				tc.ServerName = host
			}
		}
		if env.XDSClientCert != "" || env.XDSClientKey != "" {
			cert, err := tls.LoadX509KeyPair(env.XDSClientCert, env.XDSClientKey)
			if err != nil {
				return nil, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and _KEY: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		if env.XDSServerCA != "" {
			pool, err := certPool(env.XDSServerCA)
			if err != nil {
				return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
			}
			tc.RootCAs = pool
		}
		x.tls = tc
	}
	return x, nil
}

// backoff is the wait before reconnecting to the xDS server: initial,
// doubled after each failed attempt up to max, each wait spread by ±random
// of itself when jitter is on.
type backoff struct {
	initial, max time.Duration
	random       float64
	jitter       bool
}

// wait returns the wait before attempt n (0 for the first).
func (b backoff) wait(n int) time.Duration {
	d := b.initial
	for range min(n, 32) {
		if d *= 2; d >= b.max {
			d = b.max
			break
		}
	}
	if b.jitter && b.random > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * b.random * float64(d))
	}
	return max(d, time.Millisecond)
}

// repeatedNackDelay is how long a rejected snapshot sent again waits for
// its NACK.
const repeatedNackDelay = 100 * time.Millisecond

// xdsClient keeps the server's configuration equal to the xDS server's
// RateLimitConfig resources: each response is compiled with the YAML
// path's checks (rls.ParseRateLimitConfigs) and applied and ACKed, or
// NACKed with the error while the last good configuration keeps serving.
type xdsClient struct {
	x      *xdsSettings
	apply  func(*rls.Config)
	reject func(error)
	logger *log.Logger
}

// run connects and follows the xDS server until ctx is done, reconnecting
// with backoff after every failure.
func (c *xdsClient) run(ctx context.Context) {
	ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.x.headers))
	creds := insecure.NewCredentials()
	if c.x.tls != nil {
		creds = credentials.NewTLS(c.x.tls)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if c.x.maxMsg > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.x.maxMsg)))
	}
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			d := c.x.backoff.wait(attempt - 1)
			c.logger.Printf("xDS: reconnecting to %s in %s", c.x.url, d.Round(time.Millisecond))
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		if c.follow(ctx, opts) {
			attempt = 0 // the connection worked: the next failure starts the backoff afresh
		}
	}
}

// follow opens one stream and handles its responses until it fails. It
// reports whether a response arrived.
func (c *xdsClient) follow(ctx context.Context, opts []grpc.DialOption) (answered bool) {
	conn, err := grpc.NewClient(c.x.url, opts...)
	if err != nil {
		c.logger.Printf("xDS: %s: %v", c.x.url, err)
		return false
	}
	defer conn.Close()
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ads := sotw.NewADSClient(streamCtx, c.x.node, rateLimitConfigType)
	if err := ads.InitConnect(conn); err != nil {
		if ctx.Err() == nil {
			c.logger.Printf("xDS: connecting to %s: %v", c.x.url, err)
		}
		return false
	}
	c.logger.Printf("xDS: connected to %s as node %q", c.x.url, c.x.node.GetId())
	var rejected []*anypb.Any // the last resources refused, and why
	var rejectedErr error
	for {
		resp, err := ads.Fetch()
		if err != nil {
			if ctx.Err() == nil {
				c.logger.Printf("xDS: the stream from %s ended: %v", c.x.url, err)
			}
			return answered
		}
		answered = true
		if rejectedErr != nil && sameResources(resp.Resources, rejected) {
			// A management server may send a rejected snapshot again as
			// soon as it is NACKed, until the next version (go-control-plane
			// does): the answer is the same, and waiting a moment before it
			// keeps the storm to a few NACKs a second. A new version is
			// sent in answer to the NACK, so it waits at most as long.
			select {
			case <-ctx.Done():
				return answered
			case <-time.After(repeatedNackDelay):
			}
			if err := ads.Nack(rejectedErr.Error()); err != nil {
				return answered
			}
			continue
		}
		conf, err := parseResources(resp.Resources)
		if err != nil {
			rejected, rejectedErr = resp.Resources, err
			c.reject(err)
			if err := ads.Nack(err.Error()); err != nil {
				return answered
			}
			continue
		}
		rejected, rejectedErr = nil, nil
		c.apply(conf)
		if err := ads.Ack(); err != nil {
			return answered
		}
	}
}

// parseResources compiles a response's RateLimitConfig resources.
func parseResources(resources []*anypb.Any) (*rls.Config, error) {
	confs := make([]*rlsconf.RateLimitConfig, len(resources))
	for i, r := range resources {
		confs[i] = &rlsconf.RateLimitConfig{}
		if err := r.UnmarshalTo(confs[i]); err != nil {
			return nil, fmt.Errorf("resource %d (%s): %w", i, r.GetTypeUrl(), err)
		}
	}
	return rls.ParseRateLimitConfigs(confs...)
}

// sameResources reports whether a and b hold the same resources, byte for
// byte.
func sameResources(a, b []*anypb.Any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].GetTypeUrl() != b[i].GetTypeUrl() || !bytes.Equal(a[i].GetValue(), b[i].GetValue()) {
			return false
		}
	}
	return true
}
