//go:build amd64 && !purego

package gemm

// Packing routines in pack_amd64.s, used when the AVX2 kernel is active
// (they need only AVX, which every AVX2 CPU has).

//go:noescape
func packPanel16(dst, src *float32, ld, kc, rows, strips int)

//go:noescape
func packPanel6(dst, src *float32, ld, kc, rows, strips int)

//go:noescape
func prefetchRows(p *float32, ld, rows, bytes int)

//go:noescape
func packInterleave6(dst, src *float32, ld, kc int)

//go:noescape
func packTranspose8(dst, src *float32, ld, kc16 int)

//go:noescape
func gatherRows16(dst *float32, ldd int, src *float32, offs *int, n, limit int) (ok bool)

//go:noescape
func gatherTransposed16(dst, src *float32, offs *int, blocks, limit int) (ok bool)

//go:noescape
func gatherRows8(dst *float32, ldd int, src *float32, offs *int, n, limit int) (ok bool)

func init() {
	if hasAVX2FMA {
		packPanel16Fn = packPanel16Asm
		packPanel6Fn = packPanel6Asm
		packRows6Fn = packRows6Asm
		packCols16TFn = packCols16TAsm
		prefetchRowsFn = prefetchRowsAsm
		gatherRowsFn = gatherRowsAsm
		gatherTransposedFn = gatherTransposedAsm
	}
}

// packPanel16Asm is packPanel16Go with the rows in multiples of 4 in
// assembly.
func packPanel16Asm(dst, src []float32, ld, kc, strips int) {
	if strips == 0 {
		return
	}
	_ = dst[strips*16*kc-1]
	_ = src[(kc-1)*ld+strips*16-1]
	rows := kc &^ 3
	if rows > 0 {
		packPanel16(&dst[0], &src[0], ld, kc, rows, strips)
	}
	packPanelRows(dst, src, ld, kc, rows, strips, 16)
}

// packPanel6Asm is packPanel6Go with the rows in multiples of 8 in
// assembly.
func packPanel6Asm(dst, src []float32, ld, kc, strips int) {
	if strips == 0 {
		return
	}
	_ = dst[strips*6*kc-1]
	_ = src[(kc-1)*ld+strips*6-1]
	rows := kc &^ 7
	if rows > 0 {
		packPanel6(&dst[0], &src[0], ld, kc, rows, strips)
	}
	packPanelRows(dst, src, ld, kc, rows, strips, 6)
}

// packRows6Asm is packRows6Go in assembly.
func packRows6Asm(dst, src []float32, ld, kc int) {
	_ = dst[6*kc-1]
	_ = src[5*ld+kc-1]
	packInterleave6(&dst[0], &src[0], ld, kc)
}

// packCols16TAsm is packCols16TGo with the k steps in multiples of 16 in
// assembly.
func packCols16TAsm(dst, src []float32, ld, kc int) {
	_ = dst[16*kc-1]
	_ = src[15*ld+kc-1]
	kc16 := kc &^ 15
	if kc16 > 0 {
		packTranspose8(&dst[0], &src[0], ld, kc16)
		packTranspose8(&dst[8], &src[8*ld], ld, kc16)
	}
	for j := 0; j < 16; j++ {
		row := src[j*ld : j*ld+kc]
		for q := kc16; q < kc; q++ {
			dst[q*16+j] = row[q]
		}
	}
}

// prefetchRowsAsm prefetches the first width elements of rows rows of
// src, ld apart.
func prefetchRowsAsm(src []float32, ld, rows, width int) {
	if rows <= 0 || width <= 0 {
		return
	}
	_ = src[(rows-1)*ld+width-1]
	prefetchRows(&src[0], ld, rows, width*4)
}

// gatherRowsAsm is gatherRowsGo with runs of 16 and 8 in assembly, which
// checks each offset against the end of src as it goes; the caller
// (GatherRows) has checked dst and that src holds at least width values.
func gatherRowsAsm(dst []float32, ldd int, src []float32, offs []int, width int) bool {
	limit := len(src) - width
	switch width {
	case 16:
		return gatherRows16(&dst[0], ldd, &src[0], &offs[0], len(offs), limit)
	case 8:
		return gatherRows8(&dst[0], ldd, &src[0], &offs[0], len(offs), limit)
	}
	return gatherRowsGo(dst, ldd, src, offs, width)
}

// gatherTransposedAsm is gatherTransposedGo in assembly (n a multiple of
// 8), which checks the offsets against the end of src; GatherTransposed
// has checked dst and src's length.
func gatherTransposedAsm(dst, src []float32, offs []int, n int) bool {
	return gatherTransposed16(&dst[0], &src[0], &offs[0], n/8, len(src)-n)
}
