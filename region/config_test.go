package region

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/store"
)

// refusingHome fails the test when anything reaches it.
type refusingHome struct{ t *testing.T }

func (h refusingHome) Share(context.Context, []tollgate.Share) ([]tollgate.ShareGrant, error) {
	h.t.Error("a report reached the home")
	return nil, errors.New("refused")
}

func (h refusingHome) Look(context.Context, string, int64, time.Duration) (tollgate.ShareGrant, error) {
	h.t.Error("a look reached the home")
	return tollgate.ShareGrant{}, errors.New("refused")
}

// TestNilPartsAreRefusedAtStart gives New and NewRedisHome nil parts,
// typed (a nil pointer in an interface) and not: each is an error wrapping
// ErrInvalidConfig, never a crash at the first report.
func TestNilPartsAreRefusedAtStart(t *testing.T) {
	c := Config{Region: "eu", Regions: []string{"eu", "us"}, Limits: []tollgate.Limit{tollgate.PerSecond(600)}}
	var nilMemory *store.Memory
	var nilRedisHome *redisHome
	var nilMemoryHome *memoryHome
	for name, parts := range map[string]struct {
		local tollgate.Store
		home  Home
	}{
		"nil store":          {nil, NewMemoryHome(nil)},
		"typed nil store":    {nilMemory, NewMemoryHome(nil)},
		"nil home":           {newMemory(t), nil},
		"typed nil home":     {newMemory(t), nilRedisHome},
		"typed nil mem home": {newMemory(t), nilMemoryHome},
	} {
		r, err := New(parts.local, parts.home, c)
		if err == nil {
			_ = r.Close(context.Background())
			t.Errorf("%s: New accepted it", name)
		} else if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want an error wrapping ErrInvalidConfig", name, err)
		}
	}
	var nilClient *redis.Client
	var nilCluster *redis.ClusterClient
	for name, c := range map[string]redis.UniversalClient{"nil client": nil, "typed nil client": nilClient, "typed nil cluster": nilCluster} {
		if h, err := NewRedisHome(c, ""); err == nil || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: NewRedisHome answered %v, %v; want an error wrapping ErrInvalidConfig", name, h, err)
		}
	}
	if h, err := NewRedisHome(redistest.Single(t).Client(t), "a{b"); err == nil || !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a prefix with a brace: NewRedisHome answered %v, %v; want an error wrapping ErrInvalidConfig", h, err)
	}
}

// TestBadConfigIsRefusedAtStart checks that each configuration mistake is
// an error from New naming it, and that nothing reaches the home.
func TestBadConfigIsRefusedAtStart(t *testing.T) {
	three := []string{"us", "eu", "ap"}
	good := func() Config {
		return Config{Region: "eu", Regions: three, Limits: []tollgate.Limit{tollgate.PerSecond(600)}}
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"empty name", func(c *Config) { c.Region = "" }, "a region name is empty"},
		{"empty name in the list", func(c *Config) { c.Regions = []string{"us", "", "eu"} }, "a region name is empty"},
		{"too long", func(c *Config) { c.Region = strings.Repeat("x", maxNameLen+1); c.Regions = append(three, c.Region) }, "more than 64"},
		{"bad byte", func(c *Config) { c.Region = "eu west"; c.Regions = append(three, c.Region) }, "byte 0x20"},
		{"duplicated", func(c *Config) { c.Regions = []string{"us", "eu", "us"} }, `"us" is named twice`},
		{"not listed", func(c *Config) { c.Regions = []string{"us", "ap"} }, "do not name this region"},
		{"limit below the regions", func(c *Config) { c.Limits = []tollgate.Limit{tollgate.PerSecond(2)} }, "below the number of regions 3"},
		{"window below the regions", func(c *Config) { c.Limits = []tollgate.Limit{tollgate.Monthly(2)} }, "below the number of regions 3"},
		{"lease shorter than the rebalance", func(c *Config) { c.Rebalance, c.Lease = time.Second, 500*time.Millisecond }, "shorter than the rebalance interval"},
		{"lease within the skew", func(c *Config) { c.Rebalance, c.Lease = time.Second, 1100*time.Millisecond }, "plus the clock skew"},
		{"rebalance too short", func(c *Config) { c.Rebalance = time.Millisecond }, "at least 10ms"},
		{"negative skew", func(c *Config) { c.ClockSkew = -time.Second }, "ClockSkew"},
		{"floor too large", func(c *Config) { c.Floor = 0.5 }, "Floor 0.5"},
		{"no limits", func(c *Config) { c.Limits = nil }, "Limits: none"},
		{"sliding window", func(c *Config) {
			c.Limits = []tollgate.Limit{{Algorithm: tollgate.SlidingWindow, Rate: 600, Period: time.Second}}
		}, "sliding window is not shared"},
		{"invalid limit", func(c *Config) { c.Limits = []tollgate.Limit{{Rate: 0, Period: time.Second}} }, "rate must be > 0"},
		{"burstless floor", func(c *Config) {
			c.Limits = []tollgate.Limit{{Rate: 6000, Period: time.Second, Burst: 10}}
		}, "burst of"},
		{"window shorter than two intervals", func(c *Config) {
			c.Limits = []tollgate.Limit{{Algorithm: tollgate.FixedWindow, Rate: 600, Period: time.Second}}
		}, "shorter than two rebalance intervals"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := good()
			c.edit(&cfg)
			r, err := New(newMemory(t), refusingHome{t}, cfg)
			if err == nil {
				_ = r.Close(context.Background())
				t.Fatal("New accepted it")
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want one wrapping ErrInvalidConfig that says %q", err, c.want)
			}
		})
	}
}

// TestRequestsOutsideTheLimitsAreInvalid checks that a request under a
// limit the region does not share, or one its store would refuse, is an
// error wrapping tollgate.ErrInvalidRequest, and reaches neither store.
func TestRequestsOutsideTheLimitsAreInvalid(t *testing.T) {
	r, err := New(newMemory(t), refusingHome{t}, Config{Region: "eu", Regions: []string{"eu", "us"}, Limits: []tollgate.Limit{tollgate.PerSecond(600)}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	for _, req := range []tollgate.Request{
		{Key: "k", Limit: tollgate.PerSecond(601)},
		{Key: "k", Limit: tollgate.PerSecond(600), Cost: 601},
		{Key: "k", Limit: tollgate.PerSecond(600), RequestID: "has space"},
	} {
		if _, err := r.Allow(context.Background(), req); !errors.Is(err, tollgate.ErrInvalidRequest) {
			t.Errorf("%+v: %v, want tollgate.ErrInvalidRequest", req, err)
		}
	}
}
