package nn

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// The input gradient of a strided window, split by stride phase.
//
// With strides SH×SW (no dilation), the values of dX whose padded row r
// and column c are congruent to ρ and σ (mod SH, SW) receive only the taps
// a ≡ ρ, b ≡ σ: padded row r = SH·i + ρ reads dY rows i − t with taps
// a = ρ + SH·t. Each of the SH·SW phases of dX is therefore a stride-1
// correlation of dY with its own ⌈(KH−ρ)/SH⌉ × ⌈(KW−σ)/SW⌉ taps of the
// kernel (flipped, channel axes swapped), and together the phases do the
// direct product's multiplications and no more. Each phase runs as one
// implicit product over the batch, like the stride-1 input gradient (B
// packed from dY, padded once for all phases; A packed from W's taps of
// the phase), into its own block of a scratch matrix; one pass at the end
// interleaves the phases into dX. This replaces a GEMM into im2col columns
// (C·KH·KW rows) followed by col2im's scatter-add.

// maxPhases bounds SH·SW for the phased input gradient (the phases are
// kept in a fixed array, so that a call allocates nothing).
const maxPhases = 16

// maxPhasedTaps bounds KH·KW for the phased input gradient (the kernel's
// taps are mapped to their phases in a fixed array).
const maxPhasedTaps = 64

// phasedByCost makes InputGrad take the phased path only where it pays
// (phasedPays); tests turn it off to run it on every geometry it handles.
var phasedByCost = true

// phasedPays reports whether the phased input gradient beats package
// gradient's GEMM into im2col columns and col2im for g. Its extra memory
// passes go over W (the phases' kernels written and packed: three
// passes) and dX (the interleave: two); col2im's over its columns, about
// KH·KW/(SH·SW) times dX, and it splits worse over the cores. Measured on
// ResNet-50's stride-2 3×3 layers at batch 8 (BenchmarkConvGradResNet50Strided,
// docs/large-models.md): at 56×56 with 128 channels (W a twentieth of dX)
// the phases take 10.2 ms against 16.2 on two cores, at 28×28 with 256
// (W 0.37 of dX) 9.7 against 8.2, at 14×14 with 512 (W 2.9 times dX)
// 10.2 against 8.1; ResNet-18's at 16×16 with 64 channels, batch 32
// (BenchmarkConvGradResNet64, W 0.14 of dX, 8×8 phases), 2.2 against
// 1.9–2.1. So: W at most an eighth of dX, and enough input channels that
// the phases' products (C rows) are not a few rows (an RGB stem's three).
func (g *Conv2D) phasedPays() bool {
	return !phasedByCost || g.C >= 16 && 8*g.M*g.KH*g.KW <= g.N*g.H*g.W
}

// inputPhase is one stride phase of dX: padded rows SH·(i0+u) + rho and
// columns SW·(j0+v) + sigma for u < h, v < w, which read kh×kw taps of the
// kernel; as a stride-1 correlation over dY, with pt and pl its top and
// left pads.
type inputPhase struct {
	rho, sigma int
	kh, kw     int
	i0, j0     int
	h, w       int
	pt, pl     int
}

// phaseAxis works out one axis of a phase: the taps of phase rho of a
// kernel k with stride s and begin pad p over an input of n, the first
// phase index i0, how many positions (cnt) and the pad of the stride-1
// correlation (k' − 1 − i0).
func phaseAxis(rho, k, s, p, n int) (taps, i0, cnt, pad int) {
	if rho < k {
		taps = (k - rho + s - 1) / s
	}
	i0 = (p - rho + s - 1) / s
	if last := n - 1 + p - rho; last >= 0 {
		cnt = max(0, last/s-i0+1)
	}
	return taps, i0, cnt, taps - 1 - i0
}

