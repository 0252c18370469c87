package shape

import (
	"fmt"
)

// concatInto copies srcs into dst, which is laid out as outer rows; row o of
// dst holds, one after another, row o of each source (runs[i] elements of
// source i). Every source must hold dst's element type.
func concatInto(dst any, srcs []any, runs []int, outer int) error {
	switch d := dst.(type) {
	case []float32:
		return concatOf(d, srcs, runs, outer)
	case []float64:
		return concatOf(d, srcs, runs, outer)
	case []int8:
		return concatOf(d, srcs, runs, outer)
	case []int16:
		return concatOf(d, srcs, runs, outer)
	case []int32:
		return concatOf(d, srcs, runs, outer)
	case []int64:
		return concatOf(d, srcs, runs, outer)
	case []uint8:
		return concatOf(d, srcs, runs, outer)
	case []uint16:
		return concatOf(d, srcs, runs, outer)
	case []uint32:
		return concatOf(d, srcs, runs, outer)
	case []uint64:
		return concatOf(d, srcs, runs, outer)
	case []bool:
		return concatOf(d, srcs, runs, outer)
	case []string:
		return concatOf(d, srcs, runs, outer)
	}
	return fmt.Errorf("tensor data of Go type %T is not supported", dst)
}

func concatOf[T any](dst []T, srcAny []any, runs []int, outer int) error {
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
	p := 0
	for o := 0; o < outer; o++ {
		for i, s := range srcs {
			r := runs[i]
			if r == 0 {
				continue
			}
			copy(dst[p:p+r], s[o*r:o*r+r])
			p += r
		}
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
