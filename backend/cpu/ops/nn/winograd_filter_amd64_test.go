//go:build amd64 && !purego

package nn

import (
	"testing"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/assert"
)

// TestWgradGatherColumnsChecked checks that the gathering passes refuse
// columns past their row, a column that overflowed int32 and a partial
// group, from the range kept as the columns are set (the check no longer
// reads every column per call), and that a prefix keeps that range.
func TestWgradGatherColumnsChecked(t *testing.T) {
	if !winoAVX2 {
		testutil.SkipHardware(t, "no AVX2 on this CPU")
	}
	var c wgradCols
	c.at = make([]int32, 16)
	for i := range c.at {
		c.set(i, 2*(15-i)) // descending: the range is not the ends' order
	}
	assert.Equal(t, 0, c.lo)
	assert.Equal(t, 30, c.hi)
	out := make([]float32, 4*16)
	x := make([]float32, 34) // the X pass reads 4 columns from each: 30 + 4
	y := make([]float32, 32) // the Y pass 2: 30 + 2
	assert.NotPanics(t, func() { wgradHorzXIdxAsm(out, 16, x, c) })
	assert.NotPanics(t, func() { wgradHorzYIdxAsm(out, 16, y, c) })
	assert.Panics(t, func() { wgradHorzXIdxAsm(out, 16, x[:33], c) })
	assert.Panics(t, func() { wgradHorzYIdxAsm(out, 16, y[:31], c) })
	// A prefix keeps the whole range (conservative): still refused.
	assert.Panics(t, func() { wgradHorzXIdxAsm(out, 16, x[:33], c.prefix(8)) })
	assert.Panics(t, func() { wgradHorzXIdxAsm(out, 16, x, c.prefix(5)) })
	c.set(15, 1<<32)
	assert.Panics(t, func() { wgradHorzXIdxAsm(out, 16, x, c) })
}
