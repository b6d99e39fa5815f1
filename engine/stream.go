package engine

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate/telemetry"
)

// openStream decides a stream's opening. A stream that finds no free seat
// of a rule with InFlight.StreamWait waits for one, within the stream's
// context and that wait, asking again after each suggested wait. out is
// decide's.
func (l *Limiter) openStream(ctx context.Context, set *ruleSet, call Call, out *limitList) (result, *afterCall) {
	start := l.clk.now()
	var waited time.Duration
	for {
		res, after := l.decide(ctx, &set.calls, call, out)
		if res.err == nil || !res.seatWait {
			if waited > 0 {
				l.seatTel.wait.Record(ctx, l.clk.since(start).Seconds(), metric.WithAttributes(telemetry.AttrRule.String(set.calls.plans[0].rule.Name)))
			}
			return res, after
		}
		wait := max(res.decision.RetryAfter, time.Millisecond)
		if waited+wait > res.maxShapeWait {
			return res, after
		}
		waited += wait
		if err := l.clk.sleep(ctx, wait); err != nil {
			return res, after
		}
	}
}

// receive decides one message received on a stream to method under plans
// (its rules' PerMessage limits), telling remember each result. A message
// a Shape rule denies waits until it fits, within the bound and the
// stream's life; otherwise the denial is the error. v records each
// decision.
func (l *Limiter) receive(ctx context.Context, plans *planSet, call Call, v *Verdict) error {
	var waited time.Duration
	for {
		var limits limitList
		res, _ := l.decide(ctx, plans, call, &limits)
		v.remember(res, &limits)
		if res.err == nil || !res.hasDecision() || !res.shape {
			return res.err
		}
		// A zero wait would spin, so wait at least 1ms.
		wait := max(res.decision.RetryAfter, time.Millisecond)
		if waited+wait > res.maxShapeWait {
			return res.err
		}
		waited += wait
		if err := l.clk.sleep(ctx, wait); err != nil {
			var canceled result
			canceled.reject(outcomeCanceled, Canceled, err, "a stream message held back by %s ended with its stream: %v", plans.plans[0].rule.Name, err)
			v.remember(canceled, &limitList{})
			return canceled.err
		}
	}
}
