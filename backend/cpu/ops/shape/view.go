package shape

import (
	"fmt"
	"math"
	"unsafe"
)

// padOffset marks a source offset that reads the fill value instead of the
// source. It is so negative that adding any real offset (every tensor holds
// fewer than graph.MaxElements = 2^40 elements) keeps the sum negative, and
// a sum of up to 2048 of them cannot overflow.
const padOffset = -(1 << 52)

// axisMap says, for each index along one output axis, which source offset
// (in elements) that index contributes. The source element of an output
// element is the sum over the axes of their contributions.
//
// An arithmetic map (table == nil) gives start + i*stride; a table map lists
// the offsets, and may hold padOffset for indices that read the fill value.
type axisMap struct {
	n             int
	start, stride int
	table         []int
}

// arith returns the arithmetic map i -> start + i*stride over n indices.
func arith(n, start, stride int) axisMap { return axisMap{n: n, start: start, stride: stride} }

// tabled returns the map that reads offsets from t.
func tabled(t []int) axisMap { return axisMap{n: len(t), table: t} }

// at is the contribution of index i.
func (m *axisMap) at(i int) int {
	if m.table != nil {
		return m.table[i]
	}
	return m.start + i*m.stride
}

// simplifyMaps drops axes of length 1 (folding their offset into base) and
// merges neighbouring arithmetic axes that walk the source contiguously, so
// that the innermost axis is as long as possible. empty is true when some
// axis has length 0 (the output holds no elements). out is appended to
// buf[:0] (a caller's stack array keeps it off the heap).
func simplifyMaps(buf, maps []axisMap) (base int, out []axisMap, empty bool) {
	out = buf[:0]
	for _, m := range maps {
		switch {
		case m.n == 0:
			return 0, nil, true
		case m.n == 1:
			base += m.at(0)
			continue
		}
		if m.table != nil {
			// Tables that happen to be arithmetic merge like arithmetic maps.
			if s, ok := tableStride(m.table); ok {
				m = arith(m.n, m.table[0], s)
			}
		}
		if k := len(out) - 1; k >= 0 && out[k].table == nil && m.table == nil && out[k].stride == m.stride*m.n {
			out[k] = arith(out[k].n*m.n, out[k].start+m.start, m.stride)
			continue
		}
		out = append(out, m)
	}
	return base, out, false
}

// tableStride reports whether t (len >= 2) is an arithmetic sequence of
// real (non-pad) offsets, and its stride.
func tableStride(t []int) (int, bool) {
	s := t[1] - t[0]
	for i, v := range t {
		if v < 0 || (i > 0 && v-t[i-1] != s) {
			return 0, false
		}
	}
	return s, true
}

// stackRank is the number of axes whose scratch (maps, odometers) the
// gather keeps on the stack; higher ranks allocate it.
const stackRank = 8

// span is one run of the innermost axis: n output elements from dst on,
// read from the source starting at src, or filled when fill is true.
type span struct {
	dst, src, n int
	fill        bool
}

// innerSpans splits the innermost axis into contiguous source runs and fill
// runs, appended to buf[:0].
func innerSpans(buf []span, m *axisMap) []span {
	if m.table == nil && m.stride == 1 {
		return append(buf[:0], span{dst: 0, src: m.start, n: m.n})
	}
	out := buf[:0]
	for j := 0; j < m.n; j++ {
		o := m.at(j)
		pad := o < 0
		if k := len(out) - 1; k >= 0 {
			last := &out[k]
			if pad && last.fill || !pad && !last.fill && o == last.src+last.n {
				last.n++
				continue
			}
		}
		out = append(out, span{dst: j, src: o, n: 1, fill: pad})
	}
	return out
}

// gatherView fills dst, a contiguous row-major array over the output axes
// described by maps, with dst[i0,...,ik] = src[base + Σ maps[a].at(i_a)],
// or with fill[0] (the zero value when fill is nil) where that sum is
// negative. dst and src must hold the same element type; fill, when not nil,
// is a slice of that type too.
//
// It serves every op whose output element reads one input element chosen
// per axis: Transpose, Slice, Expand, Tile, Pad, Gather, Split,
// DepthToSpace and the like.
func gatherView(dst, src any, base int, maps []axisMap, fill any) error {
	if err := gatherRange(dst, src, fill, nil, 0, 0); err != nil {
		return err
	}
	// Scratch of up to stackRank axes lives on the stack.
	var mapBuf [stackRank]axisMap
	var g gatherPlan
	if !g.init(mapBuf[:], base, maps) {
		return nil
	}
	return gatherRange(dst, src, fill, &g, 0, g.units)
}

