//go:build amd64 && !purego

package nn

import "golang.org/x/sys/cpu"

// The AVX2 transform passes of the Winograd filter gradient are in
// winograd_filter_amd64.s.

//go:noescape
func wgradVertAddAVX2(s *float32, seg int, x, zero *float32, ta, tb *int, rows, full int, mask *int32)

//go:noescape
func wgradVertSubAVX2(s *float32, seg int, x, zero *float32, ta, tb *int, rows, full int, mask *int32)

//go:noescape
func wgradVertCopyAVX2(s *float32, seg int, x, zero *float32, ta, tb *int, rows, full int, mask *int32)

//go:noescape
func wgradVertNegAVX2(s *float32, seg int, x, zero *float32, ta, tb *int, rows, full int, mask *int32)

//go:noescape
func wgradHorzXAVX2(out *float32, ld int, s *float32, nsg, gps, sgstride, boff int)

//go:noescape
func wgradHorzYAVX2(out *float32, ld int, s *float32, nsg, gps, sgstride, boff int)

//go:noescape
func wgradOutputAVX2(dw, u *float32, ld, groups int, acc bool)

//go:noescape
func wgradHorzXGatherAVX2(out *float32, ld int, s *float32, idx *int32, groups int)

//go:noescape
func wgradHorzYGatherAVX2(out *float32, ld int, s *float32, idx *int32, groups int)

func init() {
	if cpu.X86.HasAVX2 {
		wgradPass = wgradPasses{
			vert:  wgradVertAsm,
			horzX: wgradHorzXAsm, horzY: wgradHorzYAsm,
			horzXIdx: wgradHorzXIdxAsm, horzYIdx: wgradHorzYIdxAsm,
			output: wgradOutputAsm,
		}
	}
}

// wgradTailMasks[r] has its first r lanes set: the columns of a last,
// partial group of 8.
var wgradTailMasks = func() (m [8][8]int32) {
	for r := range m {
		for j := 0; j < r; j++ {
			m[r][j] = -1
		}
	}
	return m
}()

// wgradVertAsm is wgradVertGo in assembly, its bounds checked here: every
// row it reads (at each table offset, or the zero row) and every segment
// it writes. A last partial group of 8 columns is loaded and stored under
// a mask, which touches nothing past the n columns.
func wgradVertAsm(op wgradOp, s []float32, seg int, x, zero []float32, ta, tb []int, n int) {
	rows := len(ta)
	if rows == 0 || n <= 0 {
		return
	}
	tb = tb[:rows]
	_ = s[(rows-1)*seg+n-1]
	_ = zero[n-1]
	maxOff := -1
	for q, o := range ta {
		maxOff = max(maxOff, o, tb[q])
	}
	if maxOff >= 0 {
		_ = x[maxOff+n-1]
	}
	var mask *int32
	if n%8 != 0 {
		mask = &wgradTailMasks[n%8][0]
	}
	switch op {
	case wgradAdd:
		wgradVertAddAVX2(&s[0], seg, &x[0], &zero[0], &ta[0], &tb[0], rows, n/8, mask)
	case wgradSub:
		wgradVertSubAVX2(&s[0], seg, &x[0], &zero[0], &ta[0], &tb[0], rows, n/8, mask)
	case wgradCopy:
		wgradVertCopyAVX2(&s[0], seg, &x[0], &zero[0], &ta[0], &tb[0], rows, n/8, mask)
	default:
		wgradVertNegAVX2(&s[0], seg, &x[0], &zero[0], &ta[0], &tb[0], rows, n/8, mask)
	}
}

// wgradHorzXAsm is wgradHorzXGo in assembly (tiles of each group of 8 in
// the slot order 0 1 4 5 2 3 6 7).
func wgradHorzXAsm(out []float32, ld int, s []float32, gr wgradGroups) {
	if gr.count() <= 0 {
		return
	}
	_ = s[(gr.nsg-1)*gr.sgstride+16*(gr.gps-1)+gr.boff+9]
	_ = out[3*ld+8*gr.count()-1]
	wgradHorzXAVX2(&out[0], ld, &s[0], gr.nsg, gr.gps, gr.sgstride, gr.boff)
}

// wgradHorzYAsm is wgradHorzYGo in assembly, in wgradHorzXAsm's order.
func wgradHorzYAsm(out []float32, ld int, s []float32, gr wgradGroups) {
	if gr.count() <= 0 {
		return
	}
	_ = s[(gr.nsg-1)*gr.sgstride+16*(gr.gps-1)+gr.boff+7]
	_ = out[3*ld+8*gr.count()-1]
	wgradHorzYAVX2(&out[0], ld, &s[0], gr.nsg, gr.gps, gr.sgstride, gr.boff)
}

// wgradHorzXIdxAsm is wgradHorzXIdxGo in assembly (len(idx.at) a
// multiple of 8). The columns' range is checked here: VGATHERDPS reads
// wherever they point.
func wgradHorzXIdxAsm(out []float32, ld int, s []float32, idx wgradCols) {
	if len(idx.at) == 0 {
		return
	}
	wgradCheckIdx(idx, len(s)-4)
	_ = out[3*ld+len(idx.at)-1]
	wgradHorzXGatherAVX2(&out[0], ld, &s[0], &idx.at[0], len(idx.at)/8)
}

// wgradHorzYIdxAsm is wgradHorzYIdxGo in assembly, like wgradHorzXIdxAsm.
func wgradHorzYIdxAsm(out []float32, ld int, s []float32, idx wgradCols) {
	if len(idx.at) == 0 {
		return
	}
	wgradCheckIdx(idx, len(s)-2)
	_ = out[3*ld+len(idx.at)-1]
	wgradHorzYGatherAVX2(&out[0], ld, &s[0], &idx.at[0], len(idx.at)/8)
}

// wgradCheckIdx panics unless len(idx.at) is a multiple of 8 and every
// column is in [0, limit].
func wgradCheckIdx(idx wgradCols, limit int) {
	if len(idx.at)%8 != 0 {
		panic("nn: Winograd gather of a partial group")
	}
	if idx.lo < 0 || idx.hi > limit {
		panic("nn: Winograd gather column out of range")
	}
}

// wgradOutputAsm is wgradOutputGo with whole groups of 8 channels in
// assembly (bounds checked here) and the rest in Go.
func wgradOutputAsm(dw, u []float32, ld, n int, acc bool) {
	if n8 := n &^ 7; n8 > 0 {
		_ = u[15*ld+n8-1]
		_ = dw[9*n8-1]
		wgradOutputAVX2(&dw[0], &u[0], ld, n8/8, acc)
		if n8 == n {
			return
		}
		dw, u, n = dw[9*n8:], u[n8:], n-n8
	}
	wgradOutputGo(dw, u, ld, n, acc)
}
