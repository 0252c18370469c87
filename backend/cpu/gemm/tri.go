package gemm

import "math"

// Tri is a structure of a product C = op(A)·op(B) with square triangular
// parts (causal attention's: its masked scores, its probabilities and
// their gradient are zero or unread on one side of the diagonal) that
// SgemmSerialTri skips.
type Tri uint8

const (
	TriNone   Tri = iota
	TriALower     // op(A)[i, l] = 0 for l > i: row i sums l ≤ i only
	TriAUpper     // op(A)[i, l] = 0 for l < i: row i sums l ≥ i only
	TriBLower     // op(B)[l, j] = 0 for j > l: column j sums l ≥ j only
	TriBUpper     // op(B)[l, j] = 0 for l > j: column j sums l ≤ j only
	TriCLower     // C[i, j] is read only for j ≤ i
	TriCUpper     // C[i, j] is read only for j ≥ i
)

// Transposed is the structure of the transposed product Cᵀ = op(B)ᵀ·op(A)ᵀ.
func (t Tri) Transposed() Tri {
	switch t {
	case TriALower:
		return TriBUpper
	case TriAUpper:
		return TriBLower
	case TriBLower:
		return TriAUpper
	case TriBUpper:
		return TriALower
	case TriCLower:
		return TriCUpper
	case TriCUpper:
		return TriCLower
	}
	return TriNone
}

// SgemmSerialTri is SgemmSerialNext with beta 0 for a product of structure
// tri: it packs both operands once and runs the micro-kernel over each
// tile of C on only the shared indices that tri leaves nonzero for the
// tile's rows (TriALower, TriAUpper) or columns (TriBLower, TriBUpper),
// and skips the tiles of C wholly on the side nothing reads (TriCLower,
// TriCUpper), writing *fill there instead (fill nil leaves them as they
// were, for a caller that reads none of their elements: at T = 1024 the
// fill was half the causal scores' time); a tile the diagonal crosses is
// computed whole. About half a square product's work, in one call, where
// cutting it into GEMMs over blocks did three quarters of it and packed
// and set up each block again.
//
// Every element of C that tri says is read is bit for bit what
// SgemmSerialNext stores: the kernel sums each element's shared indices
// in order in one accumulator (k fits one k block), and the terms skipped
// are products with an exact zero, which leave such a sum unchanged
// while the values are finite (a NaN or ±inf where the structure says
// zero no longer spreads). It reports false, and writes nothing, where it
// does not apply — k deeper than the kernel's k block, a product small or
// thin enough that SgemmSerialNext would not pack it, tri TriNone — and
// the caller computes the product another way.
func SgemmSerialTri(tri Tri, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, fill *float32, next *Operands) bool {
	mk := kernel
	if tri == TriNone || m <= 0 || n <= 0 || k <= 0 || k > mk.kc || DirectLoops(m, n, k) {
		return false
	}
	p := problem{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha,
		a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc}
	if p.thinOK(mk, 0, m, 0, n) {
		return false
	}
	buf := bufferPool.Get().(*buffers)
	defer bufferPool.Put(buf)
	mr, nr := mk.mr, mk.nr
	mstrips, nstrips := (m+mr-1)/mr, (n+nr-1)/nr
	buf.a = grow(buf.a, mstrips*mr*k)
	buf.b = grow(buf.b, nstrips*nr*k)
	pair := mk.pairS != nil
	// The structures of C sum every shared index: their full A strips are
	// read in place where the pair kernel runs every column step (each
	// strip feeds only the column steps up to the diagonal, too few to
	// repay packing it: the GPT's scores and dP 0.81-0.86 → 0.77-0.79 of
	// the whole products' time, BenchmarkAttentionCausalGPT at -cpu 1).
	inPlaceA := (tri == TriCLower || tri == TriCUpper) && pair && mk.pairA != nil && n%(2*nr) == 0 && (!transA || pairATransposed)
	rs, ks := lda, 1
	if transA {
		rs, ks = 1, lda
	}
	// Each operand is packed whole, or, where tri makes a part of it zero,
	// each row strip of A or column step of B over the shared indices its
	// tiles sum (the rest of the buffer is never read).
	switch tri {
	case TriALower, TriAUpper:
		for ir := 0; ir < m; ir += mr {
			mb := min(mr, m-ir)
			if k0, k1, _ := triTile(tri, ir, mb, 0, n, k); k0 < k1 {
				p.packA(buf.a[ir*k+k0*mr:], ir, mb, k0, k1-k0, mr)
			}
		}
	default:
		if !inPlaceA {
			p.packA(buf.a, 0, m, 0, k, mr)
		} else if full := m / mr * mr; full < m {
			p.packA(buf.a[full*k:], full, m-full, 0, k, mr)
		}
	}
	switch tri {
	case TriBLower, TriBUpper:
		for jr := 0; jr < n; {
			w := triStep(pair, jr, n, nr)
			nb := min(w, n-jr)
			if k0, k1, _ := triTile(tri, 0, m, jr, nb, k); k0 < k1 {
				for js := jr; js < jr+nb; js += nr {
					p.packB(buf.b[js*k+k0*nr:], k0, k1-k0, js, min(nr, jr+nb-js), nr)
				}
			}
			jr += w
		}
	default:
		p.packB(buf.b, 0, k, 0, n, nr)
	}
	var after [2]Region
	if next != nil {
		after = nextRegions(&p, next)
	}
	steps := 0 // column steps
	for jr := 0; jr < n; jr += triStep(pair, jr, n, nr) {
		steps++
	}
	pf := newSpreadPrefetch(after, mstrips*steps)
	tile := buf.tile[:]
	for jr := 0; jr < n; {
		w := triStep(pair, jr, n, nr)
		nb := min(w, n-jr)
		for ir := 0; ir < m; ir += mr {
			pf.step()
			mb := min(mr, m-ir)
			cs := c[ir*ldc+jr:]
			k0, k1, skip := triTile(tri, ir, mb, jr, nb, k)
			switch {
			case skip:
				if fill != nil {
					fillTile(cs, ldc, mb, nb, *fill)
				}
				continue
			case k1 <= k0: // every term zero: the kernel would store alpha·(+0)
				fillTile(cs, ldc, mb, nb, 0*alpha)
				continue
			}
			as := buf.a[ir*k+k0*mr : ir*k+k1*mr]
			b1 := buf.b[jr*k+k0*nr : jr*k+k1*nr]
			kk := k1 - k0
			if w > nr {
				b2 := buf.b[(jr+nr)*k+k0*nr : (jr+nr)*k+k1*nr]
				if mb == mr {
					if inPlaceA {
						mk.pairA(kk, a[ir*rs:], rs, ks, buf.b[jr*k:jr*k+2*nr*k], cs, ldc, alpha, 0)
						continue
					}
					mk.pairS(kk, as, b1, b2, cs, ldc, alpha, 0)
					continue
				}
				mk.pairS(kk, as, b1, b2, tile, 2*nr, alpha, 0)
				storeRun(cs, ldc, tile, 2*nr, mb, 2*nr, 0)
				continue
			}
			if mb == mr && nb == nr {
				mk.fn(kk, as, b1, cs, ldc, alpha, 0)
				continue
			}
			mk.fn(kk, as, b1, tile, nr, alpha, 0)
			storeRun(cs, ldc, tile, nr, mb, nb, 0)
		}
		jr += w
	}
	return true
}

