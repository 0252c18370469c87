//go:build linux

package gemm

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPUTime is the CPU time of the calling OS thread, or -1 if it
// cannot be read. Benchmarks on one goroutine use it to measure
// throughput without the time other processes take from the core.
func threadCPUTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return -1
	}
	return time.Duration(ts.Nano())
}

// processCPUTime is the CPU time of the whole process (every thread), or
// -1 if it cannot be read. Benchmarks on several goroutines use it for the
// work per CPU second, fan-out overheads (wake-ups, waiting) included.
func processCPUTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return -1
	}
	return time.Duration(ts.Nano())
}
