package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// implicitCases are ungrouped 2-D convolutions that the implicit GEMM
// runs, sized so that the products cross the GEMM's k blocks (C·KH·KW >
// 256), split over goroutines (M·N·K > 128·128·64), and have window rows
// that are not multiples of the kernel's 16-column strips, so that strips
// straddle rows and images.
var implicitCases = []convCase{
	{"implicit_k_blocks_parallel", []int{3, 40, 9, 11}, []int{13, 40, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"implicit_stride2_dilation", []int{4, 30, 13, 10}, []int{20, 30, 3, 2}, 1, []int{2, 1}, []int{2, 3}, []int{2, 0, 1, 3}, false},
	{"implicit_stem_7x7s2", []int{2, 3, 20, 20}, []int{16, 3, 7, 7}, 1, []int{2, 2}, []int{1, 1}, []int{3, 3, 3, 3}, true},
	{"implicit_2x2_rows", []int{9, 64, 4, 4}, []int{32, 64, 3, 3}, 1, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"implicit_1x1_stride2", []int{6, 48, 8, 8}, []int{40, 48, 1, 1}, 1, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}, false},
	{"implicit_runs_of_16", []int{2, 8, 5, 32}, []int{12, 8, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"implicit_runs_of_16_stride2", []int{2, 3, 9, 64}, []int{16, 3, 7, 7}, 1, []int{2, 2}, []int{1, 1}, []int{3, 3, 3, 3}, false},
	{"implicit_rows_of_2", []int{9, 24, 2, 2}, []int{10, 24, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"implicit_rows_of_4", []int{5, 20, 4, 4}, []int{12, 20, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"implicit_rows_of_8", []int{3, 16, 8, 8}, []int{10, 16, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, false},
	// Output rows of 7 and 6 positions (runs packed 8 wide where the
	// next runs overwrite the extra lanes), past a k block.
	{"implicit_rows_of_7", []int{5, 40, 7, 7}, []int{24, 40, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"implicit_rows_of_6", []int{3, 30, 6, 8}, []int{12, 30, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 0, 0}, false},
	// Output rows of 12, 14 and 28 positions: strips of 16 cut into
	// runs of 12+4, 8+8 and 4+12, of 14+2 … 2+14, and of 16, 12+4, 8+8,
	// 4+12 (ResNet-50's stride-2 56×56 layer): runs of 4-7 packed 8 wide
	// and of 9-15 packed 16 wide where the next run overwrites the extra
	// lanes, the strip's last run exactly.
	{"implicit_rows_of_12", []int{2, 9, 12, 12}, []int{12, 9, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"implicit_rows_of_14_stride2", []int{2, 30, 28, 28}, []int{16, 30, 3, 3}, 1, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}, false},
	{"implicit_rows_of_28_stride2", []int{1, 8, 56, 56}, []int{16, 8, 3, 3}, 1, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"implicit_pad_beyond_image", []int{2, 5, 3, 2}, []int{7, 5, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{3, 2, 2, 3}, true},
	// Column strides above 1 with phase-split rows: three phases all
	// read (dilation 2 over stride 3), one phase of two read (dilation 2
	// over stride 2, every other row unread), and two phases split
	// from an even left pad and an odd image width.
	{"implicit_phases_stride3_dilation2", []int{2, 5, 11, 17}, []int{6, 5, 2, 3}, 1, []int{1, 3}, []int{1, 2}, []int{0, 1, 1, 2}, true},
	{"implicit_phases_one_of_two", []int{3, 4, 9, 13}, []int{8, 4, 3, 3}, 1, []int{2, 2}, []int{2, 2}, []int{2, 1, 1, 2}, false},
	// Padded planes above padChunk/4 elements (cleared border by
	// border, not as a whole).
	{"implicit_large_planes", []int{2, 3, 40, 33}, []int{5, 3, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 2, 1, 0}, true},
	{"implicit_phases_even_left_pad", []int{2, 6, 10, 15}, []int{18, 6, 3, 4}, 1, []int{2, 2}, []int{1, 1}, []int{1, 2, 0, 1}, true},
	// 1×1 windows (pointwise.go): one product over the batch whose
	// columns or shared dimension cross image boundaries. Planes of 49
	// and 196 positions (not whole 16-column strips) with more than one
	// k block of channels; planes of 400 (whole strips, runs of 8 for
	// the filter gradient); one image; odd sizes; strided windows that
	// read a compact copy of X and scatter dX back; a dilation (which
	// a 1×1 window ignores); and an end pad, which reads outside the
	// image and so takes the general implicit path.
	{"pointwise_7x7_k_blocks", []int{3, 300, 7, 7}, []int{40, 300, 1, 1}, 1, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}, true},
	{"pointwise_14x14_parallel", []int{5, 64, 14, 14}, []int{70, 64, 1, 1}, 1, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}, false},
	{"pointwise_20x20_strips", []int{2, 20, 20, 20}, []int{24, 20, 1, 1}, 1, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}, true},
	{"pointwise_batch1_odd", []int{1, 17, 5, 3}, []int{9, 17, 1, 1}, 1, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}, false},
	{"1x1_stride2_odd", []int{3, 33, 9, 7}, []int{20, 33, 1, 1}, 1, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}, true},
	{"1x1_stride3x2_dilation", []int{2, 10, 8, 9}, []int{6, 10, 1, 1}, 1, []int{3, 2}, []int{2, 3}, []int{0, 0, 0, 0}, false},
	{"1x1_stride2_k_blocks", []int{4, 280, 6, 6}, []int{32, 280, 1, 1}, 1, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}, false},
	// Stride-2 rows long enough for the assembly's blocks of 8 read
	// positions (19 on an odd width, 20 on an even one, 16: whole
	// blocks, nothing left for the Go loop), with a row stride of 3 on
	// the second.
	{"1x1_stride2_rows_of_19", []int{3, 12, 11, 37}, []int{10, 12, 1, 1}, 1, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}, false},
	{"1x1_stride3x2_rows_of_20", []int{2, 9, 8, 40}, []int{7, 9, 1, 1}, 1, []int{3, 2}, []int{1, 1}, []int{0, 0, 0, 0}, true},
	{"1x1_stride2_rows_of_16", []int{2, 6, 6, 32}, []int{5, 6, 1, 1}, 1, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}, false},
	{"1x1_end_pad", []int{2, 5, 4, 4}, []int{3, 5, 1, 1}, 1, []int{1, 1}, []int{1, 1}, []int{0, 0, 1, 1}, true},
}

