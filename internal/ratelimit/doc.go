// Package ratelimit paces byte streams so that, together, they stay under a
// rate.
//
// Contract: one Limiter may be shared by any number of goroutines; the rate
// is theirs in total, so a lone writer gets all of it and two writers share
// it. New returns nil for a rate of 0 or less, and a nil Limiter never
// waits. Wait(ctx, n) returns when the n bytes may pass, or ctx.Err(); after
// an idle spell at most Burst worth of bytes passes without waiting. The
// clock and sleep can be replaced in tests, so nothing here is timed.
package ratelimit