// typedPair asserts that src holds the same element type as dst and picks
// the fill value.
func typedPair[T any](dst []T, src, fill any) ([]T, T, error) {
	var f T
	s, ok := src.([]T)
	if !ok {
		return nil, f, fmt.Errorf("source holds %T, destination %T", src, dst)
	}
	if fill != nil {
		fs, ok := fill.([]T)
		if !ok || len(fs) == 0 {
			return nil, f, fmt.Errorf("fill value holds %T, destination %T", fill, dst)
		}
		f = fs[0]
	}
	return s, f, nil
}

// gatherPlan is a gather after simplifyMaps, cut into units that can be
// copied independently (a pool's chunks take contiguous ranges of them):
// rows of the innermost output axis, or, for a transpose that tileStrips
// copies in square tiles, tileBlock-row strips of one plane, or, for a
// copy of one contiguous run (a Slice of leading rows, a Split), pieces of
// flatUnit elements of it.
type gatherPlan struct {
	base int
	maps []axisMap
	// tiled: the units are strips of the planes over axes c × innermost;
	// tiles is the strips of one plane.
	tiled    bool
	c, tiles int
	// flat: one contiguous run (a single stride-1 axis) cut into pieces.
	flat bool
	// units, and the output elements of one (for the split's grain).
	units, unitElems int
}

// init simplifies maps into buf and cuts the work into units; it reports
// false when the output holds no element.
func (g *gatherPlan) init(buf []axisMap, base int, maps []axisMap) bool {
	b0, ms, empty := simplifyMaps(buf, maps)
	if empty {
		return false
	}
	*g = gatherPlan{base: base + b0, maps: ms}
	switch r := len(ms); {
	case r == 0:
		g.units, g.unitElems = 1, 1
	case r == 1 && ms[0].table == nil && ms[0].stride == 1:
		// One run: as rows it would be a single unit on one core (a
		// contiguous Slice of a 2304×768 weight read 10 GB/s from memory
		// on one core, 25 on two).
		g.flat = true
		g.unitElems = min(ms[0].n, flatUnit)
		g.units = (ms[0].n + flatUnit - 1) / flatUnit
	case r >= 2 && tileAxis(ms) >= 0:
		g.tiled, g.c = true, tileAxis(ms)
		g.tiles = (ms[g.c].n + tileBlock - 1) / tileBlock
		g.units = g.tiles
		for a := 0; a < r-1; a++ {
			if a != g.c {
				g.units *= ms[a].n
			}
		}
		g.unitElems = tileBlock * ms[r-1].n
	default:
		g.units, g.unitElems = 1, ms[r-1].n
		for _, m := range ms[:r-1] {
			g.units *= m.n
		}
	}
	return true
}

// gatherUnits copies units [lo, hi) of g from src into dst.
func gatherUnits[T any](dst, src []T, fill T, g *gatherPlan, lo, hi int) {
	switch {
	case lo >= hi:
	case len(g.maps) == 0:
		if g.base < 0 {
			dst[0] = fill
		} else {
			dst[0] = src[g.base]
		}
	case g.tiled:
		tileStrips(dst, src, g.base, g.maps, g.c, g.tiles, lo, hi)
	case g.flat:
		n := g.maps[0].n
		from, to := lo*flatUnit, min(hi*flatUnit, n)
		o := g.base + g.maps[0].start
		copy(dst[from:to], src[o+from:o+to])
	default:
		gatherRows(dst, src, fill, g.base, g.maps, lo, hi)
	}
}

// flatUnit is the piece of a flat plan's run that one unit copies: 64 KiB
// of float32, a multiple of every cache line and vector.
const flatUnit = 1 << 14

