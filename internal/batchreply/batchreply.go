// Package batchreply decodes the reply of the batch script (lua.Batch) one
// decision at a time, for the Redis store and the scripts' tests.
package batchreply

// Decision decodes the batch script's answer for one decision, which
// starts at reply[i] (lua/doc.go, Batch), into the five integers a decide
// call answers for one entry: allowed, remaining, retry, reset and
// replayed. It
// returns them and the index where the next decision's answer starts. ok is
// false when reply ends before the decision's answer does, or when its code
// is not one the batch script sends; then d and next mean nothing.
//
// The script's answer is compact: a decision that could not be judged
// answers allowed alone (-1 or -2); one that was judged answers a code,
// remaining*4 + allowed*2 + replayed, then its reset, then its retry only
// when denied (an admitted decision's retry is 0).
func Decision(reply []int64, i int) (d [5]int64, next int, ok bool) {
	if i < 0 || i >= len(reply) {
		return d, i, false
	}
	code := reply[i]
	switch {
	case code == -1 || code == -2:
		d[0] = code
		return d, i + 1, true
	case code < 0:
		return d, i, false
	}
	allowed, replayed, remaining := code>>1&1, code&1, code>>2
	if allowed == 0 && replayed == 1 {
		return d, i, false // a replay is always admitted
	}
	n := 2 // code, reset
	if allowed == 0 {
		n = 3 // and retry
	}
	if i+n > len(reply) {
		return d, i, false
	}
	d = [5]int64{allowed, remaining, 0, reply[i+1], replayed}
	if allowed == 0 {
		d[2] = reply[i+2]
	}
	return d, i + n, true
}
