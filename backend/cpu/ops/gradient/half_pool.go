package gradient

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	"github.com/onnxtrain/onnxtrain/graph"
)

// MaxPoolGrad on half values (mixed precision): the windows' maxima are
// found in X's bfloat16/float16 values and dy is summed per input element
// in float32, one plane at a time, so the step holds no float32 copy of X
// or dX (see kern.AdaptHalfKernels).

func init() { kern.RegisterNativeHalf(graph.InternalDomain, "MaxPoolGrad", maxPoolGradHalf) }

func maxPoolGradHalf(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, bool, error) {
	if len(in) != 2 || in[0] == nil || in[1] == nil {
		return nil, false, nil // the Indices form goes through the adapter
	}
	dy, x := in[0], in[1]
	if dy.DType != x.DType || (x.DType != graph.BFloat16 && x.DType != graph.Float16) {
		return nil, false, nil
	}
	dys, ok1 := dy.Data.([]uint16)
	xs, ok2 := x.Data.([]uint16)
	if !ok1 || !ok2 {
		return nil, false, nil
	}
	w, err := poolGradWindow(n, x.Shape)
	if err != nil {
		return nil, false, err
	}
	want := append([]int{x.Shape[0], x.Shape[1]}, w.out...)
	if !graph.SameShape(dy.Shape, want) {
		return nil, false, n.Errorf("gradient has shape %v, the forward output %v", dy.Shape, want)
	}
	dx, err := kern.NewUninit(n, x.DType, x.Shape)
	if err != nil {
		return nil, false, err
	}
	dxs := dx.Data.([]uint16)
	d := x.DType
	plan := newPoolGradPlan(w)
	planes := x.Shape[0] * x.Shape[1]
	inSize, outSize := w.inSize, w.outSize
	if len(xs) < planes*inSize || len(dys) < planes*outSize || len(dxs) < planes*inSize {
		return nil, false, n.Errorf("tensor sizes do not match shapes %v and %v", x.Shape, dy.Shape)
	}
	workers := gradWorkers(planes, outSize*max(w.kernelSize, 1))
	acc := make([][]float32, workers) // one float32 plane per worker
	simple := simplePool2D(w)
	nn.ParallelItems(planes, workers, false, func(worker, c int) {
		if acc[worker] == nil {
			acc[worker] = make([]float32, inSize)
		}
		sum := acc[worker]
		clear(sum)
		xp := xs[c*inSize : (c+1)*inSize]
		dyp := dys[c*outSize : (c+1)*outSize]
		if simple {
			pool2DArgmax(w, d, xp, func(out, at int) { sum[at] += kern.HalfToFloat32At(d, dyp[out]) })
		} else {
			plan.forWindows(func(out int, taps []int, _ int) {
				best, at := float32(math.Inf(-1)), -1
				for _, t := range taps {
					if v := kern.HalfToFloat32At(d, xp[t]); v > best || at < 0 {
						best, at = v, t
					}
				}
				if at >= 0 {
					sum[at] += kern.HalfToFloat32At(d, dyp[out])
				}
			})
		}
		dxp := dxs[c*inSize : (c+1)*inSize]
		if d == graph.BFloat16 {
			kern.Float32sToBFloat16s(dxp, sum)
		} else {
			kern.Float32sToFloat16s(dxp, sum)
		}
	})
	return []*graph.Tensor{dx}, true, nil
}

func init() { kern.RegisterNativeHalf("", "MaxPool", maxPoolHalf) }

// maxPoolHalf is MaxPool's forward pass on half values (no Indices output;
// every window must hold an input element): the maximum of each window, in
// the windows MaxPoolGrad resolves.
func maxPoolHalf(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, bool, error) {
	if len(in) != 1 || in[0] == nil || (len(n.Outputs) > 1 && n.Outputs[1] != "") {
		return nil, false, nil
	}
	x := in[0]
	xs, ok := x.Data.([]uint16)
	if !ok || (x.DType != graph.BFloat16 && x.DType != graph.Float16) || len(x.Shape) < 3 {
		return nil, false, nil
	}
	w, err := poolGradWindow(n, x.Shape)
	if err != nil {
		return nil, false, nil // the float32 kernel reports it
	}
	plan := newPoolGradPlan(w)
	for j := range plan.start {
		for o := 0; o+1 < len(plan.start[j]); o++ {
			if plan.start[j][o+1] == plan.start[j][o] {
				return nil, false, nil // a window wholly in the padding
			}
		}
	}
	planes := x.Shape[0] * x.Shape[1]
	inSize, outSize := w.inSize, w.outSize
	if len(xs) < planes*inSize {
		return nil, false, nil
	}
	y, err := kern.NewUninit(n, x.DType, append([]int{x.Shape[0], x.Shape[1]}, w.out...))
	if err != nil {
		return nil, false, err
	}
	ys := y.Data.([]uint16)
	d := x.DType
	workers := gradWorkers(planes, outSize*max(w.kernelSize, 1))
	simple := simplePool2D(w)
	nn.ParallelItems(planes, workers, false, func(_, c int) {
		xp := xs[c*inSize : (c+1)*inSize]
		yp := ys[c*outSize : (c+1)*outSize]
		if simple {
			pool2DArgmax(w, d, xp, func(out, at int) { yp[out] = xp[at] })
			return
		}
		plan.forWindows(func(out int, taps []int, _ int) {
			best, at := float32(math.Inf(-1)), -1
			for _, t := range taps {
				if v := kern.HalfToFloat32At(d, xp[t]); v > best || at < 0 {
					best, at = v, t
				}
			}
			yp[out] = xp[at] // the maximum's own bits
		})
	})
	return []*graph.Tensor{y}, true, nil
}

// simplePool2D reports whether w is a 2-D window without padding or
// dilation whose every window lies inside the input (MaxPool 2×2 stride 2,
// the CNN case), for which pool2DArgmax scans directly.
func simplePool2D(w *gradWindow) bool {
	if len(w.in) != 2 {
		return false
	}
	for j := 0; j < 2; j++ {
		if w.padBegin[j] != 0 || w.dilations[j] != 1 || w.out[j] == 0 ||
			(w.out[j]-1)*w.strides[j]+w.kernel[j] > w.in[j] {
			return false
		}
	}
	return true
}

// pool2DArgmax calls fn(out, at) for every window of a simple 2-D pooling
// (simplePool2D) of one plane of half values, with at the plane offset of
// the window's first maximum in row-major order (as the float32 kernels
// pick it).
func pool2DArgmax(w *gradWindow, d graph.DType, xp []uint16, fn func(out, at int)) {
	inW := w.in[1]
	outH, outW := w.out[0], w.out[1]
	kh, kw, sh, sw := w.kernel[0], w.kernel[1], w.strides[0], w.strides[1]
	out := 0
	for oy := 0; oy < outH; oy++ {
		for ox := 0; ox < outW; ox++ {
			base := oy*sh*inW + ox*sw
			at := base
			best := kern.HalfToFloat32At(d, xp[base])
			for ky := 0; ky < kh; ky++ {
				row := base + ky*inW
				for kx := 0; kx < kw; kx++ {
					if v := kern.HalfToFloat32At(d, xp[row+kx]); v > best {
						best, at = v, row+kx
					}
				}
			}
			fn(out, at)
			out++
		}
	}
}
