package nn

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// gridMode is GridSample's configuration.
type gridMode struct {
	interp       string // nearest, linear, cubic
	padding      string // zeros, border, reflection
	alignCorners bool
}

// gridTap is one axis tap: an input index (-1 for a zero sample) and weight.
type gridTap struct {
	idx int
	w   float64
}

// gridReflect reflects x into [lo, hi] by the nearer border, repeatedly.
func gridReflect(x, lo, hi float64) float64 {
	rng := hi - lo
	if rng <= 0 {
		return lo
	}
	if x < lo {
		dx := lo - x
		k := math.Floor(dx / rng)
		r := dx - k*rng
		if int64(k)%2 == 0 {
			return lo + r
		}
		return hi - r
	}
	if x > hi {
		dx := x - hi
		k := math.Floor(dx / rng)
		r := dx - k*rng
		if int64(k)%2 == 0 {
			return hi - r
		}
		return lo + r
	}
	return x
}

// axisTaps appends the taps of normalised coordinate v on an axis of size d.
func (g *gridMode) axisTaps(dst []gridTap, v float64, d int) []gridTap {
	var x, lo, hi float64
	if g.alignCorners {
		x = (v + 1) / 2 * float64(d-1)
		lo, hi = 0, float64(d-1)
	} else {
		x = ((v+1)*float64(d) - 1) / 2
		lo, hi = -0.5, float64(d)-0.5
	}
	if g.interp == "nearest" {
		x = math.RoundToEven(x)
	}
	if x < lo || x > hi {
		switch g.padding {
		case "border":
			x = math.Min(math.Max(x, 0), float64(d-1))
		case "reflection":
			x = gridReflect(x, lo, hi)
		}
	}
	// pixel maps an integer index through the padding mode.
	pixel := func(i int) int {
		if i >= 0 && i < d {
			return i
		}
		switch g.padding {
		case "border":
			return min(max(i, 0), d-1)
		case "reflection":
			return min(max(int(gridReflect(float64(i), lo, hi)), 0), d-1)
		}
		return -1
	}
	switch g.interp {
	case "nearest":
		if math.IsNaN(x) {
			return append(dst, gridTap{-1, 1})
		}
		return append(dst, gridTap{pixel(int(x)), 1})
	case "linear":
		f := math.Floor(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return append(dst, gridTap{-1, 0}, gridTap{-1, 0})
		}
		i := int(f)
		return append(dst, gridTap{pixel(i), f + 1 - x}, gridTap{pixel(i + 1), x - f})
	}
	f := math.Floor(x)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, gridTap{-1, 0}, gridTap{-1, 0}, gridTap{-1, 0}, gridTap{-1, 0})
	}
	t := x - f
	const a = -0.75
	i := int(f) - 1
	return append(dst,
		gridTap{pixel(i), graph.KeysCubic(t+1, a)},
		gridTap{pixel(i + 1), graph.KeysCubic(t, a)},
		gridTap{pixel(i + 2), graph.KeysCubic(1-t, a)},
		gridTap{pixel(i + 3), graph.KeysCubic(2-t, a)})
}

