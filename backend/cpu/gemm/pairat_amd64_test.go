//go:build amd64 && !purego

package gemm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// usePairATransposed sets pairATransposed until restore is called.
func usePairATransposed(on bool) (restore func()) {
	prev := pairATransposed
	pairATransposed = on
	return func() { pairATransposed = prev }
}

// TestCPUTuningFollowsVendor: onnxtrain env's tuning line names the
// vendor-chosen paths as they are set: all on for AMD, all off elsewhere,
// and each one when they differ.
func TestCPUTuningFollowsVendor(t *testing.T) {
	if !hasAVX2FMA {
		require.Empty(t, CPUTuning(), "no AVX2 kernels, no tuning")
		return
	}
	if amdCPU() {
		require.True(t, strings.HasPrefix(CPUTuning(), "AMD: "), CPUTuning())
	} else {
		require.True(t, strings.HasPrefix(CPUTuning(), "B and transposed A packed"), CPUTuning())
	}
	defer func(v, p bool) { viewBPays, pairATransposed = v, p }(viewBPays, pairATransposed)
	viewBPays, pairATransposed = !amdCPU(), amdCPU()
	require.Equal(t, fmt.Sprintf("B in place %v, transposed A in place %v, next operands prefetched %v", !amdCPU(), amdCPU(), amdCPU()), CPUTuning())
}
