package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wgradRef is the 3×3 stride-1 filter gradient summed from its definition
// in float64: dw[m, c, a, b] = Σ dy[n, m, oh, ow]·x[n, c, oh+a−pt, ow+b−pl].
func wgradRef(g Conv2D, dy, x []float64) []float64 {
	want := make([]float64, g.M*g.C*9)
	for n := 0; n < g.N; n++ {
		for m := 0; m < g.M; m++ {
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					d := dy[((n*g.M+m)*g.OH+oh)*g.OW+ow]
					for c := 0; c < g.C; c++ {
						for a := 0; a < 3; a++ {
							r := oh + a - g.PadTop
							if r < 0 || r >= g.H {
								continue
							}
							for b := 0; b < 3; b++ {
								col := ow + b - g.PadLeft
								if col < 0 || col >= g.W {
									continue
								}
								want[((m*g.C+c)*3+a)*3+b] += d * x[((n*g.C+c)*g.H+r)*g.W+col]
							}
						}
					}
				}
			}
		}
	}
	return want
}

// wgradConv is the 3×3 stride-1 geometry with begin pads pt, pl and end
// pads pb, pr.
func wgradConv(n, c, h, w, m, pt, pl, pb, pr int) Conv2D {
	return Conv2D{N: n, C: c, H: h, W: w, M: m, KH: 3, KW: 3, SH: 1, SW: 1, DH: 1, DW: 1,
		PadTop: pt, PadLeft: pl, OH: h + pt + pb - 2, OW: w + pl + pr - 2}
}

// wgradAssertClose compares got with want, with a tolerance relative to
// the largest magnitude that the sums involve (the float32 transforms
// round each tile's values before the long sums).
func wgradAssertClose(t *testing.T, want []float64, got []float32, scale float64) {
	t.Helper()
	require.Len(t, got, len(want))
	tol := 2e-5 * scale
	bad := 0
	for i, w := range want {
		if d := math.Abs(float64(got[i]) - w); !(d <= tol) {
			if bad < 5 {
				t.Errorf("element %d: got %v, want %v (|diff| %.3g > %.3g)", i, got[i], w, d, tol)
			}
			bad++
		}
	}
	assert.Zero(t, bad, "elements out of tolerance")
}

