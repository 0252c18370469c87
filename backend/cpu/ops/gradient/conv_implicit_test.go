package gradient

import (
	"fmt"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	"github.com/onnxtrain/onnxtrain/graph"
)

// convGradNode is a ConvBackwardData node with square strides and pads.
func convGradNode(stride int, pads []int) *graph.Node {
	n := &graph.Node{Name: "conv", OpType: "ConvBackwardData", Outputs: []string{"g"}}
	n.SetAttr(&graph.Attr{Name: "strides", Type: graph.AttrInts, Ints: []int64{int64(stride), int64(stride)}})
	n.SetAttr(&graph.Attr{Name: "pads", Type: graph.AttrInts, Ints: []int64{int64(pads[0]), int64(pads[1]), int64(pads[2]), int64(pads[3])}})
	return n
}

// TestConvGradImplicit checks the float32 input and filter gradients of
// ungrouped 2-D convolutions through the implicit GEMM, and through the
// im2col paths with it turned off, against refConv2DGrads (the
// definition, in float64). The shapes cross the GEMM's k blocks, split
// over goroutines, and have window rows that straddle the kernel's
// 16-column strips and images.
func TestConvGradImplicit(t *testing.T) {
	for _, tc := range []struct {
		xs, ws []int
		stride int
		pads   []int
	}{
		{[]int{4, 40, 9, 11}, []int{24, 40, 3, 3}, 1, []int{1, 1, 1, 1}},
		{[]int{3, 30, 10, 9}, []int{20, 30, 3, 3}, 2, []int{1, 0, 2, 1}},
		{[]int{9, 32, 4, 4}, []int{16, 32, 3, 3}, 2, []int{1, 1, 1, 1}},
		{[]int{5, 48, 8, 8}, []int{40, 48, 1, 1}, 2, []int{0, 0, 0, 0}},
		{[]int{2, 3, 20, 20}, []int{16, 3, 7, 7}, 2, []int{3, 3, 3, 3}},
		{[]int{3, 6, 5, 4}, []int{7, 6, 1, 1}, 1, []int{0, 0, 0, 0}},
		// 1×1 windows as one product over the batch: planes of 49
		// positions with two k blocks of channels, one image, an odd
		// strided plane.
		{[]int{4, 300, 7, 7}, []int{24, 300, 1, 1}, 1, []int{0, 0, 0, 0}},
		{[]int{1, 40, 14, 14}, []int{30, 40, 1, 1}, 1, []int{0, 0, 0, 0}},
		{[]int{2, 20, 9, 7}, []int{10, 20, 1, 1}, 2, []int{0, 0, 0, 0}},
		{[]int{3, 20, 7, 9}, []int{12, 20, 3, 2}, 1, []int{2, 0, 0, 1}},
		{[]int{33, 64, 2, 2}, []int{40, 64, 3, 3}, 1, []int{1, 1, 1, 1}},
		{[]int{2, 8, 6, 16}, []int{10, 8, 3, 3}, 1, []int{1, 1, 1, 1}},
		// Stride 2 by stride phase (nn/strided_grad.go: W small
		// beside dX, 16 input channels), an odd plane with uneven pads.
		{[]int{4, 16, 20, 18}, []int{8, 16, 3, 3}, 2, []int{1, 1, 1, 1}},
		{[]int{3, 24, 17, 21}, []int{10, 24, 3, 3}, 2, []int{1, 0, 2, 1}},
		// Stride 3 over four channels (too few for the phases) and
		// with a begin pad the phase split refuses: the GEMM into
		// columns and col2im.
		{[]int{3, 4, 10, 11}, []int{7, 4, 2, 2}, 3, []int{0, 0, 1, 1}},
		{[]int{3, 4, 10, 11}, []int{7, 4, 2, 2}, 3, []int{1, 0, 1, 1}},
	} {
		xs, ws, stride, pads := tc.xs, tc.ws, tc.stride, tc.pads
		oh, ow := (xs[2]+pads[0]+pads[2]-ws[2])/stride+1, (xs[3]+pads[1]+pads[3]-ws[3])/stride+1
		dys := []int{xs[0], ws[0], oh, ow}
		rng := rand.New(rand.NewPCG(11, uint64(xs[1])))
		rnd := func(k int) []float64 {
			v := make([]float64, k)
			for i := range v {
				v[i] = rng.NormFloat64()
			}
			return v
		}
		x, w, dy := rnd(product(xs)), rnd(product(ws)), rnd(product(dys))
		wantDX, wantDW := refConv2DGrads(x, w, dy, xs, ws, stride, pads)
		for _, implicit := range []bool{true, false} {
			t.Run(fmt.Sprintf("x%v/w%v/stride%d/implicit=%v", xs, ws, stride, implicit), func(t *testing.T) {
				saved := implicitConvGrad
				implicitConvGrad = implicit
				defer func() { implicitConvGrad = saved }()
				p, err := newConvGradPlan(convGradNode(stride, pads), xs, ws, false)
				require.NoError(t, err)
				require.Equal(t, dys, p.dyShape)
				_, ok := p.implicit()
				require.Equal(t, implicit, ok)
				dx32, dw32 := make([]float32, len(x)), make([]float32, len(w))
				// Where the kernel takes its output uncleared
				// (overwrites), it comes filled with NaN here.
				poisoned := 0
				for _, o := range []struct {
					out    []float32
					filter bool
				}{{dx32, false}, {dw32, true}} {
					if p.overwrites(graph.Float32, false, o.filter) {
						poisoned++
						for i := range o.out {
							o.out[i] = float32(math.NaN())
						}
					}
				}
				if implicit {
					// The filter gradient always; the input
					// gradient except through col2im.
					require.GreaterOrEqual(t, poisoned, 1)
				} else {
					require.Zero(t, poisoned)
				}
				convGradRun(p, nn.WinogradAuto, false, false, to32(dy), to32(w), dx32)
				convGradRun(p, nn.WinogradAuto, false, true, to32(dy), to32(x), dw32)
				assertAllClose(t, wantDX, to64(dx32), 2e-4, "dX float32")
				assertAllClose(t, wantDW, to64(dw32), 2e-4, "dW float32")
			})
		}
	}
}