// gatherRows fills rows [lo, hi) of the innermost output axis (maps
// simplified, at least one axis).
func gatherRows[T any](dst, src []T, fill T, base int, maps []axisMap, lo, hi int) {
	inner := &maps[len(maps)-1]
	outer := maps[:len(maps)-1]
	n := inner.n
	if len(outer) == 1 && outer[0].table == nil && inner.table == nil && inner.stride == 0 {
		// Each row one value (Expand of [N, C, 1, 1] to [N, C, H, W], the
		// global pool's gradient), the rows' values a strided run: no
		// odometer.
		o := base + inner.start + outer[0].start
		for row := lo; row < hi; row++ {
			fillRow(dst[row*n:(row+1)*n], src[o+row*outer[0].stride])
		}
		return
	}
	// elementwise: every inner element is its own run and none is padding.
	// An arithmetic inner axis (n >= 2 after simplifyMaps) is either one
	// run (stride 1) or n runs of one element.
	var spanBuf [4]span
	var spans []span
	elementwise := inner.table == nil && inner.stride != 1
	if !elementwise {
		spans = innerSpans(spanBuf[:], inner)
		elementwise = len(spans) == n
		for _, s := range spans {
			if s.fill {
				elementwise = false
			}
		}
	}
	var idxBuf, partialBuf [stackRank + 1]int
	idx, partial := idxBuf[:0], partialBuf[:0]
	if len(outer) < stackRank {
		idx, partial = idxBuf[:len(outer)], partialBuf[:len(outer)+1]
	} else {
		idx, partial = make([]int, len(outer)), make([]int, len(outer)+1)
	}
	// The odometer at row lo (the last outer axis turns fastest).
	rem := lo
	for a := len(outer) - 1; a >= 0; a-- {
		idx[a] = rem % outer[a].n
		rem /= outer[a].n
	}
	partial[0] = base
	for a := range outer {
		partial[a+1] = partial[a] + outer[a].at(idx[a])
	}
	for row := lo; row < hi; row++ {
		p := row * n
		readRow(dst[p:p+n], src, partial[len(outer)], inner, spans, elementwise, fill)
		// Advance the odometer over the outer axes.
		a := len(outer) - 1
		for ; a >= 0; a-- {
			idx[a]++
			if idx[a] < outer[a].n {
				break
			}
			idx[a] = 0
		}
		if a < 0 {
			break
		}
		for k := a; k < len(outer); k++ {
			partial[k+1] = partial[k] + outer[k].at(idx[k])
		}
	}
}

// readRow fills one row of the innermost output axis from source offset b
// (negative: the whole row is fill). It is a separate function so that its
// loops keep their variables in registers.
func readRow[T any](row, src []T, b int, inner *axisMap, spans []span, elementwise bool, fill T) {
	switch {
	case b < 0:
		for j := range row {
			row[j] = fill
		}
	case elementwise && inner.table == nil && inner.stride == 0:
		// A broadcast row: one value repeated (gatherRows takes those of
		// one outer axis without the odometer).
		fillRow(row, src[b+inner.start])
	case elementwise && inner.table == nil:
		o, st := b+inner.start, inner.stride
		for j := range row {
			row[j] = src[o]
			o += st
		}
	case elementwise:
		src = src[b:]
		for j, o := range inner.table[:len(row)] {
			row[j] = src[o]
		}
	default:
		for _, s := range spans {
			seg := row[s.dst : s.dst+s.n]
			switch {
			case s.fill:
				for j := range seg {
					seg[j] = fill
				}
			case s.n == 1:
				seg[0] = src[b+s.src]
			default:
				copy(seg, src[b+s.src:b+s.src+s.n])
			}
		}
	}
}

// tileBlock is the edge of the square tiles a blocked transpose copies; 32
// float32 rows of 32 elements stay in L1 while both sides are walked.
const tileBlock = 32

