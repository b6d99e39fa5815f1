package interceptor

import (
	"context"
	"fmt"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/realip"

	"github.com/tollgate/tollgate/keyfunc"
)

// RealIP returns a key function whose value is the client IP address found
// by go-grpc-middleware's realip interceptor
// (github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/realip),
// which must be chained before the limiter. That interceptor trusts
// X-Forwarded-For and similar headers only from the proxies it is told to
// trust, so a client cannot pick its own address. The value is missing
// (keyfunc.ErrMissing) when the interceptor did not run or found no
// address.
func RealIP() keyfunc.Func {
	return keyfunc.Checked(func(ctx context.Context, _ keyfunc.Call) (string, error) {
		ip, ok := realip.FromContext(ctx)
		if !ok || !ip.IsValid() {
			return "", fmt.Errorf("%w: no real IP in the context (is the realip interceptor chained before the limiter?)", keyfunc.ErrMissing)
		}
		return ip.Unmap().String(), nil
	})
}