// inputPhases fills ph with g's phases and reports whether the phased
// input gradient handles g: strides above 1 on some axis, unit
// dilations, at most maxPhases phases and maxPhasedTaps taps, a shape
// where the phases pay (phasedPays), and pads that leave every phase's
// correlation a non-negative top and left pad.
func (g *Conv2D) inputPhases(ph *[maxPhases]inputPhase) (n int, ok bool) {
	if g.SH < 1 || g.SW < 1 || g.SH == 1 && g.SW == 1 || g.DH != 1 || g.DW != 1 ||
		g.SH*g.SW > maxPhases || g.PadTop < 0 || g.PadLeft < 0 || g.KH < 1 || g.KW < 1 ||
		g.KH*g.KW > maxPhasedTaps || !g.phasedPays() {
		return 0, false
	}
	for rho := 0; rho < g.SH; rho++ {
		kh, i0, h, pt := phaseAxis(rho, g.KH, g.SH, g.PadTop, g.H)
		for sigma := 0; sigma < g.SW; sigma++ {
			kw, j0, w, pl := phaseAxis(sigma, g.KW, g.SW, g.PadLeft, g.W)
			if kh > 0 && kw > 0 && h > 0 && w > 0 && (pt < 0 || pl < 0) {
				return 0, false
			}
			ph[n] = inputPhase{rho: rho, sigma: sigma, kh: kh, kw: kw, i0: i0, j0: j0, h: h, w: w, pt: max(pt, 0), pl: max(pl, 0)}
			n++
		}
	}
	return n, true
}

// active reports whether the phase has positions and taps (a phase with no
// taps is zero in dX).
func (p *inputPhase) active() bool {
	return p.kh > 0 && p.kw > 0 && p.h > 0 && p.w > 0
}

// phasedLayout is what the phased input gradient allocates: dY padded
// once for every phase (pt, pl the top and left pads, hp, wp the padded
// plane), the phases' products (phase p's C × N·h·w block at off[p]) and
// their kernels (phase p's C × M·kh·kw matrix at woff[p]; all phases
// together hold W's values once).
type phasedLayout struct {
	pt, pl, hp, wp int
	off            [maxPhases + 1]int
	woff           [maxPhases + 1]int
}

func (g *Conv2D) phasedLayoutOf(ph []inputPhase) phasedLayout {
	var lay phasedLayout
	for i := range ph {
		if p := &ph[i]; p.active() {
			lay.pt, lay.pl = max(lay.pt, p.pt), max(lay.pl, p.pl)
		}
	}
	lay.hp, lay.wp = lay.pt+g.OH, lay.pl+g.OW
	for i := range ph {
		p := &ph[i]
		lay.off[i+1] = lay.off[i]
		lay.woff[i+1] = lay.woff[i] + g.C*g.M*p.kh*p.kw
		if !p.active() {
			continue
		}
		// Phase p reads padded rows (lay.pt − p.pt) + u + a for u < h,
		// a < kh, and columns likewise.
		lay.hp = max(lay.hp, lay.pt-p.pt+p.h+p.kh-1)
		lay.wp = max(lay.wp, lay.pl-p.pl+p.w+p.kw-1)
		lay.off[i+1] += g.C * g.N * p.h * p.w
	}
	return lay
}

// padGeometry is the Conv2D whose pad copies dY (M channels, OH×OW) into
// the layout's zero-bordered planes.
func (g *Conv2D) padGeometry(lay *phasedLayout) Conv2D {
	return Conv2D{N: g.N, C: g.M, H: g.OH, W: g.OW, M: 1, KH: 1, KW: 1, SH: 1, SW: 1, DH: 1, DW: 1,
		PadTop: lay.pt, PadLeft: lay.pl, OH: lay.hp, OW: lay.wp}
}

// PhasedInputGradScratch reports whether InputGrad takes the phased path
// for g, and the float32 elements of the three scratch buffers it then
// holds at once: dY padded for all phases (0 when dY serves unpadded), the
// phases' products for phasedImages images (C·H·W each at most) and their
// kernels (M·C·KH·KW).
// Memory estimates use it.
func (g *Conv2D) PhasedInputGradScratch() (ok bool, padElems, outElems, weightElems int) {
	if g.oneByOne() {
		return false, 0, 0, 0
	}
	var ph [maxPhases]inputPhase
	n, ok := g.inputPhases(&ph)
	if !ok {
		return false, 0, 0, 0
	}
	lay := g.phasedLayoutOf(ph[:n])
	if lay.pt != 0 || lay.pl != 0 || lay.hp != g.OH || lay.wp != g.OW {
		padElems = g.N * g.M * lay.hp * lay.wp
	}
	gc := *g
	gc.N = g.phasedImages()
	return true, padElems, max(1, gc.phasedLayoutOf(ph[:n]).off[n]), max(1, lay.woff[n])
}