// TestConv2DFilterGradMatchesDirect checks Conv2D.FilterGrad (float32)
// against the weight gradient summed from its definition in float64,
// dW[m, c, a, b] = Σ dy[n, m, oh, ow]·x[n, c, oh·SH + a·DH − PadTop,
// ow·SW + b·DW − PadLeft], on the implicit cases (strided, dilated,
// phase-split and padded windows), both overwriting and accumulating.
func TestConv2DFilterGradMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range implicitCases {
		t.Run(tc.name, func(t *testing.T) {
			g, out := tc.conv2D()
			n, c, h, w, m, kh, kw := g.N, g.C, g.H, g.W, g.M, g.KH, g.KW
			x, dy := randF64(rng, prod(tc.x)), randF64(rng, n*m*out[0]*out[1])
			want := make([]float64, prod(tc.w))
			for i := 0; i < n; i++ {
				for mi := 0; mi < m; mi++ {
					for oh := 0; oh < out[0]; oh++ {
						for ow := 0; ow < out[1]; ow++ {
							d := dy[((i*m+mi)*out[0]+oh)*out[1]+ow]
							for ci := 0; ci < c; ci++ {
								for a := 0; a < kh; a++ {
									r := oh*g.SH + a*g.DH - g.PadTop
									if r < 0 || r >= h {
										continue
									}
									for b := 0; b < kw; b++ {
										col := ow*g.SW + b*g.DW - g.PadLeft
										if col < 0 || col >= w {
											continue
										}
										want[((mi*c+ci)*kh+a)*kw+b] += d * x[((i*c+ci)*h+r)*w+col]
									}
								}
							}
						}
					}
				}
			}
			dw := make([]float32, len(want))
			for i := range dw {
				dw[i] = float32(math.NaN()) // overwritten, never read
			}
			g.FilterGrad(toF32(dy), toF32(x), dw, false)
			assertClose(t, want, f32(tc.w, dw...), 1e-4)
			// Accumulating adds the same gradient again.
			g.FilterGrad(toF32(dy), toF32(x), dw, true)
			for i := range want {
				want[i] *= 2
			}
			assertClose(t, want, f32(tc.w, dw...), 1e-4)
		})
	}
}

