package reduce

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// forEachRowPath runs test through the AVX-512 forms of the row kernels
// (where vmath runs its AVX-512 loops), the AVX2 assembly (where the CPU
// has it) and their Go fallbacks; rowPath names the path running.
func forEachRowPath(t *testing.T, test func(t *testing.T)) {
	saved, saved512 := useAVX2, use512
	defer func() { useAVX2, use512 = saved, saved512 }()
	for _, p := range []struct {
		name     string
		avx2, z  bool
		possible bool
	}{{"avx512", true, true, saved512}, {"avx2", true, false, saved}, {"go", false, false, true}} {
		if !p.possible {
			continue
		}
		useAVX2, use512 = p.avx2, p.z
		rowPath = p.name
		t.Run("path="+p.name, test)
	}
}

// rowPath is the path forEachRowPath runs.
var rowPath string

// TestSoftmaxRowsFloat32 checks float32 Softmax over contiguous rows
// against e^(x−max)/Σe^(x−max) evaluated in float64 on the same inputs,
// for row lengths around the 8- and 16-element steps of the row kernels
// (1, 7, 8, 9, 15, 16, 17, 33, 65, 128, 130, 197), rows centred at 0, at −50 and at 10⁴ (where e^x alone would
// overflow), one row holding −Inf (masked: exactly 0 there), with rows
// enough that both goroutines work; through the assembly row kernels and
// through their Go fallbacks, and through the AVX-512 forms of the largest
// element and the scaling: all must agree bit for bit.
func TestSoftmaxRowsFloat32(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	for _, size := range []int{1, 7, 8, 9, 15, 16, 17, 33, 65, 128, 130, 197} {
		for _, offset := range []float64{0, -50, 1e4} {
			rows := max(64, 4*parallelGrain/size)
			rng := rand.New(rand.NewPCG(uint64(size), 17))
			x := make([]float32, rows*size)
			for i := range x {
				x[i] = float32(offset + 3*rng.NormFloat64())
			}
			if size > 1 {
				x[size+size/2] = float32(math.Inf(-1))
			}
			want := make([]float64, len(x))
			for j := 0; j < rows; j++ {
				r := x[j*size : (j+1)*size]
				m := math.Inf(-1)
				for _, v := range r {
					m = max(m, float64(v))
				}
				var s float64
				for i, v := range r {
					want[j*size+i] = math.Exp(float64(v) - m)
					s += want[j*size+i]
				}
				for i := range r {
					want[j*size+i] /= s
				}
			}
			t.Run(fmt.Sprintf("size%d_offset%g", size, offset), func(t *testing.T) {
				paths := map[string][]float32{}
				forEachRowPath(t, func(t *testing.T) {
					y := make([]float32, len(x))
					softmaxBlocks(kindSoftmax, x, y, blocks{outer: rows, r: size, inner: 1})
					for i, w := range want {
						if d := math.Abs(float64(y[i]) - w); d > 3e-7*w || (w == 0 && y[i] != 0) {
							require.InDelta(t, w, float64(y[i]), 3e-7*w, "y[%d] (row %d)", i, i/size)
						}
					}
					paths[rowPath] = y
				})
				for _, p := range []string{"avx512", "avx2"} {
					if a := paths[p]; a != nil {
						require.Equal(t, paths["go"], a, "%s and Go agree", p)
					}
				}
			})
		}
	}
}

