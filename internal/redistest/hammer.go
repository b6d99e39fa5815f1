package redistest

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Hammer runs callers goroutines, started together, each calling do calls
// times with its own index modulo n (the client, replica or store it
// uses), and returns how many calls do reported admitted. Any error fails
// the test.
func Hammer(t testing.TB, n, callers, calls int, do func(i int) (bool, error)) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range calls {
				ok, err := do(g % n)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					admitted.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return admitted.Load()
}