// inputGradPhased is InputGrad for a strided window (see inputPhases):
// dx is overwritten.
func (g *Conv2D) inputGradPhased(dy, w, dx []float32, ph []inputPhase) {
	I := g.H * g.W
	if g.N == 0 || g.C == 0 || I == 0 {
		return
	}
	if g.M == 0 || g.OH*g.OW == 0 {
		clear(dx[:g.N*g.C*I])
		return
	}
	lay := g.phasedLayoutOf(ph)
	gp := g.padGeometry(&lay)
	dyp := gp.pad(dy)
	defer dyp.release()
	nb := g.phasedImages()
	wt := scratch[float32](max(1, lay.woff[len(ph)]))
	defer release(wt)
	g.phaseKernels(w, wt, ph, &lay)
	gc := *g
	gc.N = nb
	out := scratch[float32](max(1, gc.phasedLayoutOf(ph).off[len(ph)]))
	defer release(out)
	pk := kern.TakeBox[columnPacker]()
	defer kern.PutBox(pk)
	plane := dyp.hp * dyp.wp
	// nb images at a time: their phases' products stay in the outer
	// caches until the interleave reads them.
	for i0 := 0; i0 < g.N; i0 += nb {
		gc.N = min(nb, g.N-i0)
		lc := gc.phasedLayoutOf(ph)
		for i := range ph {
			p := &ph[i]
			if !p.active() {
				continue
			}
			gt := Conv2D{N: gc.N, C: g.M, H: g.OH, W: g.OW, M: g.C, KH: p.kh, KW: p.kw,
				SH: 1, SW: 1, DH: 1, DW: 1, PadTop: p.pt, PadLeft: p.pl, OH: p.h, OW: p.w}
			// The phase's pads are at most the layout's: its planes
			// start (lay.pt − pt) rows and (lay.pl − pl) columns in.
			at := i0*g.M*plane + (lay.pt-p.pt)*dyp.wp + lay.pl - p.pl
			*pk = columnPacker{g: gt, xp: padded{x: dyp.x[at:], hp: dyp.hp, wp: dyp.wp, pw: dyp.wp}}
			NL, K := gc.N*p.h*p.w, g.M*p.kh*p.kw
			pp := gemm.PackedProduct{M: g.C, N: NL, K: K,
				A: wt[lay.woff[i]:lay.woff[i+1]], LDA: K,
				BPacker: pk,
				C:       out[lc.off[i]:lc.off[i+1]], LDC: NL, NC: implicitNC(g.C)}
			pp.Run()
		}
		planes := gc.N * g.C
		per := max(1, padChunk/I)
		items := (planes + per - 1) / per
		t := interleaveTask{g: gc, out: out, dx: dx[i0*g.C*I:], per: per, planes: planes, lay: lc}
		copy(t.ph[:], ph)
		ParallelItemsOf(items, nnWorkers(items, per*I), false, t)
	}
}

// phasedChunk is about how many float32 elements of dX the phased input
// gradient computes between interleaves (1 MiB): the phases' products
// are read back from the outer caches rather than memory. Tests lower it.
var phasedChunk = 1 << 18

// phasedImages is how many images the phased input gradient runs at a
// time: as many as fit phasedChunk elements of dX, at least one.
func (g *Conv2D) phasedImages() int {
	return max(1, min(g.N, phasedChunk/max(1, g.C*g.H*g.W)))
}