// TestConvImplicitMatchesDirect checks the implicit-GEMM forward
// convolution (float32) against refConv, the definition summed in float64.
func TestConvImplicitMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range implicitCases {
		t.Run(tc.name, func(t *testing.T) {
			x, w := randF64(rng, prod(tc.x)), randF64(rng, prod(tc.w))
			var b []float64
			if tc.bias {
				b = randF64(rng, tc.w[0])
			}
			_, out := tc.conv2D()
			want := refConv(x, tc.x, w, tc.w, b, 1, convGeom{tc.strides, tc.dilations, tc.pads[:2]}, out)
			n := testNode("Conv", 1, aInts("strides", toI64(tc.strides)...),
				aInts("dilations", toI64(tc.dilations)...), aInts("pads", toI64(tc.pads)...))
			in := []*graph.Tensor{f32(tc.x, toF32(x)...), f32(tc.w, toF32(w)...)}
			if b != nil {
				in = append(in, f32([]int{tc.w[0]}, toF32(b)...))
			}
			y := mustRun(t, 17, n, in...)[0]
			assertClose(t, want, y, 1e-4)
		})
	}
}

// TestConv2DForwardOverwrites checks that Conv2D.Forward without
// accumulate writes every output element and reads none (the Conv
// kernel then takes its output storage uncleared, convOverwrites): y
// filled with NaN beforehand, on the implicit cases (the general
// implicit GEMM, 1×1 windows at unit and larger strides, phase-split
// rows) and on Winograd's transform, against refConv.
func TestConv2DForwardOverwrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	cases := append([]convCase{
		{"winograd_3x3", []int{3, 20, 9, 11}, []int{13, 20, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, false},
		{"winograd_3x3_uneven_pads", []int{2, 140, 13, 11}, []int{70, 140, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 0, 2, 1}, false},
	}, implicitCases...)
	for _, tc := range cases {
		for _, pol := range []WinogradPolicy{WinogradOff, WinogradForce} {
			t.Run(fmt.Sprintf("%s/winograd%d", tc.name, pol), func(t *testing.T) {
				g, out := tc.conv2D()
				n, m := g.N, g.M
				g.Winograd = pol
				x, wt := randF64(rng, prod(tc.x)), randF64(rng, prod(tc.w))
				want := refConv(x, tc.x, wt, tc.w, nil, 1, convGeom{tc.strides, tc.dilations, tc.pads[:2]}, out)
				y := make([]float32, n*m*out[0]*out[1])
				for i := range y {
					y[i] = float32(math.NaN())
				}
				g.Forward(toF32(x), toF32(wt), y, false)
				assertClose(t, want, f32([]int{n, m, out[0], out[1]}, y...), 1e-4)
			})
		}
	}
}

// TestConvOverwrites checks which Conv nodes take their output storage
// uncleared (convOverwrites): the implicit GEMM's route only.
func TestConvOverwrites(t *testing.T) {
	for _, tc := range []struct {
		name     string
		x, w     []int
		group    int
		dt       graph.DType
		implicit bool
		want     bool
	}{
		{"3x3", []int{2, 4, 8, 8}, []int{6, 4, 3, 3}, 1, graph.Float32, true, true},
		{"1x1_stride2", []int{2, 4, 8, 8}, []int{6, 4, 1, 1}, 1, graph.Float32, true, true},
		{"implicit_off", []int{2, 4, 8, 8}, []int{6, 4, 3, 3}, 1, graph.Float32, false, false},
		{"grouped", []int{2, 4, 8, 8}, []int{6, 2, 3, 3}, 2, graph.Float32, true, false},
		{"depthwise", []int{2, 4, 8, 8}, []int{4, 1, 3, 3}, 4, graph.Float32, true, false},
		{"float64", []int{2, 4, 8, 8}, []int{6, 4, 3, 3}, 1, graph.Float64, true, false},
		{"1d", []int{2, 4, 8}, []int{6, 4, 3}, 1, graph.Float32, true, false},
		{"no_channels", []int{2, 0, 8, 8}, []int{6, 0, 3, 3}, 1, graph.Float32, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := implicitConv
			implicitConv = tc.implicit
			defer func() { implicitConv = saved }()
			x, err := graph.NewTensor(tc.dt, tc.x)
			if err != nil {
				t.Fatal(err)
			}
			w, err := graph.NewTensor(tc.dt, tc.w)
			if err != nil {
				t.Fatal(err)
			}
			n := testNode("Conv", 1, aInt("group", int64(tc.group)))
			cs, err := readConvShape(n, x, w)
			if err != nil {
				t.Fatal(err)
			}
			if got := convOverwrites(cs, x, w); got != tc.want {
				t.Errorf("convOverwrites = %v, want %v", got, tc.want)
			}
		})
	}
}

