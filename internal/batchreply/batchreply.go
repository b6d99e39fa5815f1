// Package batchreply decodes the reply of the batch script (lua.Batch) one
// decision at a time, for the Redis store and the scripts' tests.
package batchreply

// Tail is how many integers end a batch reply after the decisions' answers:
// the sequence the call wrote at (0: none) and the server time.
const Tail = 2

// Decision decodes the batch script's answer for one decision, which
// starts at reply[i] (lua/doc.go, Batch), into the six integers a decide
// call answers for one entry: allowed, remaining, retry, reset, replayed
// and the sequence its state was written at (0 when it wrote none with an
// era). It returns them and the index where the next decision's answer
// starts. ok is false when reply ends before the decision's answer and the
// reply's Tail do, or when its code is not one the batch script sends;
// then d and next mean nothing.
//
// The script's answer is compact: a decision that could not be judged
// answers allowed alone (-1 or -2); one that was judged answers a code,
// remaining*8 + wrote*4 + allowed*2 + replayed, then its reset, then its
// retry only when denied (an admitted decision's retry is 0). A decision
// that wrote its state (wrote 1: admitted, not a replay, not a peek) wrote
// it at the call's sequence, the reply's next-to-last integer.
func Decision(reply []int64, i int) (d [6]int64, next int, ok bool) {
	if i < 0 || i >= len(reply)-Tail {
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
	allowed, replayed, wrote, remaining := code>>1&1, code&1, code>>2&1, code>>3
	if allowed == 0 && (replayed == 1 || wrote == 1) || replayed == 1 && wrote == 1 {
		return d, i, false // a replay, and a write, are always admitted; a replay writes no state
	}
	n := 2 // code, reset
	if allowed == 0 {
		n = 3 // and retry
	}
	if i+n > len(reply)-Tail {
		return d, i, false
	}
	d = [6]int64{allowed, remaining, 0, reply[i+1], replayed, 0}
	switch {
	case allowed == 0:
		d[2] = reply[i+2]
	case wrote == 1:
		d[5] = reply[len(reply)-2]
	}
	return d, i + n, true
}