// gridSampleKernel implements GridSample for any number of spatial dims
// (opset 16's bilinear/bicubic names and opset 20's linear/cubic).
func gridSampleKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, grid := in[0], in[1]
	if err := spatialInput(n, x, "input X"); err != nil {
		return nil, err
	}
	r := len(x.Shape) - 2
	if len(grid.Shape) != r+2 || grid.Shape[0] != x.Shape[0] || grid.Shape[r+1] != r {
		return nil, n.Errorf("grid has shape %v, want (%d, out spatial..., %d) for X %v", grid.Shape, x.Shape[0], r, x.Shape)
	}
	g := &gridMode{
		interp:       n.AttrString("mode", "linear"),
		padding:      n.AttrString("padding_mode", "zeros"),
		alignCorners: n.AttrInt("align_corners", 0) != 0,
	}
	switch g.interp {
	case "bilinear":
		g.interp = "linear"
	case "bicubic":
		g.interp = "cubic"
	case "linear", "nearest", "cubic":
	default:
		return nil, n.Errorf("mode %q is not linear, nearest or cubic", g.interp)
	}
	switch g.padding {
	case "zeros", "border", "reflection":
	default:
		return nil, n.Errorf("padding_mode %q is not zeros, border or reflection", g.padding)
	}
	gd, err := floatData(n, grid, "grid")
	if err != nil {
		return nil, err
	}
	nb, c := x.Shape[0], x.Shape[1]
	inDims := x.Shape[2:]
	outDims := grid.Shape[1 : r+1]
	y, err := kern.New(n, x.DType, concatShape([]int{nb, c}, outDims))
	if err != nil {
		return nil, err
	}
	switch xd := x.Data.(type) {
	case []float32:
		gridSampleRun(g, xd, y.Data.([]float32), gd, nb, c, inDims, outDims)
	case []float64:
		gridSampleRun(g, xd, y.Data.([]float64), gd, nb, c, inDims, outDims)
	case []int8:
		gridSampleRun(g, xd, y.Data.([]int8), gd, nb, c, inDims, outDims)
	case []int16:
		gridSampleRun(g, xd, y.Data.([]int16), gd, nb, c, inDims, outDims)
	case []int32:
		gridSampleRun(g, xd, y.Data.([]int32), gd, nb, c, inDims, outDims)
	case []int64:
		gridSampleRun(g, xd, y.Data.([]int64), gd, nb, c, inDims, outDims)
	case []uint8:
		gridSampleRun(g, xd, y.Data.([]uint8), gd, nb, c, inDims, outDims)
	case []uint16:
		gridSampleRun(g, xd, y.Data.([]uint16), gd, nb, c, inDims, outDims)
	case []uint32:
		gridSampleRun(g, xd, y.Data.([]uint32), gd, nb, c, inDims, outDims)
	case []uint64:
		gridSampleRun(g, xd, y.Data.([]uint64), gd, nb, c, inDims, outDims)
	default:
		return nil, n.Errorf("dtype %v is not supported", x.DType)
	}
	return []*graph.Tensor{y}, nil
}

// gridSampleRun samples every channel of every image at the grid points.
// The taps of a point are the product of per-axis taps; values are
// accumulated in float64 and converted to T at the end.
func gridSampleRun[T nnNumber](g *gridMode, x, y []T, grid []float64, nb, c int, inDims, outDims []int) {
	r := len(inDims)
	inSize, outSize := prod(inDims), prod(outDims)
	if outSize == 0 || c == 0 {
		return
	}
	inStride := graph.Strides(inDims)
	per := 2
	switch g.interp {
	case "nearest":
		per = 1
	case "cubic":
		per = 4
	}
	items := nb * outSize
	workers := nnWorkers(items, c*per*r)
	type scratch struct {
		taps  []gridTap
		offs  []int
		ws    []float64
		count []int
	}
	ss := make([]scratch, workers)
	parallelFor(items, workers, func(worker, item int) {
		s := &ss[worker]
		b, p := item/outSize, item%outSize
		pt := grid[item*r : (item+1)*r]
		// The grid lists coordinates innermost axis first.
		s.taps = s.taps[:0]
		for j := 0; j < r; j++ {
			s.taps = g.axisTaps(s.taps, pt[r-1-j], inDims[j])
		}
		// Combine the per-axis taps into flat offsets and weights,
		// dropping combinations that touch a zero sample.
		s.offs, s.ws = s.offs[:0], s.ws[:0]
		if cap(s.count) < r {
			s.count = make([]int, r)
		}
		cnt := s.count[:r]
		clear(cnt)
		for {
			off, w := 0, 1.0
			for j := 0; j < r; j++ {
				t := s.taps[j*per+cnt[j]]
				if t.idx < 0 {
					w = 0
					break
				}
				off += t.idx * inStride[j]
				w *= t.w
			}
			if w != 0 {
				s.offs = append(s.offs, off)
				s.ws = append(s.ws, w)
			}
			j := r - 1
			for ; j >= 0; j-- {
				cnt[j]++
				if cnt[j] < per {
					break
				}
				cnt[j] = 0
			}
			if j < 0 {
				break
			}
		}
		for ch := 0; ch < c; ch++ {
			xp := x[(b*c+ch)*inSize : (b*c+ch+1)*inSize]
			var v float64
			for k, off := range s.offs {
				v += s.ws[k] * float64(xp[off])
			}
			y[(b*c+ch)*outSize+p] = T(v)
		}
	})
}
