package rlqs_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/rlqs"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
	"github.com/tollgate/tollgate/store/storetest"
)

// conformanceConfig assigns every key a token bucket of 100 an hour: the
// limit the suite's request-id measure asks for.
const conformanceConfig = `domain: services
descriptors:
  - key: key
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// byAssignment is why most cases do not run on a Client.
const byAssignment = "rlqs.Client decides by the assignment tollgate-rls sends for the key's bucket " +
	"(here a token bucket of 100 an hour for every key), not by Request.Limit: a case counting what its own limit leaves cannot hold"

// The conformance suite on a Client of tollgate-rls's quota service, every
// key assigned 100 an hour. What does not depend on the request's own
// limit runs: the measure of request-id replays, the exact admissions of
// concurrent callers and of concurrent replays on every algorithm. The rest
// is skipped, each case with the reason.
func TestConformance(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	conn := quotaServerOf(t, newMemory(t, store.WithClock(clock.Now)), conformanceConfig, rls.QuotaOptions{Clock: clock.Now})
	c := newClient(t, conn, rlqs.Options{Clock: clock.Now, FirstAssignmentWait: 5 * time.Second})
	skip := map[string]string{}
	for _, name := range []string{
		"validation", "key_isolation", "empty_key",
		"AllowAll_validation", "AllowAll_in_order", "AllowAll_replay", "AllowAll_two_limits_of_one_identity",
		"AllowAll_two_identities", "Peek_never_debits", "Reset_restores_capacity",
		"settle/settle_gives_back", "settle/settle_later", "settle/settle_past_empty", "settle/settle_once_per_request_id",
		"settle/settle_a_set", "settle/settle_validation", "settle/overdraw",
	} {
		skip[name] = byAssignment
	}
	for alg, cases := range map[string][]string{
		"token_bucket":   {"fresh_bucket", "burst_to_empty", "denial_debits_nothing", "refill_after_advance", "retry_after_is_exact", "burst_above_rate", "fractional_interval", "request_id"},
		"gcra":           {"fresh_bucket", "burst_to_empty", "denial_debits_nothing", "refill_after_advance", "retry_after_is_exact", "burst_above_rate", "fractional_interval", "request_id"},
		"fixed_window":   {"fresh_window", "fill_and_deny", "denial_debits_nothing", "window_rollover", "retry_after_is_exact", "request_id"},
		"sliding_window": {"fresh_window", "fill_and_deny", "denial_debits_nothing", "previous_window_weighted", "retry_after_is_exact", "request_id"},
	} {
		for _, name := range cases {
			skip["sequences/"+alg+"/"+name] = byAssignment
		}
	}
	storetest.Run(t, storetest.Harness{Store: c, Advance: clock.Advance, MaxReplays: 4 /* the store's default */, Skip: skip})
}