// TestConvGradOverwrites checks which Conv gradients take their output
// storage uncleared (convGradPlan.overwrites): float32 passes of package
// nn's implicit GEMM only, not col2im's scatter-add (which adds into a
// zeroed dX), float64, grouped windows or ConvTranspose.
func TestConvGradOverwrites(t *testing.T) {
	for _, tc := range []struct {
		name         string
		xs, ws       []int
		stride       int
		pads         []int
		group        int
		transpose    bool
		dt           graph.DType
		data, filter bool // want, for the input and the filter gradient
	}{
		{"3x3", []int{2, 8, 9, 9}, []int{6, 8, 3, 3}, 1, []int{1, 1, 1, 1}, 1, false, graph.Float32, true, true},
		{"1x1_stride2", []int{2, 8, 9, 9}, []int{6, 8, 1, 1}, 2, []int{0, 0, 0, 0}, 1, false, graph.Float32, true, true},
		{"phased_3x3s2", []int{4, 16, 20, 18}, []int{8, 16, 3, 3}, 2, []int{1, 1, 1, 1}, 1, false, graph.Float32, true, true},
		// ResNet-50's 3×3/2 at 28×28: the input gradient through col2im.
		{"col2im_3x3s2", []int{8, 256, 28, 28}, []int{256, 256, 3, 3}, 2, []int{1, 1, 1, 1}, 1, false, graph.Float32, false, true},
		{"float64", []int{2, 8, 9, 9}, []int{6, 8, 3, 3}, 1, []int{1, 1, 1, 1}, 1, false, graph.Float64, false, false},
		{"grouped", []int{2, 8, 9, 9}, []int{6, 4, 3, 3}, 2, []int{1, 1, 1, 1}, 2, false, graph.Float32, false, false},
		{"transpose", []int{2, 8, 9, 9}, []int{8, 6, 3, 3}, 1, []int{1, 1, 1, 1}, 1, true, graph.Float32, false, false},
		{"empty_batch", []int{0, 8, 9, 9}, []int{6, 8, 3, 3}, 1, []int{1, 1, 1, 1}, 1, false, graph.Float32, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := convGradNode(tc.stride, tc.pads)
			n.SetAttr(&graph.Attr{Name: "group", Type: graph.AttrInt, I: int64(tc.group)})
			p, err := newConvGradPlan(n, tc.xs, tc.ws, tc.transpose)
			require.NoError(t, err)
			require.Equal(t, tc.data, p.overwrites(tc.dt, tc.transpose, false), "input gradient")
			require.Equal(t, tc.filter, p.overwrites(tc.dt, tc.transpose, true), "filter gradient")
		})
	}
}