// triStep is the width of the column step at jr: a pair of strips where
// two full ones remain and the kernel has pairs, else one strip.
func triStep(pair bool, jr, n, nr int) int {
	if pair && jr+2*nr <= n {
		return 2 * nr
	}
	return nr
}

// triTile returns the shared indices [k0, k1) that the tile of C at rows
// [i0, i0+mb) and columns [j0, j0+nb) sums under tri, or skip when nothing
// reads the tile.
func triTile(tri Tri, i0, mb, j0, nb, k int) (k0, k1 int, skip bool) {
	k1 = k
	switch tri {
	case TriALower:
		k1 = min(k, i0+mb)
	case TriAUpper:
		k0 = min(i0, k)
	case TriBLower:
		k0 = min(j0, k)
	case TriBUpper:
		k1 = min(k, j0+nb)
	case TriCLower:
		skip = j0 > i0+mb-1
	case TriCUpper:
		skip = j0+nb-1 < i0
	}
	return k0, k1, skip
}

// fillTile sets the rows×cols block of c (rows ldc apart) to v.
func fillTile(c []float32, ldc, rows, cols int, v float32) {
	plusZero := v == 0 && !math.Signbit(float64(v))
	for i := 0; i < rows; i++ {
		row := c[i*ldc : i*ldc+cols]
		if plusZero {
			clear(row)
			continue
		}
		for j := range row {
			row[j] = v
		}
	}
}
