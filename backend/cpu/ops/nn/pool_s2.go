package nn

import "math"

// MaxPool of float32 planes without Indices whose windows are 3 columns
// wide two columns apart (ResNet's 3×3 stride-2 stem pool): one call of
// the vector loop per plane (poolMax3S2Plane: the vertical maxima of each
// output row's window rows into a buffer padded with -Inf, then the
// stride-2 maxima over it), instead of several calls per output row.

// stride3S2Cols reports whether maxPool3S2Planes takes windows of these
// spans over rows iw wide: every window 1 to 3 rows, the columns of
// output q being 2q+colOff-1 .. 2q+colOff+1 cut to the row (3×3 windows
// of stride 2 with a left pad of 1 or 0: colOff 0 or 1), and the rows
// and the outputs at least 8 wide (the vector blocks) and at most what a
// sepRowPool buffer holds.
func stride3S2Cols(rows, cols []span, iw int) (colOff int, ok bool) {
	ow := len(cols)
	if iw < 8 || ow < 8 || max(iw, 2*ow)+2 > sepWidth || len(rows) == 0 {
		return 0, false
	}
	for _, rs := range rows {
		if rs.n < 1 || rs.n > 3 {
			return 0, false
		}
	}
	switch cols[0] {
	case span{0, 3}:
		colOff = 1
	case span{0, 2}:
		colOff = 0
	default:
		return 0, false
	}
	for q, cs := range cols {
		lo, hi := max(2*q+colOff-1, 0), min(2*q+colOff+2, iw)
		if hi <= lo || cs != (span{int32(lo), int32(hi - lo)}) {
			return 0, false
		}
	}
	return colOff, true
}

// maxPool3S2Task is the work of maxPool3S2Planes: item blk is the planes
// [blk·per, (blk+1)·per), computed with one row buffer.
type maxPool3S2Task struct {
	rows, cols              []span
	x, y                    []float32
	iw, colOff, planes, per int
	inSize, outSize         int
}

func (t *maxPool3S2Task) Item(_, blk int) {
	rp := sepRowPool.Get().(*[sepWidth]float32)
	defer sepRowPool.Put(rp)
	ow := len(t.cols)
	for c := blk * t.per; c < min((blk+1)*t.per, t.planes); c++ {
		xp, yp := t.x[c*t.inSize:(c+1)*t.inSize], t.y[c*t.outSize:(c+1)*t.outSize]
		if poolMax3S2Plane(yp, xp, rp[:], t.iw, ow, t.colOff, t.rows) {
			continue
		}
		// A NaN or -0 tap (or no vector loop): the general paths.
		if !maxPool2DSeparable(t.rows, t.cols, t.iw, xp, yp) {
			maxPool2DSpans(t.rows, t.cols, t.iw, xp, yp, nil, 0, float32(math.Inf(-1)))
		}
	}
}

// maxPool3S2Planes is maxPoolRun for float32 planes of inSize values (rows
// iw wide) without Indices whose windows stride3S2Cols accepts (colOff
// its result). The planes go to the workers in blocks.
func maxPool3S2Planes(rows, cols []span, iw, colOff int, x, y []float32, planes, inSize, workers int) {
	blocks := min(planes, 4*workers)
	per := (planes + blocks - 1) / blocks
	blocks = (planes + per - 1) / per
	ParallelItemsOf(blocks, workers, false, maxPool3S2Task{rows: rows, cols: cols, x: x, y: y, iw: iw,
		colOff: colOff, planes: planes, per: per, inSize: inSize, outSize: len(rows) * len(cols)})
}
