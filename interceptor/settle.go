package interceptor

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SettleFailures returns a Rule.Settle that keeps the reservation of a call
// ending with one of codes and gives back the reservation of any other
// (success included): only failures count, as in "5 failed logins per 15
// minutes". A call is still refused up front when its failures used the
// quota.
func SettleFailures(failures ...codes.Code) func(context.Context, any, error) (int64, bool) {
	failures = slices.Clone(failures)
	return func(_ context.Context, _ any, err error) (int64, bool) {
		if slices.Contains(failures, status.Code(err)) {
			return 0, false
		}
		return 0, true
	}
}