// BenchmarkConvGradResNet64 times the input and filter gradients of the
// convolutions of ResNet-18 on 3×64×64 images, batch 32, through the
// implicit GEMM and through im2col; cpu-ms/op is the CPU time of the
// process per operation (steadier than wall time on a loaded machine).
func BenchmarkConvGradResNet64(b *testing.B) {
	benchConvGrad(b, 32, []convGradBenchLayer{
		{"stem_7x7s2", 3, 64, 64, 7, 2, 3},
		{"l1_3x3_64", 64, 16, 64, 3, 1, 1},
		{"l2_3x3s2_128", 64, 16, 128, 3, 2, 1},
		{"l2_3x3_128", 128, 8, 128, 3, 1, 1},
		{"l2_1x1s2_128", 64, 16, 128, 1, 2, 0},
		{"l3_3x3s2_256", 128, 8, 256, 3, 2, 1},
		{"l3_1x1s2_256", 128, 8, 256, 1, 2, 0},
		{"l3_3x3_256", 256, 4, 256, 3, 1, 1},
		{"l4_3x3s2_512", 256, 4, 512, 3, 2, 1},
		{"l4_1x1s2_512", 256, 4, 512, 1, 2, 0},
		{"l4_3x3_512", 512, 2, 512, 3, 1, 1},
	})
}

// BenchmarkConvGradResNet50Strided times the gradients of ResNet-50's
// strided 3×3 layers and its 7×7/2 stem at 224 px, batch 8 (the training
// benchmark's shapes), through the implicit GEMM (the input gradient by
// stride phase) and through im2col; run with -cpu 1 to read cpu-ms/op as
// one core's.
func BenchmarkConvGradResNet50Strided(b *testing.B) {
	benchConvGrad(b, 8, []convGradBenchLayer{
		{"stem_7x7s2", 3, 224, 64, 7, 2, 3},
		{"l2_3x3s2_128", 128, 56, 128, 3, 2, 1},
		{"l3_3x3s2_256", 256, 28, 256, 3, 2, 1},
		{"l4_3x3s2_512", 512, 14, 512, 3, 2, 1},
	})
}

// convGradBenchLayer is a square convolution: c input channels of h×h, m
// output channels, a k×k window at stride s with pad on every side.
type convGradBenchLayer struct {
	name               string
	c, h, m, k, s, pad int
}

func benchConvGrad(b *testing.B, batch int, layers []convGradBenchLayer) {
	for _, l := range layers {
		xs, ws := []int{batch, l.c, l.h, l.h}, []int{l.m, l.c, l.k, l.k}
		p, err := newConvGradPlan(convGradNode(l.s, []int{l.pad, l.pad, l.pad, l.pad}), xs, ws, false)
		require.NoError(b, err)
		rng := rand.New(rand.NewPCG(1, 1))
		rnd := func(k int) []float32 {
			v := make([]float32, k)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			return v
		}
		x, w, dy := rnd(product(xs)), rnd(product(ws)), rnd(product(p.dyShape))
		dx, dw := make([]float32, len(x)), make([]float32, len(w))
		for _, filter := range []bool{false, true} {
			for _, implicit := range []bool{true, false} {
				if !filter && l.name == "stem_7x7s2" {
					continue // the model's input needs no gradient
				}
				what := "data"
				if filter {
					what = "filter"
				}
				b.Run(fmt.Sprintf("%s/%s/implicit=%v", l.name, what, implicit), func(b *testing.B) {
					saved := implicitConvGrad
					implicitConvGrad = implicit
					defer func() { implicitConvGrad = saved }()
					cpu0 := processCPU()
					for i := 0; i < b.N; i++ {
						if filter {
							clear(dw)
							convGradRun(p, nn.WinogradAuto, false, true, dy, x, dw)
						} else {
							clear(dx)
							convGradRun(p, nn.WinogradAuto, false, false, dy, w, dx)
						}
					}
					b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
				})
			}
		}
	}
}

// processCPU returns the CPU time this process has used, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
