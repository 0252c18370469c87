//go:build !linux

package gemm

import "time"

func threadCPUTime() time.Duration { return -1 }

// processCPUTime is unavailable here.
func processCPUTime() time.Duration { return -1 }
