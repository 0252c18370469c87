package shape

import (
	"fmt"
)

// concatInto copies srcs into dst, which is laid out as outer rows; row o of
// dst holds, one after another, row o of each source (runs[i] elements of
// source i). Every source must hold dst's element type. Every element of
// dst is written.
func concatInto(dst any, srcs []any, runs []int, outer int) error {
	return concatRange(dst, srcs, runs, outer, 0, dataLen(dst))
}

// concatRange is concatInto for the elements [lo, hi) of dst only.
func concatRange(dst any, srcs []any, runs []int, outer, lo, hi int) error {
	switch d := dst.(type) {
	case []float32:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []float64:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []int8:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []int16:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []int32:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []int64:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []uint8:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []uint16:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []uint32:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []uint64:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []bool:
		return concatOf(d, srcs, runs, outer, lo, hi)
	case []string:
		return concatOf(d, srcs, runs, outer, lo, hi)
	}
	return fmt.Errorf("tensor data of Go type %T is not supported", dst)
}

func concatOf[T any](dst []T, srcAny []any, runs []int, outer, lo, hi int) error {
	var buf [8][]T // (on the stack for up to 8 inputs)
	srcs := buf[:0]
	if len(srcAny) <= len(buf) {
		srcs = buf[:len(srcAny)]
	} else {
		srcs = make([][]T, len(srcAny))
	}
	row := 0
	for i, s := range srcAny {
		t, ok := s.([]T)
		if !ok {
			return fmt.Errorf("input %d holds %T, want %T", i, s, dst)
		}
		srcs[i] = t
		row += runs[i]
	}
	if row == 0 || lo >= hi {
		return nil
	}
	// Start at the run of row lo/row that holds element lo.
	o, p := lo/row, lo
	i, off := 0, lo%row
	for off >= runs[i] {
		off -= runs[i]
		i++
	}
	for p < hi && o < outer {
		for ; i < len(srcs) && p < hi; i++ {
			r := runs[i]
			k := min(r-off, hi-p)
			if k > 0 {
				copy(dst[p:p+k], srcs[i][o*r+off:o*r+off+k])
				p += k
			}
			off = 0
		}
		i = 0
		o++
	}
	return nil
}

// copySpans copies each span from src into dst (span.dst and span.src are
// absolute offsets); a fill span stores fill[0] (the zero value when fill is
// nil) instead.
func copySpans(dst, src any, spans []span, fill any) error {
	switch d := dst.(type) {
	case []float32:
		return copySpansOf(d, src, spans, fill)
	case []float64:
		return copySpansOf(d, src, spans, fill)
	case []int8:
		return copySpansOf(d, src, spans, fill)
	case []int16:
		return copySpansOf(d, src, spans, fill)
	case []int32:
		return copySpansOf(d, src, spans, fill)
	case []int64:
		return copySpansOf(d, src, spans, fill)
	case []uint8:
		return copySpansOf(d, src, spans, fill)
	case []uint16:
		return copySpansOf(d, src, spans, fill)
	case []uint32:
		return copySpansOf(d, src, spans, fill)
	case []uint64:
		return copySpansOf(d, src, spans, fill)
	case []bool:
		return copySpansOf(d, src, spans, fill)
	case []string:
		return copySpansOf(d, src, spans, fill)
	}
	return fmt.Errorf("tensor data of Go type %T is not supported", dst)
}

func copySpansOf[T any](dst []T, srcAny any, spans []span, fillAny any) error {
	src, fill, err := typedPair(dst, srcAny, fillAny)
	if err != nil {
		return err
	}
	for _, s := range spans {
		seg := dst[s.dst : s.dst+s.n]
		if s.fill {
			for j := range seg {
				seg[j] = fill
			}
			continue
		}
		copy(seg, src[s.src:s.src+s.n])
	}
	return nil
}

// dataLen is the length of a tensor's data slice (-1 for an unknown type).
func dataLen(data any) int {
	switch d := data.(type) {
	case []float32:
		return len(d)
	case []float64:
		return len(d)
	case []int8:
		return len(d)
	case []int16:
		return len(d)
	case []int32:
		return len(d)
	case []int64:
		return len(d)
	case []uint8:
		return len(d)
	case []uint16:
		return len(d)
	case []uint32:
		return len(d)
	case []uint64:
		return len(d)
	case []bool:
		return len(d)
	case []string:
		return len(d)
	}
	return -1
}
