//go:build !linux

package pipeline

import "time"

// threadClock has no per-thread CPU clock outside Linux: passes are timed
// by the wall clock.
func threadClock() (now func() time.Duration, unlock func(), ok bool) {
	return nil, func() {}, false
}
