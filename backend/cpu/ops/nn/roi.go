package nn

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// floatData returns a float32 or float64 tensor's elements as float64.
func floatData(n *graph.Node, t *graph.Tensor, what string) ([]float64, error) {
	switch d := t.Data.(type) {
	case []float32:
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
		return out, nil
	case []float64:
		return d, nil
	}
	return nil, n.Errorf("%s has dtype %v, want a float type", what, t.DType)
}

// roiAlignSample is one bilinear sample: four input offsets and weights.
type roiAlignSample struct {
	pos [4]int
	w   [4]float64
}

// roiAlignKernel implements RoiAlign (modes avg and max; coordinate
// transformation half_pixel or output_half_pixel, the only behaviour before
// opset 16).
func roiAlignKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	x, rois, bi := in[0], in[1], in[2]
	if len(x.Shape) != 4 {
		return nil, n.Errorf("input X must be (N, C, H, W), has shape %v", x.Shape)
	}
	if len(rois.Shape) != 2 || rois.Shape[1] != 4 {
		return nil, n.Errorf("rois must be (num_rois, 4), has shape %v", rois.Shape)
	}
	numRois := rois.Shape[0]
	if len(bi.Shape) != 1 || bi.Shape[0] != numRois {
		return nil, n.Errorf("batch_indices has shape %v, want [%d]", bi.Shape, numRois)
	}
	defMode := "half_pixel"
	if ctx.Opset > 0 && ctx.Opset < 16 {
		defMode = "output_half_pixel"
	}
	halfPixel := false
	switch m := n.AttrString("coordinate_transformation_mode", defMode); m {
	case "half_pixel":
		halfPixel = true
	case "output_half_pixel":
	default:
		return nil, n.Errorf("coordinate_transformation_mode %q is not half_pixel or output_half_pixel", m)
	}
	maxMode := false
	switch m := n.AttrString("mode", "avg"); m {
	case "avg":
	case "max":
		maxMode = true
	default:
		return nil, n.Errorf("mode %q is not avg or max", m)
	}
	ph, pw := int(n.AttrInt("output_height", 1)), int(n.AttrInt("output_width", 1))
	sampling := int(n.AttrInt("sampling_ratio", 0))
	scale := float64(n.AttrFloat("spatial_scale", 1))
	if ph <= 0 || pw <= 0 || sampling < 0 {
		return nil, n.Errorf("output_height %d, output_width %d must be positive and sampling_ratio %d not negative", ph, pw, sampling)
	}
	nb, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	y, err := kern.New(n, x.DType, []int{numRois, c, ph, pw})
	if err != nil {
		return nil, err
	}
	xd, err := floatData(n, x, "input X")
	if err != nil {
		return nil, err
	}
	rd, err := floatData(n, rois, "rois")
	if err != nil {
		return nil, err
	}
	out := make([]float64, y.Size())
	offset := 0.0
	if halfPixel {
		offset = 0.5
	}
	for r := 0; r < numRois; r++ {
		b := int(bi.Int(r))
		if b < 0 || b >= nb {
			return nil, n.Errorf("batch index %d of roi %d is outside [0, %d)", b, r, nb)
		}
		x1, y1 := rd[r*4]*scale-offset, rd[r*4+1]*scale-offset
		x2, y2 := rd[r*4+2]*scale-offset, rd[r*4+3]*scale-offset
		rw, rh := x2-x1, y2-y1
		if !halfPixel {
			rw, rh = math.Max(rw, 1), math.Max(rh, 1)
		}
		binH, binW := rh/float64(ph), rw/float64(pw)
		gh, gw := sampling, sampling
		if sampling == 0 {
			gh, gw = int(math.Ceil(rh/float64(ph))), int(math.Ceil(rw/float64(pw)))
		}
		count := max(gh*gw, 1)
		// The sample positions are the same for every channel.
		samples := make([]roiAlignSample, 0, ph*pw*gh*gw)
		for py := 0; py < ph; py++ {
			for px := 0; px < pw; px++ {
				for iy := 0; iy < gh; iy++ {
					yy := y1 + float64(py)*binH + (float64(iy)+0.5)*binH/float64(gh)
					for ix := 0; ix < gw; ix++ {
						xx := x1 + float64(px)*binW + (float64(ix)+0.5)*binW/float64(gw)
						samples = append(samples, bilinearSample(yy, xx, h, w))
					}
				}
			}
		}
		per := gh * gw
		for ch := 0; ch < c; ch++ {
			plane := xd[(b*c+ch)*h*w : (b*c+ch+1)*h*w]
			o := out[(r*c+ch)*ph*pw : (r*c+ch+1)*ph*pw]
			for q := range o {
				var acc float64
				for s, sm := range samples[q*per : (q+1)*per] {
					if maxMode {
						v := math.Max(math.Max(sm.w[0]*plane[sm.pos[0]], sm.w[1]*plane[sm.pos[1]]),
							math.Max(sm.w[2]*plane[sm.pos[2]], sm.w[3]*plane[sm.pos[3]]))
						if s == 0 || v > acc {
							acc = v
						}
					} else {
						acc += sm.w[0]*plane[sm.pos[0]] + sm.w[1]*plane[sm.pos[1]] +
							sm.w[2]*plane[sm.pos[2]] + sm.w[3]*plane[sm.pos[3]]
					}
				}
				if !maxMode {
					acc /= float64(count)
				}
				o[q] = acc
			}
		}
	}
	storeFloats(y, out)
	return []*graph.Tensor{y}, nil
}