// phaseKernels writes each phase's kernel into wt (phase p's at
// lay.woff[p]): a C × M·kh·kw matrix, wt[c, (m, a', b')] = W[m, c, ρ +
// SH·(kh−1−a'), σ + SW·(kw−1−b')] (the correlation's kernel is the
// phase's taps flipped, its channel axes swapped). One pass over W,
// split by input channel.
func (g *Conv2D) phaseKernels(w, wt []float32, ph []inputPhase, lay *phasedLayout) {
	t := phaseKernelTask{g: *g, w: w, wt: wt}
	for a := 0; a < g.KH; a++ {
		for b := 0; b < g.KW; b++ {
			k := (a%g.SH)*g.SW + b%g.SW
			p := &ph[k]
			// Tap a is t = a/SH of its phase, a' = kh−1−t.
			at, bt := p.kh-1-a/g.SH, p.kw-1-b/g.SW
			t.phase[a*g.KW+b] = k
			t.pos[a*g.KW+b] = at*p.kw + bt
		}
	}
	for i := range ph {
		t.off[i] = lay.woff[i]
		t.taps[i] = ph[i].kh * ph[i].kw
	}
	items := (g.C + phaseKernelChans - 1) / phaseKernelChans
	ParallelItemsOf(items, nnWorkers(items, phaseKernelChans*g.M*g.KH*g.KW), false, t)
}

// phaseKernelChans is how many input channels one item of phaseKernels
// transposes.
const phaseKernelChans = 16

// phaseKernelTask is phaseKernels' work: item it writes rows [it·16,
// it·16+16) of every phase's kernel. Tap j of W (a·KW + b) goes to phase
// phase[j] at pos[j] within an output channel's taps[phase] columns.
type phaseKernelTask struct {
	g          Conv2D
	w, wt      []float32
	phase, pos [maxPhasedTaps]int
	off, taps  [maxPhases]int
}

func (t *phaseKernelTask) Item(_, it int) {
	g := &t.g
	ks := g.KH * g.KW
	c0, c1 := it*phaseKernelChans, min((it+1)*phaseKernelChans, g.C)
	var dst, step [maxPhasedTaps]int
	// Output channels phaseKernelMs at a time: the 16 channels' taps of
	// those rows of W stay in L1 while each channel's phase rows are
	// written as runs.
	for m0 := 0; m0 < g.M; m0 += phaseKernelMs {
		m1 := min(m0+phaseKernelMs, g.M)
		for c := c0; c < c1; c++ {
			for j := 0; j < ks; j++ {
				k := t.phase[j]
				step[j] = t.taps[k]
				dst[j] = t.off[k] + c*g.M*t.taps[k] + t.pos[j]
			}
			for m := m0; m < m1; m++ {
				src := t.w[(m*g.C+c)*ks : (m*g.C+c+1)*ks]
				for j, v := range src {
					t.wt[dst[j]+m*step[j]] = v
				}
			}
		}
	}
}

// phaseKernelMs is how many output channels phaseKernelTask reads at a
// time.
const phaseKernelMs = 8

// interleaveTask writes the phases' products into dX: item it fills the
// planes [it·per, (it+1)·per) of dx (plane (n, c)), each value from the
// phase of its padded row and column (zero for a phase with no taps).
type interleaveTask struct {
	g           Conv2D
	out, dx     []float32
	per, planes int
	lay         phasedLayout
	ph          [maxPhases]inputPhase
}

func (t *interleaveTask) Item(_, it int) {
	g, lay := &t.g, &t.lay
	I := g.H * g.W
	for pl := it * t.per; pl < min((it+1)*t.per, t.planes); pl++ {
		n, c := pl/g.C, pl%g.C
		plane := t.dx[pl*I : (pl+1)*I]
		for k := 0; k < g.SH*g.SW; k++ {
			p := &t.ph[k]
			if p.h == 0 || p.w == 0 {
				continue
			}
			if g.SW == 2 && k%2 == 0 && t.pairRows(plane, n, c, k) {
				// Both column phases of this row phase, done.
				k++
				continue
			}
			// Rows ih = SH·(i0+u) + ρ − PadTop, columns iw =
			// SW·(j0+v) + σ − PadLeft.
			top := g.SH*p.i0 + p.rho - g.PadTop
			first := g.SW*p.j0 + p.sigma - g.PadLeft
			span := (p.w-1)*g.SW + 1
			if !p.active() {
				for u := 0; u < p.h; u++ {
					d := plane[(top+u*g.SH)*g.W+first:]
					d = d[:span]
					for v := 0; v < span; v += g.SW {
						d[v] = 0
					}
				}
				continue
			}
			L := p.h * p.w
			src := t.out[lay.off[k]+(c*g.N+n)*L : lay.off[k]+(c*g.N+n+1)*L]
			for u := 0; u < p.h; u++ {
				d := plane[(top+u*g.SH)*g.W+first:]
				s := src[u*p.w : (u+1)*p.w]
				switch g.SW {
				case 1:
					copy(d[:p.w], s)
				case 2:
					d = d[:2*len(s)-1]
					for v, x := range s {
						d[2*v] = x
					}
				default:
					d = d[:span]
					for v, x := range s {
						d[v*g.SW] = x
					}
				}
			}
		}
	}
}

