// Package partkey names the parts of an identity: the state of one limit
// among several limits on one identity, which the Redis store keeps on the
// identity's hash tag so that AllowAll decides them in one script call on
// a Redis Cluster too. Package interceptor (Rule.Limits), package rls
// (several limits on a descriptor) and package rlqs name parts alike, so
// that the edge and the services share state.
package partkey

import "github.com/tollgate/tollgate"

// Separator splits a Request.Key into the identity that names its hash tag
// (the bytes before the first Separator) and a part with state of its own.
const Separator = "\x1f"

// Join returns the Request.Key of the part named part of identity:
// identity, Separator and part. The Redis store derives such a Key's hash
// tag from identity and names its state after all of it, so any Key keeps
// state of its own.
func Join(identity, part string) string { return identity + Separator + part }

// ForLimit names the state of limit l within an identity that has several
// limits: its period, or its calendar unit ("1s", "1h0m0s", "daily").
func ForLimit(l tollgate.Limit) string {
	if l.Calendar != tollgate.NoCalendar {
		return l.Calendar.String()
	}
	return l.Period.String()
}