// tileAxis returns the axis of a transpose-like gather that tileStrips
// copies in square tiles, or -1. That is the case where the innermost output
// axis strides through the source while an outer output axis (the one
// returned) walks it contiguously: copying element by element would load a
// source cache line per element. An innermost axis of stride 0 is a
// broadcast (each row one value: Expand of [N, C, 1, 1] to [N, C, H, W]),
// not a transpose: gatherRows fills it a row at a time. maps are
// simplified, at least two.
func tileAxis(maps []axisMap) int {
	r := len(maps)
	inner := &maps[r-1]
	if inner.table != nil || inner.stride == 1 || inner.stride == 0 {
		return -1
	}
	c := -1
	for a := 0; a < r-1; a++ {
		if maps[a].table != nil {
			return -1
		}
		if maps[a].stride == 1 && maps[a].n >= tileBlock {
			c = a
		}
	}
	return c
}

// tileStrips copies strips [lo, hi) of a transpose-like gather (tileAxis
// is c): strip u is rows [t·tileBlock, (t+1)·tileBlock) of axis c, t = u mod
// tiles, of the plane (axis c × the innermost axis) at index u / tiles of
// the other outer axes (the last one turning fastest), copied in square
// tiles.
func tileStrips[T any](dst, src []T, base int, maps []axisMap, c, tiles, lo, hi int) {
	r := len(maps)
	inner := &maps[r-1]
	// Output strides (dst is contiguous over maps); the scratch of up to
	// stackRank axes lives on the stack.
	var strideBuf, restBuf [stackRank]int
	dstStride, rest := strideBuf[:0], restBuf[:0]
	if r <= stackRank {
		dstStride = strideBuf[:r]
	} else {
		dstStride = make([]int, r)
	}
	acc := 1
	for a := r - 1; a >= 0; a-- {
		dstStride[a] = acc
		acc *= maps[a].n
	}
	for a := 0; a < r-1; a++ {
		if a != c {
			rest = append(rest, a)
		}
	}
	nc, ni := maps[c].n, inner.n
	dsc, ssi := dstStride[c], inner.stride
	for u := lo; u < hi; u++ {
		plane, t := u/tiles, u%tiles
		so, do := base+maps[c].start+inner.start, 0
		for k := len(rest) - 1; k >= 0; k-- {
			a := rest[k]
			i := plane % maps[a].n
			plane /= maps[a].n
			so += maps[a].at(i)
			do += i * dstStride[a]
		}
		i0 := t * tileBlock
		transposePlane(dst, src, do, so, i0, min(i0+tileBlock, nc), ni, dsc, ssi)
	}
}

// transposePlane copies rows [i0, i1) (at most tileBlock) of an nc×ni
// plane in square tiles: dst[do+i*dsc+j] = src[so+i+j*ssi]. It is kept
// small so that its loop variables stay in registers.
func transposePlane[T any](dst, src []T, do, so, i0, i1, ni, dsc, ssi int) {
	for j0 := 0; j0 < ni; j0 += tileBlock {
		j1 := min(j0+tileBlock, ni)
		for i := i0; i < i1; i++ {
			d := dst[do+i*dsc+j0 : do+i*dsc+j1]
			s := so + i + j0*ssi
			for j := range d {
				d[j] = src[s]
				s += ssi
			}
		}
	}
}

// fillRow sets every element of row to v (float32 rows with fill32).
func fillRow[T any](row []T, v T) {
	if r, ok := any(row).([]float32); ok {
		fill32(r, any(v).(float32))
		return
	}
	for j := range row {
		row[j] = v
	}
}

// fill32 sets every element of row to v, from the first 8-byte boundary
// two elements a store (a 7×7 plane of the global pool's gradient in 26
// stores instead of 49).
func fill32(row []float32, v float32) {
	if len(row) < 8 {
		for j := range row {
			row[j] = v
		}
		return
	}
	if uintptr(unsafe.Pointer(&row[0]))%8 != 0 {
		row[0] = v
		row = row[1:]
	}
	b := uint64(math.Float32bits(v))
	pair := b | b<<32
	pairs := unsafe.Slice((*uint64)(unsafe.Pointer(&row[0])), len(row)/2)
	j := 0
	for ; j+4 <= len(pairs); j += 4 {
		pairs[j], pairs[j+1], pairs[j+2], pairs[j+3] = pair, pair, pair, pair
	}
	for ; j < len(pairs); j++ {
		pairs[j] = pair
	}
	if len(row)%2 == 1 {
		row[len(row)-1] = v
	}
}