// pairRows writes the two column phases k and k+1 of a row phase (SW = 2)
// into their rows of plane (image n, channel c) in one pass per row, the
// columns of one phase interleaved with the other's: each dX row is then
// written once, in order, instead of every other value by each phase.
// It reports false, having written nothing, where the two phases do not
// tile their rows' columns as alternating pairs (a phase without taps,
// rows or columns; the phases' columns not next to each other), which the
// per-phase loop then handles.
func (t *interleaveTask) pairRows(plane []float32, n, c, k int) bool {
	g, lay := &t.g, &t.lay
	p, q := &t.ph[k], &t.ph[k+1]
	if !p.active() || !q.active() || p.h != q.h || p.i0 != q.i0 {
		return false
	}
	// Column phase σ's values lie at columns 2·(j0+v) + σ − PadLeft;
	// lo is the phase whose first column comes first.
	lo, hi := p, q
	loK, hiK := k, k+1
	fp, fq := 2*p.j0+p.sigma-g.PadLeft, 2*q.j0+q.sigma-g.PadLeft
	if fq < fp {
		lo, hi, loK, hiK, fp, fq = q, p, k+1, k, fq, fp
	}
	if fq != fp+1 || lo.w != hi.w && lo.w != hi.w+1 {
		return false
	}
	top := g.SH*p.i0 + p.rho - g.PadTop
	// Each phase's products are (channel, image) blocks of h·w.
	ll, lh := lo.h*lo.w, hi.h*hi.w
	srcLo := t.out[lay.off[loK]+(c*g.N+n)*ll : lay.off[loK]+(c*g.N+n+1)*ll]
	srcHi := t.out[lay.off[hiK]+(c*g.N+n)*lh : lay.off[hiK]+(c*g.N+n+1)*lh]
	for u := 0; u < p.h; u++ {
		at := (top+u*g.SH)*g.W + fp
		d := plane[at : at+lo.w+hi.w]
		interleave2(d, srcLo[u*lo.w:(u+1)*lo.w], srcHi[u*hi.w:(u+1)*hi.w])
	}
	return true
}

// interleave2 writes d[2v] = ev[v] and d[2v+1] = od[v] for v < len(od),
// and d[2·len(od)] = ev[len(od)] when ev is one longer (len(d) is
// len(ev) + len(od)): the inverse of deinterleave2 inside the image.
func interleave2(d, ev, od []float32) {
	n := len(od)
	d = d[:len(ev)+n]
	e, o, s := ev[:n], od, d[:2*n]
	if k := interleave2Blocks(s, e, o); k > 0 {
		e, o, s = e[k:], o[k:], s[2*k:]
	}
	for len(e) >= 4 {
		p := (*[8]float32)(s)
		e4, o4 := (*[4]float32)(e), (*[4]float32)(o)
		p[0], p[1], p[2], p[3] = e4[0], o4[0], e4[1], o4[1]
		p[4], p[5], p[6], p[7] = e4[2], o4[2], e4[3], o4[3]
		e, o, s = e[4:], o[4:], s[8:]
	}
	o = o[:len(e)]
	s = s[:2*len(e)]
	for j := range e {
		s[2*j], s[2*j+1] = e[j], o[j]
	}
	if len(ev) > n {
		d[2*n] = ev[n]
	}
}