// TestWinogradFilterGradMatchesDirect checks the Winograd filter gradient
// against the float64 definition on odd and even, tiny and uneven images,
// channel counts that fill no kernel strip exactly, pads 0 to 2 (uneven
// ones included), overwriting and accumulating.
func TestWinogradFilterGradMatchesDirect(t *testing.T) {
	cases := []struct {
		n, c, h, w, m, pt, pl, pb, pr int
	}{
		{1, 1, 1, 1, 1, 1, 1, 1, 1},
		{1, 3, 2, 2, 5, 1, 1, 1, 1},
		{2, 5, 3, 5, 7, 1, 1, 1, 1},
		{3, 7, 17, 9, 11, 1, 1, 1, 1},
		{2, 13, 8, 8, 9, 0, 0, 0, 0},
		{1, 4, 9, 7, 3, 2, 2, 2, 2},
		{2, 6, 6, 11, 10, 2, 0, 1, 2},
		{3, 17, 5, 4, 19, 0, 2, 2, 0},
		{1, 2, 3, 3, 2, 0, 0, 0, 0}, // a single output
		{2, 9, 16, 16, 14, 1, 1, 1, 1},
		{3, 33, 7, 6, 21, 1, 0, 0, 1},
		// Three blocks, the last one short.
		{3, 20, 30, 26, 23, 1, 1, 1, 1},
		// Rows of 8 and 16 tiles (shuffled in whole groups), and rows
		// of 4, 1 and 2 tiles (gathered).
		{2, 6, 16, 32, 5, 1, 1, 1, 1},
		{1, 3, 6, 8, 4, 1, 1, 1, 1},
		{3, 5, 40, 8, 4, 1, 1, 1, 1},
		{2, 7, 9, 7, 6, 1, 1, 1, 1},
		{5, 8, 4, 4, 8, 1, 1, 1, 1},
		{6, 12, 2, 2, 10, 1, 1, 1, 1},
		// Pads wider than the kernel: whole tile rows and columns of
		// padding.
		{2, 3, 3, 4, 5, 3, 4, 2, 3},
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, passes := range []string{"arch", "go"} {
		if passes == "go" {
			// The portable passes (other architectures), in place of
			// the assembly ones where those exist.
			saved := wgradPass
			wgradPass = wgradGoPasses
			defer func() { wgradPass = saved }()
		}
		for _, tc := range cases {
			name := fmt.Sprintf("%s/n%d_c%d_%dx%d_m%d_p%d%d%d%d", passes, tc.n, tc.c, tc.h, tc.w, tc.m, tc.pt, tc.pl, tc.pb, tc.pr)
			t.Run(name, func(t *testing.T) {
				g := wgradConv(tc.n, tc.c, tc.h, tc.w, tc.m, tc.pt, tc.pl, tc.pb, tc.pr)
				g.Winograd = WinogradForce
				require.True(t, g.wgradEligible())
				require.True(t, g.wgradUse())
				x := randF64(rng, g.N*g.C*g.H*g.W)
				dy := randF64(rng, g.N*g.M*g.OH*g.OW)
				want := wgradRef(g, dy, x)
				// Each gradient element sums N·OH·OW products of values
				// in [-1, 1).
				scale := float64(g.N*g.OH*g.OW) + 1
				dw := make([]float32, len(want))
				for i := range dw {
					dw[i] = float32(math.NaN()) // overwritten, never read
				}
				g.FilterGrad(toF32(dy), toF32(x), dw, false)
				wgradAssertClose(t, want, dw, scale)
				// Accumulating adds the gradient onto what dw holds.
				base := randF64(rng, len(want))
				acc := toF32(base)
				g.FilterGrad(toF32(dy), toF32(x), acc, true)
				for i := range want {
					want[i] += base[i]
				}
				wgradAssertClose(t, want, acc, scale)
			})
		}
	}
}

// TestWinogradFilterGradParts checks the split of the tiles into parts,
// each with its own dU, that more than 4 cores bring (GOMAXPROCS 8 and 16
// here, whatever the machine has), against the float64 definition.
func TestWinogradFilterGradParts(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	rng := rand.New(rand.NewPCG(17, 18))
	for _, procs := range []int{8, 16} {
		runtime.GOMAXPROCS(procs)
		for _, g := range []Conv2D{
			wgradConv(3, 20, 30, 26, 23, 1, 1, 1, 1),
			wgradConv(4, 24, 40, 16, 9, 0, 1, 2, 1),
		} {
			g.Winograd = WinogradForce
			x := randF64(rng, g.N*g.C*g.H*g.W)
			dy := randF64(rng, g.N*g.M*g.OH*g.OW)
			want := wgradRef(g, dy, x)
			dw := make([]float32, len(want))
			g.FilterGrad(toF32(dy), toF32(x), dw, false)
			wgradAssertClose(t, want, dw, float64(g.N*g.OH*g.OW)+1)
		}
	}
}

// TestWinogradFilterGradSameBitsAnyWorkers checks that 1 to 4 workers,
// whose items take 4, 2 or 1 rows of the transforms block by block, give
// the same bits (each position sums its blocks in order within one item),
// close to the float64 definition, also when adding to dW.
func TestWinogradFilterGradSameBitsAnyWorkers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	rng := rand.New(rand.NewPCG(19, 20))
	for _, g := range []Conv2D{
		wgradConv(3, 20, 30, 26, 23, 1, 1, 1, 1),
		wgradConv(2, 16, 56, 56, 16, 1, 1, 1, 1), // 28 tiles a row: gathered
	} {
		g.Winograd = WinogradForce
		x := randF64(rng, g.N*g.C*g.H*g.W)
		dy := randF64(rng, g.N*g.M*g.OH*g.OW)
		want := wgradRef(g, dy, x)
		start := toF32(randF64(rng, len(want)))
		var first, firstAcc []float32
		for _, procs := range []int{1, 2, 3, 4} {
			runtime.GOMAXPROCS(procs)
			dw := make([]float32, len(want))
			g.FilterGrad(toF32(dy), toF32(x), dw, false)
			acc := append([]float32(nil), start...)
			g.FilterGrad(toF32(dy), toF32(x), acc, true)
			if first == nil {
				first, firstAcc = dw, acc
				wgradAssertClose(t, want, dw, float64(g.N*g.OH*g.OW)+1)
				continue
			}
			assert.Equal(t, first, dw, "GOMAXPROCS %d", procs)
			assert.Equal(t, firstAcc, acc, "GOMAXPROCS %d, accumulating", procs)
		}
	}
}