// bilinearSample is RoiAlign's interpolation at (y, x) of an h×w plane:
// points more than one pixel outside sample zero, the rest clamp to the
// border.
func bilinearSample(y, x float64, h, w int) roiAlignSample {
	var s roiAlignSample
	if y < -1 || y > float64(h) || x < -1 || x > float64(w) {
		return s
	}
	y, x = math.Max(y, 0), math.Max(x, 0)
	yl, xl := int(y), int(x)
	yh, xh := yl+1, xl+1
	if yl >= h-1 {
		yl, yh = h-1, h-1
		y = float64(yl)
	}
	if xl >= w-1 {
		xl, xh = w-1, w-1
		x = float64(xl)
	}
	ly, lx := y-float64(yl), x-float64(xl)
	hy, hx := 1-ly, 1-lx
	s.pos = [4]int{yl*w + xl, yl*w + xh, yh*w + xl, yh*w + xh}
	s.w = [4]float64{hy * hx, hy * lx, ly * hx, ly * lx}
	return s
}

// storeFloats writes float64 values into a float32 or float64 tensor.
func storeFloats(t *graph.Tensor, v []float64) {
	switch d := t.Data.(type) {
	case []float32:
		for i, x := range v {
			d[i] = float32(x)
		}
	case []float64:
		copy(d, v)
	}
}

// maxRoiPoolKernel implements MaxRoiPool: each RoI (batch_id, x1, y1, x2, y2),
// scaled and rounded to whole pixels, is cut into pooled_shape bins whose
// maxima are the output (empty bins give zero).
func maxRoiPoolKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, rois := in[0], in[1]
	if len(x.Shape) != 4 {
		return nil, n.Errorf("input X must be (N, C, H, W), has shape %v", x.Shape)
	}
	if len(rois.Shape) != 2 || rois.Shape[1] != 5 {
		return nil, n.Errorf("rois must be (num_rois, 5), has shape %v", rois.Shape)
	}
	ps := n.AttrInts("pooled_shape", nil)
	if len(ps) != 2 || ps[0] <= 0 || ps[1] <= 0 {
		return nil, n.Errorf("pooled_shape %v must be two positive ints", ps)
	}
	ph, pw := int(ps[0]), int(ps[1])
	scale := float64(n.AttrFloat("spatial_scale", 1))
	nb, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	numRois := rois.Shape[0]
	y, err := kern.New(n, x.DType, []int{numRois, c, ph, pw})
	if err != nil {
		return nil, err
	}
	xd, err := floatData(n, x, "input X")
	if err != nil {
		return nil, err
	}
	rd, err := floatData(n, rois, "rois")
	if err != nil {
		return nil, err
	}
	out := make([]float64, y.Size())
	clampTo := func(v, hi int) int { return min(max(v, 0), hi) }
	for r := 0; r < numRois; r++ {
		roi := rd[r*5 : r*5+5]
		b := int(roi[0])
		if b < 0 || b >= nb {
			return nil, n.Errorf("batch id %g of roi %d is outside [0, %d)", roi[0], r, nb)
		}
		ws, hs := int(math.Round(roi[1]*scale)), int(math.Round(roi[2]*scale))
		we, he := int(math.Round(roi[3]*scale)), int(math.Round(roi[4]*scale))
		rh, rw := max(he-hs+1, 1), max(we-ws+1, 1)
		binH, binW := float64(rh)/float64(ph), float64(rw)/float64(pw)
		for ch := 0; ch < c; ch++ {
			plane := xd[(b*c+ch)*h*w : (b*c+ch+1)*h*w]
			o := out[(r*c+ch)*ph*pw : (r*c+ch+1)*ph*pw]
			for py := 0; py < ph; py++ {
				h0 := clampTo(int(math.Floor(float64(py)*binH))+hs, h)
				h1 := clampTo(int(math.Ceil(float64(py+1)*binH))+hs, h)
				for px := 0; px < pw; px++ {
					w0 := clampTo(int(math.Floor(float64(px)*binW))+ws, w)
					w1 := clampTo(int(math.Ceil(float64(px+1)*binW))+ws, w)
					if h1 <= h0 || w1 <= w0 {
						continue
					}
					best := math.Inf(-1)
					for yy := h0; yy < h1; yy++ {
						for xx := w0; xx < w1; xx++ {
							best = math.Max(best, plane[yy*w+xx])
						}
					}
					o[py*pw+px] = best
				}
			}
		}
	}
	storeFloats(y, out)
	return []*graph.Tensor{y}, nil
}
