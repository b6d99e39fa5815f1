// Package batchreply decodes the reply of the batch script (lua.Batch) one
// decision at a time, for the Redis store and the scripts' tests.
package batchreply

// Decision decodes the batch script's answer for one decision, which
// starts at reply[i] (lua/doc.go, Batch), into the six integers a decide
// call answers for one entry: allowed, remaining, retry, reset, replayed
// and the sequence its state was written at (0 when it wrote none with an
// era). The server time, which a sequence is given relative to, is the
// reply's last integer. It returns them and the index where the next
// decision's answer starts. ok is false when reply ends before the
// decision's answer does, or when its code is not one the batch script
// sends; then d and next mean nothing.
//
// The script's answer is compact: a decision that could not be judged
// answers allowed alone (-1 or -2); one that was judged answers a code,
// remaining*16 + seq*4 + allowed*2 + replayed, where seq is 0 (no
// sequence), 1 (the server time) or 2 (another, given after the reset as
// its difference from the server time); then its reset, then its retry
// only when denied (an admitted decision's retry is 0).
func Decision(reply []int64, i int) (d [6]int64, next int, ok bool) {
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
	allowed, replayed, seq, remaining := code>>1&1, code&1, code>>2&3, code>>4
	if allowed == 0 && (replayed == 1 || seq != 0) || seq == 3 {
		return d, i, false // a replay, and a write, are always admitted
	}
	n := 2 // code, reset
	if allowed == 0 || seq == 2 {
		n = 3 // and retry, or the sequence
	}
	if i+n >= len(reply) { // the server time comes after every answer
		return d, i, false
	}
	d = [6]int64{allowed, remaining, 0, reply[i+1], replayed, 0}
	now := reply[len(reply)-1]
	switch {
	case allowed == 0:
		d[2] = reply[i+2]
	case seq == 1:
		d[5] = now
	case seq == 2:
		d[5] = now + reply[i+2]
	}
	return d, i + n, true
}
