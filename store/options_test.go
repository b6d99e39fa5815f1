package store_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/store"
)

// An option given a value outside its range makes the store's constructor
// return an error wrapping ErrInvalidOption that names the option and the
// value; no constructor panics or clamps.
func TestConstructorsRejectBadOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: no store is made
	defer c.Close()
	both := []struct {
		opt  store.Option
		want string
	}{
		{store.WithMaxReplays(-1), "WithMaxReplays(-1)"},
		{store.WithReplayTTL(0), "WithReplayTTL(0s)"},
		{store.WithReplayTTL(-time.Second), "WithReplayTTL(-1s)"},
	}
	redisOnly := []struct {
		opt  store.RedisOption
		want string
	}{
		{store.WithPrefix("a{"), `WithPrefix("a{")`},
		{store.WithPrefix("}"), `WithPrefix("}")`},
		{store.WithPrefix("x{y}:"), `WithPrefix("x{y}:")`},
		{store.WithClusterTags(-1), "WithClusterTags(-1)"},
		{store.WithClusterTags(16384 + 1), "WithClusterTags(16385)"},
		{store.WithBatching(-1, 2), "WithBatching(-1, 2)"},
		{store.WithBatching(128, -1), "WithBatching(128, -1)"},
		{store.WithDenyCache(-1), "WithDenyCache(-1)"},
		{store.WithJournal(-time.Millisecond), "WithJournal(-1ms)"},
		{store.WithLogger(nil), "WithLogger(nil)"},
		{store.WithMeterProvider(nil), "WithMeterProvider(nil)"},
	}
	memoryOnly := []struct {
		opt  store.MemoryOption
		want string
	}{
		{store.WithClock(nil), "WithClock(nil)"},
		{store.WithMaxKeys(0), "WithMaxKeys(0)"},
		{store.WithMaxKeys(-5), "WithMaxKeys(-5)"},
	}
	check := func(t *testing.T, name string, err error, want string) {
		t.Helper()
		if !errors.Is(err, store.ErrInvalidOption) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "want") {
			t.Errorf("%s: error %v, want one wrapping ErrInvalidOption naming %s and its range", name, err, want)
		}
	}
	for _, tc := range both {
		st, err := store.NewRedis(c, tc.opt)
		check(t, "NewRedis", err, tc.want)
		if st != nil {
			t.Errorf("NewRedis(%s) made a store", tc.want)
		}
		m, err := store.NewMemory(tc.opt)
		check(t, "NewMemory", err, tc.want)
		if m != nil {
			t.Errorf("NewMemory(%s) made a store", tc.want)
		}
	}
	for _, tc := range redisOnly {
		st, err := store.NewRedis(c, store.WithPrefix("ok:"), tc.opt)
		check(t, "NewRedis", err, tc.want)
		if st != nil {
			t.Errorf("NewRedis(%s) made a store", tc.want)
		}
	}
	for _, tc := range memoryOnly {
		m, err := store.NewMemory(store.WithMaxReplays(2), tc.opt)
		check(t, "NewMemory", err, tc.want)
		if m != nil {
			t.Errorf("NewMemory(%s) made a store", tc.want)
		}
	}
	for name, c := range map[string]redis.UniversalClient{"nil": nil, "typed nil": (*redis.Client)(nil), "typed nil cluster": (*redis.ClusterClient)(nil)} {
		if _, err := store.NewRedis(c); !errors.Is(err, store.ErrInvalidOption) {
			t.Errorf("NewRedis(%s client): %v, want an error wrapping ErrInvalidOption", name, err)
		}
	}
}

// The edges of every range are accepted: 0 where it turns a feature off,
// and the largest maxClusterTags.
func TestConstructorsAcceptEdgeOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: the store is only made and closed
	defer c.Close()
	st, err := store.NewRedis(c, store.WithPrefix(""), store.WithMaxReplays(0), store.WithReplayTTL(time.Nanosecond),
		store.WithClusterTags(0), store.WithClusterTags(16384), store.WithBatching(0, 0), store.WithDenyCache(0),
		store.WithJournal(0), store.WithLogger(slog.Default()))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := store.NewMemory(store.WithMaxReplays(0), store.WithReplayTTL(time.Nanosecond), store.WithMaxKeys(1), store.WithClock(time.Now)); err != nil {
		t.Fatal(err)
	}
}
