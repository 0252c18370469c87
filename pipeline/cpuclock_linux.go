package pipeline

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// threadClock reads the CPU time the calling OS thread has used, so that a
// pass's time leaves out what other processes took of the core meanwhile.
// lock pins the calling goroutine to its thread (the caller unlocks);
// ok is false where the clock is unavailable.
func threadClock() (now func() time.Duration, unlock func(), ok bool) {
	runtime.LockOSThread()
	now = func() time.Duration {
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
			return 0
		}
		return time.Duration(ts.Nano())
	}
	return now, runtime.UnlockOSThread, true
}
