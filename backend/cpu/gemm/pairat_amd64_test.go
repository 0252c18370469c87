//go:build amd64 && !purego

package gemm

import (
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
// vendor-chosen paths as they are set: all three on AMD, none elsewhere,
// and each one that is on when they differ.
func TestCPUTuningFollowsVendor(t *testing.T) {
	if !hasAVX2FMA {
		require.Empty(t, CPUTuning(), "no AVX2 kernels, no tuning")
		return
	}
	if onAMD {
		require.Equal(t, "B read in place, transposed A read in place, the next product's operands prefetched", CPUTuning())
	} else {
		require.True(t, strings.HasPrefix(CPUTuning(), "B and transposed A packed"), CPUTuning())
	}
	defer func(v, p bool) { viewBPays, pairATransposed = v, p }(viewBPays, pairATransposed)
	viewBPays, pairATransposed = true, onAMD
	want := "B read in place"
	if onAMD {
		want += ", transposed A read in place, the next product's operands prefetched"
	}
	require.Equal(t, want, CPUTuning())
}