// resnet64Layers are the convolutions of torchvision's ResNet-18 on
// 3×64×64 images, batch 32 (the issue-4 benchmark case).
var resnet64Layers = []struct {
	name               string
	c, h, m, k, s, pad int
}{
	{"stem_7x7s2", 3, 64, 64, 7, 2, 3},
	{"l1_3x3_64", 64, 16, 64, 3, 1, 1},
	{"l2_3x3s2_128", 64, 16, 128, 3, 2, 1},
	{"l2_3x3_128", 128, 8, 128, 3, 1, 1},
	{"l2_1x1s2_128", 64, 16, 128, 1, 2, 0},
	{"l3_3x3_256", 256, 4, 256, 3, 1, 1},
	{"l4_3x3_512", 512, 2, 512, 3, 1, 1},
}

// BenchmarkConvResNet64 times the forward convolutions of the ResNet-18
// benchmark case through the implicit GEMM and through im2col.
func BenchmarkConvResNet64(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	const batch = 32
	for _, l := range resnet64Layers {
		for _, implicit := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/implicit=%v", l.name, implicit), func(b *testing.B) {
				saved := implicitConv
				implicitConv = implicit
				defer func() { implicitConv = saved }()
				x := f32([]int{batch, l.c, l.h, l.h}, toF32(randF64(rng, batch*l.c*l.h*l.h))...)
				w := f32([]int{l.m, l.c, l.k, l.k}, toF32(randF64(rng, l.m*l.c*l.k*l.k))...)
				p := int64(l.pad)
				n := testNode("Conv", 1, aInts("strides", int64(l.s), int64(l.s)), aInts("pads", p, p, p, p))
				oh := (l.h+2*l.pad-l.k)/l.s + 1
				flops := 2.0 * float64(batch*l.m*oh*oh*l.c*l.k*l.k)
				ctx := &kern.Context{Opset: 17}
				b.ResetTimer()
				cpu0 := processCPU()
				for i := 0; i < b.N; i++ {
					if _, err := convKernel(ctx, n, []*graph.Tensor{x, w}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
			})
		}
	}
}

