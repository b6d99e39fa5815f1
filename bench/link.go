package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Link is a TCP link between two regions through Shopify's toxiproxy run
// in process: every byte waits a latency (± jitter) each way, and Cut
// drops every byte until Restore, as a link whose packets are lost.
type Link struct {
	proxy *toxiproxy.Proxy
}

// NewLink proxies a loopback port to upstream with latency ± jitter one
// way, in each direction.
func NewLink(upstream string, latency, jitter time.Duration) (*Link, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "link-"+upstream, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("link to %s: %w", upstream, err)
	}
	l := &Link{proxy: p}
	for _, stream := range []string{"upstream", "downstream"} {
		if err := l.toxic(fmt.Sprintf(`{"name":"latency-%s","type":"latency","stream":%q,"toxicity":1,"attributes":{"latency":%d,"jitter":%d}}`,
			stream, stream, latency.Milliseconds(), jitter.Milliseconds())); err != nil {
			p.Stop()
			return nil, err
		}
	}
	return l, nil
}

// Addr is the address to dial instead of the upstream.
func (l *Link) Addr() string { return l.proxy.Listen }

// Cut drops every byte either way from now on, without closing the
// connections: calls over it wait until their deadline.
func (l *Link) Cut() error {
	for _, stream := range []string{"upstream", "downstream"} {
		if err := l.toxic(fmt.Sprintf(`{"name":"cut-%s","type":"timeout","stream":%q,"toxicity":1,"attributes":{"timeout":0}}`, stream, stream)); err != nil {
			return err
		}
	}
	return nil
}

// Restore ends a Cut: bytes flow again (with the latency).
func (l *Link) Restore() error {
	for _, stream := range []string{"upstream", "downstream"} {
		if err := l.proxy.Toxics.RemoveToxic(context.Background(), "cut-"+stream); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the proxy and closes its connections.
func (l *Link) Close() { l.proxy.Stop() }

func (l *Link) toxic(spec string) error {
	if _, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		return fmt.Errorf("link %s: toxic %s: %w", l.proxy.Upstream, spec, err)
	}
	return nil
}
