//go:build amd64 && !purego

package gemm

import (
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/require"
)

// TestPackAsmMatchesGo checks each assembly packing routine against its
// portable version on depths around the unrolling and odd strides.
func TestPackAsmMatchesGo(t *testing.T) {
	if !hasAVX2FMA {
		testutil.SkipHardware(t, "no AVX2/FMA")
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, kc := range []int{1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 100, 256, 257} {
		for _, strips := range []int{1, 2, 5} {
			// packPanel16 and packPanel6: row-major source, ld >= width.
			for _, w := range []int{16, 6} {
				ld := w*strips + r.IntN(5)
				src := randSlice(r, (kc-1)*ld+w*strips)
				want := make([]float32, strips*w*kc)
				got := make([]float32, strips*w*kc)
				if w == 16 {
					packPanel16Go(want, src, ld, kc, strips)
					packPanel16Asm(got, src, ld, kc, strips)
				} else {
					packPanel6Go(want, src, ld, kc, strips)
					packPanel6Asm(got, src, ld, kc, strips)
				}
				require.Equal(t, want, got, "packPanel%d kc=%d strips=%d ld=%d", w, kc, strips, ld)
			}
		}
		// packRows6 (6 rows) and packCols16T (16 rows), ld >= kc.
		for _, rows := range []int{6, 16} {
			ld := kc + r.IntN(5)
			src := randSlice(r, (rows-1)*ld+kc)
			want := make([]float32, rows*kc)
			got := make([]float32, rows*kc)
			if rows == 6 {
				packRows6Go(want, src, ld, kc)
				packRows6Asm(got, src, ld, kc)
			} else {
				packCols16TGo(want, src, ld, kc)
				packCols16TAsm(got, src, ld, kc)
			}
			require.Equal(t, want, got, "%d rows kc=%d ld=%d", rows, kc, ld)
		}
	}
	// Prefetching only reads; it must accept any in-bounds region.
	src := randSlice(r, 1000)
	prefetchRowsAsm(src, 100, 10, 100)
	prefetchRowsAsm(src[999:], 100, 1, 1)
	prefetchRowsAsm(src, 100, 0, 100)
}

// TestSgemmGoPacking runs the assembly kernel with the portable packing
// routines, which the assembly ones otherwise replace.
func TestSgemmGoPacking(t *testing.T) {
	old6, old16, oldT, oldP6 := packRows6Fn, packPanel16Fn, packCols16TFn, packPanel6Fn
	packRows6Fn, packPanel16Fn, packCols16TFn, packPanel6Fn = packRows6Go, packPanel16Go, packCols16TGo, packPanel6Go
	defer func() { packRows6Fn, packPanel16Fn, packCols16TFn, packPanel6Fn = old6, old16, oldT, oldP6 }()
	t.Run("RandomShapes", TestSgemmRandomShapes)
	t.Run("Large", TestSgemmLarge)
}
