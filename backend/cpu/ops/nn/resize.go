package nn

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// resizeKernel implements Resize for every opset: the scales / sizes / roi
// input layouts of opsets 10, 11 and 13, and the axes,
// keep_aspect_ratio_policy and antialias attributes of opset 18.
func resizeKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	var roi, scales, sizes *graph.Tensor
	legacy := ctx.Opset > 0 && ctx.Opset < 11
	if legacy {
		if err := kern.Need(n, in, 2); err != nil {
			return nil, err
		}
		scales = in[1]
	} else {
		roi, scales, sizes = kern.Opt(in, 1), kern.Opt(in, 2), kern.Opt(in, 3)
	}
	m, err := graph.ReadResizeMode(n, legacy)
	if err != nil {
		return nil, err
	}
	var roiVals []float64
	if m.CoordMode == "tf_crop_and_resize" {
		roiVals = graph.ResizeFloats(roi)
	}
	ras, err := graph.ResolveResizeAxes(n, x.Shape, m, roiVals, graph.ResizeFloats(scales), graph.ResizeSizes(sizes), true)
	if err != nil {
		return nil, err
	}
	return resizeRun(n, x, m, ras)
}

// ResizePlan resolves a Resize node (legacy: before opset 11, or Upsample,
// whose scales may be an attribute) over an input of shape, exactly as the
// forward kernels do, for the backward pass: every resized axis (Out is
// its output length) and the taps of those that are not copied unchanged,
// in the forward passes' order.
func ResizePlan(n *graph.Node, shape []int, roi, scales, sizes *graph.Tensor, legacy bool) ([]graph.ResizeAxis, []*graph.ResizeTaps, error) {
	m, err := graph.ReadResizeMode(n, legacy)
	if err != nil {
		return nil, nil, err
	}
	scaleVals := graph.ResizeFloats(scales)
	if a := n.Attr("scales"); a != nil && legacy {
		scaleVals = nil
		for _, s := range a.Floats {
			scaleVals = append(scaleVals, float64(s))
		}
	}
	var roiVals []float64
	if m.CoordMode == "tf_crop_and_resize" {
		roiVals = graph.ResizeFloats(roi)
	}
	ras, err := graph.ResolveResizeAxes(n, shape, m, roiVals, scaleVals, graph.ResizeSizes(sizes), !legacy)
	if err != nil {
		return nil, nil, err
	}
	return ras, m.Passes(ras), nil
}

// resizeRun applies the per-axis taps one axis at a time, shrinking axes
// first so the intermediates stay small.
func resizeRun(n *graph.Node, x *graph.Tensor, m *graph.ResizeMode, ras []graph.ResizeAxis) ([]*graph.Tensor, error) {
	shape := append([]int{}, x.Shape...)
	for _, a := range ras {
		shape[a.Axis] = a.Out
	}
	if _, err := graph.NumElements(shape); err != nil {
		return nil, n.Errorf("output of shape %v: %w", shape, err)
	}
	passes := m.Passes(ras)
	if prod(shape) == 0 {
		y, err := kern.New(n, x.DType, shape)
		if err != nil {
			return nil, err
		}
		return []*graph.Tensor{y}, nil
	}
	cur := x
	curShape := append([]int{}, x.Shape...)
	for _, p := range passes {
		next := append([]int{}, curShape...)
		next[p.Axis] = p.Out
		outer, inner := prod(curShape[:p.Axis]), prod(curShape[p.Axis+1:])
		y, err := resizeAxisPass(n, cur, next, outer, curShape[p.Axis], inner, p, m)
		if err != nil {
			return nil, err
		}
		cur, curShape = y, next
	}
	if cur == x {
		cur = x.Clone()
	}
	return []*graph.Tensor{cur}, nil
}

