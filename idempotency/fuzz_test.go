package idempotency_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/internal/check"
)

// FuzzRequestID feeds FromIncoming one or two values of the header and
// checks it against the rule: the id is returned unchanged when every value
// is the same and it is a valid request id (check.RequestID); otherwise the error
// wraps ErrMalformed and no id is returned.
func FuzzRequestID(f *testing.F) {
	f.Fuzz(func(t *testing.T, first, second string, repeat bool) {
		vals := []string{first}
		if repeat {
			vals = append(vals, second)
		}
		ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{idempotency.DefaultHeader: vals})
		id, err := idempotency.FromIncoming(ctx, "")
		ok := (!repeat || first == second) && check.RequestID(first) == nil
		if ok {
			if err != nil || id != first {
				t.Fatalf("values %q: (%q, %v), want (%q, nil)", vals, id, err, first)
			}
			return
		}
		if !errors.Is(err, idempotency.ErrMalformed) || id != "" {
			t.Fatalf("values %q: (%q, %v), want ErrMalformed", vals, id, err)
		}
	})
}
