//go:build !unix

package distrib

import "time"

// processCPU is not measured here (cpu_ratio_bidir reads NaN).
func processCPU() time.Duration { return 0 }
