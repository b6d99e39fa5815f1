package region

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
)

// homeSource is the Home's script, sent as it is in the repository.
//
//go:embed home.lua
var homeSource string

var homeScript = redis.NewScript(homeSource)

// DefaultHomePrefix starts every key RedisHome writes.
const DefaultHomePrefix = "tollgate:region:"

// DefaultHomeTimeout bounds a Home call whose context has no deadline.
const DefaultHomeTimeout = 2 * time.Second

// RedisHome is a Home on one Redis (single node, Sentinel or Cluster,
// through redis.UniversalClient): one hash per identity and limit, under
// one hash tag, updated by one short script per report; a report's
// holding expires by the server's clock, and the hash with its last
// holding. The reports of one Report call go in one pipeline.
//
// A report the script ran twice (a client that retries after a lost
// reply) grants again from the same holdings: the region holds the second
// answer, and the Home holds what it answered.
type RedisHome struct {
	rdb    redis.UniversalClient
	prefix string
}

var _ Home = (*RedisHome)(nil)

// NewRedisHome returns a Home on rdb whose keys start with prefix
// (DefaultHomePrefix when empty). It writes nothing.
func NewRedisHome(rdb redis.UniversalClient, prefix string) (*RedisHome, error) {
	if rdb == nil {
		return nil, errors.New("region: the home's Redis client is nil")
	}
	if prefix == "" {
		prefix = DefaultHomePrefix
	}
	return &RedisHome{rdb: rdb, prefix: prefix}, nil
}

// Report sends every report in one pipeline (the Cluster client splits
// it by slot) and decodes the answers.
func (h *RedisHome) Report(ctx context.Context, reports []Report) ([]Reply, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	cmds, err := h.run(ctx, len(reports), func(i int) ([]string, []any) {
		r := reports[i]
		return []string{homeKey(h.prefix, r.Key, r.Limit)}, []any{"report", r.Region, r.Regions, r.Floor, r.Limit.Rate,
			r.Window, r.Demand, r.Used, r.Want, max(r.Keep.Microseconds(), 1)}
	})
	if err != nil {
		return nil, fmt.Errorf("region: redis home: report: %w", err)
	}
	replies := make([]Reply, len(reports))
	for i, c := range cmds {
		v, err := c.Slice()
		if err != nil {
			return nil, fmt.Errorf("region: redis home: report: %w", err)
		}
		if replies[i], err = readReply(v); err != nil {
			return nil, fmt.Errorf("region: redis home: report: %w", err)
		}
	}
	return replies, nil
}

// Look reads the holdings of key under limit with the script's look.
func (h *RedisHome) Look(ctx context.Context, key string, limit tollgate.Limit) ([]Holding, time.Time, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	cmds, err := h.run(ctx, 1, func(int) ([]string, []any) {
		return []string{homeKey(h.prefix, key, normalize(limit))}, []any{"look"}
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("region: redis home: look: %w", err)
	}
	v, err := cmds[0].Slice()
	if err != nil || len(v) < 1 {
		return nil, time.Time{}, fmt.Errorf("region: redis home: look: %w", errors.Join(err, errBadReply))
	}
	now, ok := v[0].(int64)
	if !ok {
		return nil, time.Time{}, fmt.Errorf("region: redis home: look: %w", errBadReply)
	}
	hs, err := readHoldings(v[1:], now)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("region: redis home: look: %w", err)
	}
	return hs, time.UnixMicro(now), nil
}

// run pipelines n calls of the script, the i-th on args(i), by EVALSHA;
// the calls Redis answers NOSCRIPT (its first use, a restart, a failover)
// are sent again once, with the script's text.
func (h *RedisHome) run(ctx context.Context, n int, args func(i int) ([]string, []any)) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	_, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			keys, argv := args(i)
			cmds[i] = homeScript.EvalSha(ctx, p, keys, argv...)
		}
		return nil
	})
	var again []int
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds, err
	}
	_, err = h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range again {
			keys, argv := args(i)
			cmds[i] = homeScript.Eval(ctx, p, keys, argv...)
		}
		return nil
	})
	for _, c := range cmds {
		if c.Err() != nil && !errors.Is(c.Err(), redis.Nil) {
			return nil, c.Err()
		}
	}
	return cmds, err
}

var errBadReply = errors.New("unexpected reply from the home's script")

// readReply decodes a report's answer: {granted, now, region, value, ...},
// or a refusal {-1 | -2, now}.
func readReply(v []any) (Reply, error) {
	if len(v) < 2 {
		return Reply{}, errBadReply
	}
	code, ok1 := v[0].(int64)
	now, ok2 := v[1].(int64)
	if !ok1 || !ok2 {
		return Reply{}, errBadReply
	}
	at := time.UnixMicro(now)
	switch code {
	case -1:
		return Reply{At: at, Err: ErrDisagree}, nil
	case -2:
		return Reply{At: at, Err: ErrStale}, nil
	}
	others, err := readHoldings(v[2:], now)
	if err != nil {
		return Reply{}, err
	}
	return Reply{Granted: code, At: at, Others: others}, nil
}

// readHoldings decodes region, value pairs, sorted by region.
func readHoldings(v []any, now int64) ([]Holding, error) {
	if len(v)%2 != 0 {
		return nil, errBadReply
	}
	var out []Holding
	for i := 0; i < len(v); i += 2 {
		name, ok1 := v[i].(string)
		value, ok2 := v[i+1].(string)
		h, ok3 := parseHolding(value)
		if !ok1 || !ok2 || !ok3 {
			return nil, errBadReply
		}
		out = append(out, h.public(name, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	return out, nil
}

// withDefaultTimeout gives ctx DefaultHomeTimeout when it has no deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultHomeTimeout)
}