// processCPU returns the user and system CPU time this process has used,
// in nanoseconds: on a machine that other jobs load, CPU time per
// operation is steadier than wall time.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestConv2DInputGradMatchesDirect checks Conv2D.InputGrad (float32)
// against the input gradient summed from its definition in float64,
// dX[n, c, oh·SH + a·DH − PadTop, ow·SW + b·DW − PadLeft] +=
// dy[n, m, oh, ow]·W[m, c, a, b], on the implicit cases it accepts
// (unit strides and dilations, pads below the kernel; 1×1 windows
// without padding at any stride; strided windows by stride phase), among them
// non-square kernels with uneven pads, where a wrongly flipped tap
// would show.
func TestConv2DInputGradMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	// The phased path on every geometry it handles (where it runs is
	// a speed choice).
	saved := phasedByCost
	phasedByCost = false
	defer func() { phasedByCost = saved }()
	cases := append([]convCase{
		{"input_grad_3x2_uneven_pads", []int{3, 7, 9, 7}, []int{11, 7, 3, 2}, 1, []int{1, 1}, []int{1, 1}, []int{2, 0, 0, 1}, false},
		{"input_grad_2x5", []int{2, 9, 6, 12}, []int{13, 9, 2, 5}, 1, []int{1, 1}, []int{1, 1}, []int{1, 3, 0, 2}, false},
		// Strided windows by stride phase (strided_grad.go): a 3×3/2
		// whose largest phase crosses k blocks (70·4 taps) on odd
		// planes, split over goroutines; one image without padding;
		// stride 3 over a 2×2 kernel (phases with no taps, rows past
		// the last window: zero); a stride on one axis only with
		// uneven pads; a 5×4 kernel at strides 3×2; a 7×7/2 stem.
		{"phased_3x3s2_k_blocks_odd", []int{3, 20, 13, 11}, []int{70, 20, 3, 3}, 1, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}, false},
		{"phased_3x3s2_parallel", []int{4, 32, 16, 16}, []int{48, 32, 3, 3}, 1, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}, false},
		{"phased_batch1_no_pad", []int{1, 5, 8, 9}, []int{6, 5, 3, 3}, 1, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}, false},
		{"phased_stride3_kernel2", []int{2, 4, 10, 11}, []int{5, 4, 2, 2}, 1, []int{3, 3}, []int{1, 1}, []int{0, 0, 0, 0}, false},
		{"phased_stride2x1_uneven_pads", []int{2, 6, 9, 8}, []int{7, 6, 3, 2}, 1, []int{2, 1}, []int{1, 1}, []int{1, 0, 2, 1}, false},
		{"phased_5x4_stride3x2", []int{2, 3, 15, 14}, []int{8, 3, 5, 4}, 1, []int{3, 2}, []int{1, 1}, []int{2, 1, 1, 2}, false},
		{"phased_stem_7x7s2_odd", []int{2, 3, 23, 21}, []int{16, 3, 7, 7}, 1, []int{2, 2}, []int{1, 1}, []int{3, 3, 3, 3}, false},
	}, implicitCases...)
	tested := 0
	for _, tc := range cases {
		g, out := tc.conv2D()
		n, c, h, w, m, kh, kw := g.N, g.C, g.H, g.W, g.M, g.KH, g.KW
		if !g.InputGradImplicit(tc.pads[2], tc.pads[3]) {
			continue
		}
		tested++
		t.Run(tc.name, func(t *testing.T) {
			wt, dy := randF64(rng, prod(tc.w)), randF64(rng, n*m*out[0]*out[1])
			want := make([]float64, prod(tc.x))
			for i := 0; i < n; i++ {
				for mi := 0; mi < m; mi++ {
					for oh := 0; oh < out[0]; oh++ {
						for ow := 0; ow < out[1]; ow++ {
							d := dy[((i*m+mi)*out[0]+oh)*out[1]+ow]
							for ci := 0; ci < c; ci++ {
								for a := 0; a < kh; a++ {
									r := oh*g.SH + a*g.DH - g.PadTop
									if r < 0 || r >= h {
										continue
									}
									for b := 0; b < kw; b++ {
										col := ow*g.SW + b*g.DW - g.PadLeft
										if col < 0 || col >= w {
											continue
										}
										want[((i*c+ci)*h+r)*w+col] += d * wt[((mi*c+ci)*kh+a)*kw+b]
									}
								}
							}
						}
					}
				}
			}
			dx := make([]float32, len(want))
			for i := range dx {
				dx[i] = float32(math.NaN()) // InputGrad overwrites dX
			}
			g.InputGrad(toF32(dy), toF32(wt), dx)
			assertClose(t, want, f32(tc.x, dx...), 1e-4)
			if n > 2 {
				// The phased path two images at a time (the
				// last chunk one or two).
				savedChunk := phasedChunk
				phasedChunk = 2 * c * h * w
				defer func() { phasedChunk = savedChunk }()
				for i := range dx {
					dx[i] = float32(math.NaN())
				}
				g.InputGrad(toF32(dy), toF32(wt), dx)
				assertClose(t, want, f32(tc.x, dx...), 1e-4)
			}
		})
	}
	if tested < 5 {
		t.Fatalf("only %d cases took the implicit input gradient", tested)
	}
}