// resizeAxisPass resamples one axis of t (viewed as outer × in × inner) into
// a tensor of shape next. Floats interpolate in their own type; integers
// interpolate in float64 and truncate toward zero; nearest on other types
// copies elements.
func resizeAxisPass(n *graph.Node, t *graph.Tensor, next []int, outer, in, inner int, taps *graph.ResizeTaps, m *graph.ResizeMode) (*graph.Tensor, error) {
	y, err := kern.New(n, t.DType, next)
	if err != nil {
		return nil, err
	}
	gather := m.Interp == "nearest" && taps.Extrap == nil
	switch src := t.Data.(type) {
	case []float32:
		resizeLerp(y.Data.([]float32), src, outer, in, inner, taps, float32(m.Extrapolation))
	case []float64:
		resizeLerp(y.Data.([]float64), src, outer, in, inner, taps, m.Extrapolation)
	case []bool:
		if !gather {
			return nil, n.Errorf("mode %s with extrapolation needs a numeric input, have %v", m.Interp, t.DType)
		}
		resizeGather(y.Data.([]bool), src, outer, in, inner, taps)
	case []string:
		if !gather {
			return nil, n.Errorf("mode %s with extrapolation needs a numeric input, have %v", m.Interp, t.DType)
		}
		resizeGather(y.Data.([]string), src, outer, in, inner, taps)
	default:
		if gather {
			switch s := src.(type) {
			case []int8:
				resizeGather(y.Data.([]int8), s, outer, in, inner, taps)
			case []int16:
				resizeGather(y.Data.([]int16), s, outer, in, inner, taps)
			case []int32:
				resizeGather(y.Data.([]int32), s, outer, in, inner, taps)
			case []int64:
				resizeGather(y.Data.([]int64), s, outer, in, inner, taps)
			case []uint8:
				resizeGather(y.Data.([]uint8), s, outer, in, inner, taps)
			case []uint16:
				resizeGather(y.Data.([]uint16), s, outer, in, inner, taps)
			case []uint32:
				resizeGather(y.Data.([]uint32), s, outer, in, inner, taps)
			case []uint64:
				resizeGather(y.Data.([]uint64), s, outer, in, inner, taps)
			default:
				return nil, n.Errorf("dtype %v is not supported", t.DType)
			}
			return y, nil
		}
		if !t.DType.IsInt() {
			return nil, n.Errorf("dtype %v is not supported", t.DType)
		}
		f, err := kern.Cast(t, graph.Float64)
		if err != nil {
			return nil, n.Errorf("%v", err)
		}
		fy := make([]float64, y.Size())
		resizeLerp(fy, f.Data.([]float64), outer, in, inner, taps, m.Extrapolation)
		for i, v := range fy {
			kern.SetInt(y, i, int64(v))
		}
	}
	return y, nil
}

// resizeLerp computes dst[b, o, :] = Σ w·src[b, idx, :] over the taps of o.
func resizeLerp[F poolFloat](dst, src []F, outer, in, inner int, taps *graph.ResizeTaps, extrap F) {
	out := len(taps.Start) - 1
	workers := nnWorkers(outer, out*inner*2)
	parallelFor(outer, workers, func(_, b int) {
		s := src[b*in*inner : (b+1)*in*inner]
		d := dst[b*out*inner : (b+1)*out*inner]
		for o := 0; o < out; o++ {
			row := d[o*inner : (o+1)*inner]
			if taps.Extrap != nil && taps.Extrap[o] {
				for j := range row {
					row[j] = extrap
				}
				continue
			}
			ts, te := taps.Start[o], taps.Start[o+1]
			if ts == te {
				clear(row)
				continue
			}
			w0 := F(taps.W[ts])
			s0 := s[taps.Idx[ts]*inner : (taps.Idx[ts]+1)*inner]
			s0 = s0[:len(row)]
			for j := range row {
				row[j] = w0 * s0[j]
			}
			for k := ts + 1; k < te; k++ {
				wk := F(taps.W[k])
				sk := s[taps.Idx[k]*inner : (taps.Idx[k]+1)*inner]
				sk = sk[:len(row)]
				for j := range row {
					row[j] += wk * sk[j]
				}
			}
		}
	})
}

// resizeGather copies dst[b, o, :] = src[b, idx(o), :] (nearest mode).
func resizeGather[T any](dst, src []T, outer, in, inner int, taps *graph.ResizeTaps) {
	out := len(taps.Start) - 1
	for b := 0; b < outer; b++ {
		s := src[b*in*inner : (b+1)*in*inner]
		d := dst[b*out*inner : (b+1)*out*inner]
		if inner == 1 {
			for o := range d {
				d[o] = s[taps.Idx[o]]
			}
			continue
		}
		for o := 0; o < out; o++ {
			i := taps.Idx[taps.Start[o]]
			copy(d[o*inner:(o+1)*inner], s[i*inner:(i+1)*inner])
		}
	}
}

// upsampleKernel implements Upsample: scales from the attribute (opset 7)
// or the second input (opset 9), with Resize-10's coordinate rules.
func upsampleKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	var scales []float64
	if a := n.Attr("scales"); a != nil {
		for _, s := range a.Floats {
			scales = append(scales, float64(s))
		}
	} else if t := kern.Opt(in, 1); t != nil {
		for i := 0; i < t.Size(); i++ {
			scales = append(scales, t.Float(i))
		}
	} else {
		return nil, n.Errorf("scales (attribute or input 1) is required")
	}
	if len(scales) != len(x.Shape) {
		return nil, n.Errorf("scales has %d values, want one per axis of %v", len(scales), x.Shape)
	}
	m, err := graph.ReadResizeMode(n, true)
	if err != nil {
		return nil, err
	}
	ras, err := graph.ResolveResizeAxes(n, x.Shape, m, nil, scales, nil, false)
	if err != nil {
		return nil, err
	}
	return resizeRun(n, x, m, ras)
}