// TestWinogradFilterGradPolicy checks that Force runs the Winograd path
// through Conv2D.FilterGrad and agrees with Off (the implicit GEMM), that
// Off never takes it, and that shapes it cannot compute fall back.
func TestWinogradFilterGradPolicy(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	g := wgradConv(4, 24, 12, 10, 20, 1, 1, 1, 1)
	g.Winograd = WinogradOff
	x := toF32(randF64(rng, g.N*g.C*g.H*g.W))
	dy := toF32(randF64(rng, g.N*g.M*g.OH*g.OW))
	assert.False(t, g.wgradUse())
	off := make([]float32, g.M*g.C*9)
	g.FilterGrad(dy, x, off, false)
	g.Winograd = WinogradForce
	assert.True(t, g.wgradUse())
	force := make([]float32, len(off))
	g.FilterGrad(dy, x, force, false)
	want := make([]float64, len(off))
	for i, v := range off {
		want[i] = float64(v)
	}
	wgradAssertClose(t, want, force, float64(g.N*g.OH*g.OW))

	// Auto: ResNet-18's 3×3 stride-1 layers at batch 32 take the
	// transform; too few tiles or channels do not.
	for _, l := range resnet18Layers {
		if l.k == 3 && l.s == 1 {
			r := wgradConv(32, l.c, l.h, l.h, l.m, 1, 1, 1, 1)
			assert.True(t, r.wgradUse(), l.name)
		}
	}
	for name, small := range map[string]Conv2D{
		"8 tiles":     wgradConv(8, 512, 2, 2, 512, 1, 1, 1, 1),
		"3 channels":  wgradConv(32, 3, 32, 32, 16, 1, 1, 1, 1),
		"little work": wgradConv(8, 32, 6, 6, 32, 1, 1, 1, 1),
	} {
		assert.True(t, small.wgradEligible(), name)
		assert.False(t, small.wgradUse(), name)
	}

	// Not 3×3 stride 1: never eligible, whatever the policy.
	for _, other := range []Conv2D{
		{N: 1, C: 2, H: 5, W: 5, M: 2, KH: 3, KW: 3, SH: 2, SW: 2, DH: 1, DW: 1, OH: 2, OW: 2},
		{N: 1, C: 2, H: 5, W: 5, M: 2, KH: 3, KW: 3, SH: 1, SW: 1, DH: 2, DW: 2, OH: 1, OW: 1},
		{N: 1, C: 2, H: 5, W: 5, M: 2, KH: 5, KW: 5, SH: 1, SW: 1, DH: 1, DW: 1, OH: 1, OW: 1},
		{N: 1, C: 2, H: 5, W: 5, M: 2, KH: 3, KW: 1, SH: 1, SW: 1, DH: 1, DW: 1, OH: 3, OW: 5},
	} {
		other.Winograd = WinogradForce
		assert.False(t, other.wgradUse(), "%+v", other)
	}
}

// TestWinogradFilterGradNoAllocs checks that a repeated call allocates
// nothing once its buffers have grown.
func TestWinogradFilterGradNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	g := wgradConv(4, 32, 16, 16, 32, 1, 1, 1, 1)
	g.Winograd = WinogradForce
	x := toF32(randF64(rng, g.N*g.C*g.H*g.W))
	dy := toF32(randF64(rng, g.N*g.M*g.OH*g.OW))
	dw := make([]float32, g.M*g.C*9)
	g.FilterGrad(dy, x, dw, false)
	allocs := testing.AllocsPerRun(10, func() { g.FilterGrad(dy, x, dw, false) })
	assert.Zero(t, allocs)
}

// BenchmarkWinogradFilterGrad times the filter gradient of ResNet-18's
// 3×3 stride-1 layers at batch 32 with the transform (wino) and with the
// implicit GEMM (gemm), in ms of CPU per call and GFLOP/s of the direct
// product's arithmetic.
func BenchmarkWinogradFilterGrad(b *testing.B) {
	var layers []wgradBenchLayer
	for _, l := range resnet18Layers {
		if l.k == 3 && l.s == 1 {
			layers = append(layers, wgradBenchLayer{l.name, 32, l.c, l.h, l.m})
		}
	}
	benchWgrad(b, layers)
}

// BenchmarkWinogradFilterGradResNet50 times ResNet-50's 3×3 stride-1
// layers at 224 px, batch 8 (the training benchmark's shapes), as
// BenchmarkWinogradFilterGrad does.
func BenchmarkWinogradFilterGradResNet50(b *testing.B) {
	benchWgrad(b, []wgradBenchLayer{
		{"c64_56x56", 8, 64, 56, 64},
		{"c128_28x28", 8, 128, 28, 128},
		{"c256_14x14", 8, 256, 14, 256},
		{"c512_7x7", 8, 512, 7, 512},
	})
}

type wgradBenchLayer struct {
	name       string
	n, c, h, m int
}

func benchWgrad(b *testing.B, layers []wgradBenchLayer) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l := range layers {
		n := l.n
		g := wgradConv(n, l.c, l.h, l.h, l.m, 1, 1, 1, 1)
		x := toF32(randF64(rng, n*l.c*l.h*l.h))
		dy := toF32(randF64(rng, n*l.m*g.OH*g.OW))
		dw := make([]float32, l.m*l.c*9)
		flops := 2 * float64(n*l.m*g.OH*g.OW*l.c*9)
		for _, mode := range []struct {
			name   string
			policy WinogradPolicy
		}{{"gemm", WinogradOff}, {"wino", WinogradForce}} {
			b.Run(l.name+"/"+mode.name, func(b *testing.B) {
				g.Winograd = mode.policy
				g.FilterGrad(dy, x, dw, false)
				b.ResetTimer()
				c0 := processCPU()
				for i := 0; i < b.N; i++ {
					g.FilterGrad(dy, x, dw, false)
				}
				cpu := float64(processCPU()-c0) / 1e9
				if cpu > 0 {
					b.ReportMetric(flops*float64(b.N)/cpu/1e9, "cpu-GFLOP/s")
					b.ReportMetric(cpu*1e3/float64(b.N), "cpu-ms/op")
				}
			})
		}
	}
}