// TestInputGradPhasedRefuses checks the strided windows that the phased
// input gradient leaves to package gradient's im2col path: a dilation, a
// begin pad that leaves a phase's correlation a negative pad (pad 1 over
// a 2-tap kernel at stride 2: phase 0 has one tap and starts a row
// late), and more than maxPhases phases.
func TestInputGradPhasedRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    Conv2D
	}{
		{"dilation", Conv2D{N: 2, C: 3, H: 9, W: 9, M: 4, KH: 3, KW: 3, SH: 2, SW: 2, DH: 2, DW: 1, PadTop: 1, PadLeft: 1, OH: 4, OW: 5}},
		{"negative_phase_pad", Conv2D{N: 2, C: 3, H: 6, W: 6, M: 4, KH: 2, KW: 2, SH: 2, SW: 2, DH: 1, DW: 1, PadTop: 1, PadLeft: 1, OH: 4, OW: 4}},
		{"stride_5x5", Conv2D{N: 1, C: 3, H: 20, W: 20, M: 4, KH: 5, KW: 5, SH: 5, SW: 5, DH: 1, DW: 1, OH: 4, OW: 4}},
	} {
		if tc.g.InputGradImplicit(1, 1) {
			t.Errorf("%s: InputGradImplicit accepts %+v", tc.name, tc.g)
		}
		if ok, _, _, _ := tc.g.PhasedInputGradScratch(); ok {
			t.Errorf("%s: PhasedInputGradScratch accepts %+v", tc.name, tc.g)
		}
	}
	// ResNet-50's 3×3/2 at 56×56: dY (28×28) padded by one row and
	// column at the end, and the four phases' products (28×28 each).
	g := Conv2D{N: 8, C: 128, H: 56, W: 56, M: 128, KH: 3, KW: 3, SH: 2, SW: 2, DH: 1, DW: 1, PadTop: 1, PadLeft: 1, OH: 28, OW: 28}
	ok, pad, out, wts := g.PhasedInputGradScratch()
	// (The phases' products of one image at a time: 128·56·56 is above
	// phasedChunk.)
	if !ok || pad != 8*128*29*29 || out != 128*56*56 || wts != 128*128*9 {
		t.Errorf("ResNet-50 3×3/2: PhasedInputGradScratch = %v, %d, %d, %d; want true, %d, %d, %d",
			ok, pad, out, wts, 8*128*29*29, 128*56*56, 128*128*9)
	}
	// Where the phases do not pay, im2col: an RGB stem (three rows per
	// phase product), ResNet-50's 3×3/2 at 28×28 and 14×14 and
	// ResNet-18's at 16×16, batch 32 (W above an eighth of dX).
	for _, g := range []Conv2D{
		{N: 32, C: 64, H: 16, W: 16, M: 128, KH: 3, KW: 3, SH: 2, SW: 2, DH: 1, DW: 1, PadTop: 1, PadLeft: 1, OH: 8, OW: 8},
		{N: 8, C: 3, H: 224, W: 224, M: 64, KH: 7, KW: 7, SH: 2, SW: 2, DH: 1, DW: 1, PadTop: 3, PadLeft: 3, OH: 112, OW: 112},
		{N: 8, C: 256, H: 28, W: 28, M: 256, KH: 3, KW: 3, SH: 2, SW: 2, DH: 1, DW: 1, PadTop: 1, PadLeft: 1, OH: 14, OW: 14},
		{N: 8, C: 512, H: 14, W: 14, M: 512, KH: 3, KW: 3, SH: 2, SW: 2, DH: 1, DW: 1, PadTop: 1, PadLeft: 1, OH: 7, OW: 7},
	} {
		if g.InputGradImplicit(1, 1) {
			t.Errorf("%+v: the input gradient takes the phased path", g)
		}
	}
}

// conv2D is the case's single-group geometry and its output size (OH, OW).
func (tc convCase) conv2D() (Conv2D, []int) {
	out := make([]int, 2)
	for j := 0; j < 2; j++ {
		dk := (tc.w[j+2]-1)*tc.dilations[j] + 1
		out[j] = (tc.x[j+2]+tc.pads[j]+tc.pads[j+2]-dk)/tc.strides[j] + 1
	}
	return Conv2D{N: tc.x[0], C: tc.x[1], H: tc.x[2], W: tc.x[3], M: tc.w[0], KH: tc.w[2], KW: tc.w[3],
		SH: tc.strides[0], SW: tc.strides[1], DH: tc.dilations[0], DW: tc.dilations[1],
		PadTop: tc.pads[0], PadLeft: tc.pads[1], OH: out[0], OW: out[1]}, out
}
