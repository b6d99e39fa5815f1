package interceptor

import "context"

// Close stops what the Limiter started: the watch of its store's overrides
// (which ends within the store deadline). Calls after Close are still
// decided, on overrides read within the refresh delay.
func (l *Limiter) Close(ctx context.Context) error {
	l.ov.stop()
	return nil
}