// processCPU returns the CPU time this process has used, in nanoseconds
// (the benchmarks report it per operation: steadier than wall time on a
// loaded machine).
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// cpuLoop runs fn b.N times and reports the CPU time per call.
func cpuLoop(b *testing.B, fn func()) {
	cpu0 := processCPU()
	for b.Loop() {
		fn()
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-us/op")
}

// BenchmarkSoftmaxViTRows is the float32 Softmax of the ViT benchmark's
// attention (64 images × 4 heads × 65 queries, rows of 65 keys).
func BenchmarkSoftmaxViTRows(b *testing.B) {
	const rows, size = 64 * 4 * 65, 65
	rng := rand.New(rand.NewPCG(3, 4))
	x, y := make([]float32, rows*size), make([]float32, rows*size)
	for i := range x {
		x[i] = float32(2 * rng.NormFloat64())
	}
	b.SetBytes(int64(rows * size * 8))
	cpuLoop(b, func() { softmaxBlocks(kindSoftmax, x, y, blocks{outer: rows, r: size, inner: 1}) })
}

// BenchmarkLayerNormViTRows is the float32 LayerNorm forward on the ViT
// benchmark's shape (64 images × 65 tokens, dim 128).
func BenchmarkLayerNormViTRows(b *testing.B) {
	const rows, size = 64 * 65, 128
	rng := rand.New(rand.NewPCG(5, 6))
	x, y := make([]float32, rows*size), make([]float32, rows*size)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	scale, bias := make([]float64, size), make([]float64, size)
	for i := range scale {
		scale[i], bias[i] = rng.NormFloat64(), rng.NormFloat64()
	}
	mean, inv := make([]float64, rows), make([]float64, rows)
	b.SetBytes(int64(rows * size * 8))
	cpuLoop(b, func() { layerNormRows(x, y, rows, size, scale, bias, 1e-5, mean, inv) })
}

// TestRowKernelsEveryLength checks maxRow32 and scaleRow32 on every row
// length from 1 to 300 (each tail of the 16- and 64-element steps),
// on rows wholly below zero (a masked lane read as 0 would win the
// maximum), against the plain Go loop: the maximum exactly, each product
// float32(float64(x)·s) bit for bit, and the elements after the row
// untouched; through every row path.
func TestRowKernelsEveryLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const s = 1.0 / 3
	forEachRowPath(t, func(t *testing.T) {
		for n := 1; n <= 300; n++ {
			buf := make([]float32, n+20)
			for i := range buf {
				buf[i] = float32(-100 + 10*rng.NormFloat64())
			}
			x := buf[1 : 1+n] // not 64-byte aligned
			want := x[0]
			for _, v := range x {
				want = max(want, v)
			}
			require.Equal(t, want, maxRow32(x), "max of %d elements", n)
			orig := append([]float32(nil), buf...)
			scaleRow32(x, s)
			for i, v := range buf {
				w := orig[i]
				if i >= 1 && i < 1+n {
					w = float32(float64(w) * s)
				}
				if math.Float32bits(v) != math.Float32bits(w) {
					t.Fatalf("n=%d: element %d is %v, want %v", n, i-1, v, w)
				}
			}
		}
	})
}

// BenchmarkSoftmaxRowPaths times float32 Softmax on one goroutine over
// 4096 rows of the GPT export's attention (128 keys) and of ViT-B/16's
// (197): with the row kernels on AVX-512 (vmath's fused AVX-512 row where
// vmath runs its AVX-512 loops) and on AVX2 (then, on an AVX-512 host, the
// three steps apart, vmath's exponentials on AVX-512).
func BenchmarkSoftmaxRowPaths(b *testing.B) {
	saved := use512
	defer func() { use512 = saved }()
	for _, size := range []int{128, 197} {
		const rows = 4096
		rng := rand.New(rand.NewPCG(uint64(size), 9))
		x, y := make([]float32, rows*size), make([]float32, rows*size)
		for i := range x {
			x[i] = float32(3 * rng.NormFloat64())
		}
		for _, z := range []bool{true, false} {
			if z && !saved {
				continue
			}
			name := map[bool]string{true: "avx512", false: "avx2"}[z]
			b.Run(fmt.Sprintf("size%d/%s", size, name), func(b *testing.B) {
				use512 = z
				b.SetBytes(int64(rows * size * 8))
				for b.Loop() {
					for r := 0; r < rows; r++ {
						softmaxRow(kindSoftmax, x[r*size:(r+1)*size], y[r*size:(r+1)*size])
					}
				}
			})
		}
	}
}

// TestSoftmaxRowsNextMatchesRow: SoftmaxRows32 (each row fetching the next
// row's destination as it computes) writes every row as SoftmaxRow32
// does, bit for bit, for row lengths around the kernels' 8- and 16-element
// steps and attention's 128 and 197, through every row path; the rows
// after the last whole one are left alone.
func TestSoftmaxRowsNextMatchesRow(t *testing.T) {
	forEachRowPath(t, func(t *testing.T) {
		for _, cols := range []int{1, 7, 8, 9, 16, 17, 33, 128, 197} {
			rng := rand.New(rand.NewPCG(uint64(cols), 41))
			const rows = 29
			src := make([]float32, rows*cols+3) // a partial row at the end where cols > 3
			for i := range src {
				src[i] = float32(4 * rng.NormFloat64())
			}
			want := make([]float32, len(src))
			for r := 0; r < len(src)/cols; r++ {
				SoftmaxRow32(want[r*cols:(r+1)*cols], src[r*cols:(r+1)*cols])
			}
			got := make([]float32, len(src))
			SoftmaxRows32(got, src, cols)
			for i := range want {
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "cols %d, element %d", cols, i)
			}
		}
	})
}
