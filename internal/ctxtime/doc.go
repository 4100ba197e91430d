// Package ctxtime holds the one time helper every long-running loop needs:
// a sleep that a context cancels. It has no state.
package ctxtime
