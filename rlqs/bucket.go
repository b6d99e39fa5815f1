package rlqs

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/tollgate/tollgate"
)

// BucketIDFunc returns the RLQS BucketId of a store key: the pairs the
// server reads the bucket by.
type BucketIDFunc func(key string) map[string]string

// RuleBucketID is the default BucketIDFunc. A key package interceptor
// built for rule R and the identity V (R, a NUL, "ck:", V) is the bucket
// {"rule": R, "key": V}, which tollgate-rls reads as the descriptor (rule,
// R), (key, V); a limit's part (partkey.Join) adds {"limit": part}. Any
// other key is the bucket {"key": key}.
func RuleBucketID(key string) map[string]string {
	key, part, hasPart := strings.Cut(key, "\x1f")
	id := map[string]string{"key": key}
	if rule, value, ok := strings.Cut(key, "\x00ck:"); ok {
		id["rule"], id["key"] = rule, value
	}
	if hasPart {
		id["limit"] = part
	}
	return id
}

// kind is what an assignment says.
type kind uint8

const (
	allowAll kind = iota + 1
	denyAll
	tokens
)

// assignment is a bucket's assignment as the server sent it.
type assignment struct {
	kind kind
	// limit is the token bucket's, as a tollgate.Limit (tokens).
	limit   tollgate.Limit
	expires time.Time
}

// bucket is one key the Client decides: its assignment and the usage to
// report.
type bucket struct {
	id     *rlqspb.BucketId
	assign atomic.Pointer[assignment]
	// first is closed when the first assignment arrives.
	first     chan struct{}
	firstOnce sync.Once
	// allowed and denied count the decisions since the last report.
	allowed, denied atomic.Uint64
	// lastReport is when the bucket was last reported (zero: never);
	// idle counts the reports in a row without a decision. Both are the
	// stream goroutine's.
	lastReport time.Time
	idle       int
}

func newBucket(id map[string]string) *bucket {
	return &bucket{id: &rlqspb.BucketId{Bucket: id}, first: make(chan struct{})}
}

// set stores an assignment action's strategy, valid until expires.
func (b *bucket) set(s *typev3.RateLimitStrategy, expires time.Time) {
	a := &assignment{kind: allowAll, expires: expires}
	switch st := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		if st.BlanketRule == typev3.RateLimitStrategy_DENY_ALL {
			a.kind = denyAll
		}
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := st.TokenBucket
		fill := tb.GetFillInterval().AsDuration()
		perFill := int64(1)
		if v := tb.GetTokensPerFill(); v != nil {
			perFill = int64(v.GetValue())
		}
		l := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: perFill, Period: fill, Burst: int64(tb.GetMaxTokens())}
		if l.Validate() != nil {
			a.kind = denyAll // a bucket that admits nothing: zero tokens
		} else {
			a.kind, a.limit = tokens, l
		}
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		// As Envoy's filter does: a strategy it does not enforce allows.
	}
	b.assign.Store(a)
	b.firstOnce.Do(func() { close(b.first) })
}

// idOf names a BucketId whatever the order of its pairs: each pair as
// the lengths and bytes of its key and value, in key order.
func idOf(id map[string]string) string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%d:%s%d:%s", len(k), k, len(id[k]), id[k])
	}
	return b.String()
}
