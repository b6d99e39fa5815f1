package rls_test

import (
	"context"
	"fmt"
	"log"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

// A configuration file in envoyproxy/ratelimit's format, one limit using
// the tollgate extension, and two requests: the second asks for two
// descriptors and is refused by one, so the other is not debited.
func ExampleNewServer() {
	cfg, err := rls.ParseConfig(rls.File{Name: "shop.yaml", Data: []byte(`
domain: shop
descriptors:
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: path
    value: /checkout*
    rate_limit:
      unit: second
      requests_per_unit: 1
      tollgate: {algorithm: gcra}
`)})
	if err != nil {
		log.Fatal(err)
	}
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	srv, err := rls.NewServer(st, rls.Options{Config: cfg})
	if err != nil {
		log.Fatal(err)
	}
	entry := func(k, v string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	for range 2 {
		resp, err := srv.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
			Domain:      "shop",
			Descriptors: []*rlv3.RateLimitDescriptor{entry("tenant", "acme"), entry("path", "/checkout/cart")},
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(resp.OverallCode, resp.Statuses[0].Code, resp.Statuses[0].LimitRemaining, resp.Statuses[1].Code)
	}
	// Output:
	// OK OK 99 OK
	// OVER_LIMIT OK 99 OVER_LIMIT
}

// A configuration mistake names the file, the line and the descriptor.
func ExampleParseConfig() {
	_, err := rls.ParseConfig(rls.File{Name: "shop.yaml", Data: []byte(`
domain: shop
descriptors:
  - key: tenant
    rate_limit:
      unit: minutes
      requests_per_unit: 100
`)})
	fmt.Println(err)
	// Output:
	// shop.yaml:6: descriptor shop.tenant: invalid rate limit unit "minutes" (want second, minute, hour, day, week, month or year)
}

// Envoy Gateway pushes the configuration as RateLimitConfig resources over
// xDS; a mistake names the resource and the descriptor, and what loads but
// refuses everything is a warning.
func ExampleParseRateLimitConfigs() {
	conf, err := rls.ParseRateLimitConfigs(&rlsconf.RateLimitConfig{
		Name: "default/eg/api", Domain: "api",
		Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 10}},
			{Key: "ip", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND}},
		},
	})
	fmt.Println(conf.Domains(), err, conf.Warnings())
	_, err = rls.ParseRateLimitConfigs(&rlsconf.RateLimitConfig{
		Name: "default/eg/bad", Domain: "api",
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 10}}},
	})
	fmt.Println(err)
	// Output:
	// [api] <nil> [default/eg/api: descriptor api.ip: requests_per_unit is 0 or unset: every request is refused]
	// default/eg/bad: descriptor api.user: invalid rate limit unit "" (want second, minute, hour, day, week, month or year)
}
