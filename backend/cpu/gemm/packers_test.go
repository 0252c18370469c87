package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// rowsPacker packs A (m×k row-major) as a PackedProduct.APacker.
type rowsPacker struct {
	a []float32
	k int
}

func (p *rowsPacker) PackA(dst []float32, i0, mc, p0, kc int) {
	mr, _ := KernelShape()
	for s := 0; s*mr < mc; s++ {
		PackRowsA(dst[s*mr*kc:(s+1)*mr*kc], 0, p.a[(i0+s*mr)*p.k+p0:], p.k, min(mr, mc-s*mr), kc)
	}
}

// transposedPacker packs B from its transpose bt (n×k row-major) as a
// PackedProduct.BPacker.
type transposedPacker struct {
	bt []float32
	k  int
}

func (p *transposedPacker) PackB(dst []float32, p0, kc, j0, nc int) {
	_, nr := KernelShape()
	for s := 0; s*nr < nc; s++ {
		PackTransposedB(dst[s*nr*kc:(s+1)*nr*kc], p.bt[(j0+s*nr)*p.k+p0:], p.k, min(nr, nc-s*nr), kc)
	}
}

// TestPackedProductPackers: APacker and BPacker (alone, together, and next
// to a plain operand) give C within rounding of a float64 product, on
// shapes that run in one block, over several k blocks, and split over the
// cores (columns, rows or the shared dimension).
func TestPackedProductPackers(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sh := range []struct{ m, n, k int }{{5, 7, 3}, {37, 70, 300}, {64, 1200, 96}, {256, 40, 2000}} {
		m, n, k := sh.m, sh.n, sh.k
		a := make([]float32, m*k)
		b := make([]float32, k*n)
		bt := make([]float32, n*k)
		for i := range a {
			a[i] = float32(rng.NormFloat64())
		}
		for p := 0; p < k; p++ {
			for j := 0; j < n; j++ {
				b[p*n+j] = float32(rng.NormFloat64())
				bt[j*k+p] = b[p*n+j]
			}
		}
		ap, bp := &rowsPacker{a: a, k: k}, &transposedPacker{bt: bt, k: k}
		run := func(set func(pp *PackedProduct)) []float32 {
			c := make([]float32, m*n)
			pp := PackedProduct{M: m, N: n, K: k, A: a, LDA: k, B: b, LDB: n, C: c, LDC: n}
			set(&pp)
			pp.Run()
			return c
		}
		for _, side := range []string{"A", "B", "both"} {
			viaPackers := run(func(pp *PackedProduct) {
				if side != "B" {
					pp.APacker, pp.A = ap, nil
				}
				if side != "A" {
					pp.BPacker, pp.B = bp, nil
				}
			})
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var want float64
					for p := 0; p < k; p++ {
						want += float64(a[i*k+p]) * float64(b[p*n+j])
					}
					got := float64(viaPackers[i*n+j])
					require.LessOrEqual(t, math.Abs(got-want), 1e-4*(1+math.Abs(want))*math.Sqrt(float64(k)), "%v C[%d][%d]", sh, i, j)
				}
			}
		}
	}
}

// sourcedRows is rowsPacker naming its sources (ASourcer), recording the
// blocks it names and the blocks it packs.
type sourcedRows struct {
	rowsPacker
	named, packed [][4]int
}

func (p *sourcedRows) PackA(dst []float32, i0, mc, p0, kc int) {
	p.packed = append(p.packed, [4]int{i0, mc, p0, kc})
	p.rowsPacker.PackA(dst, i0, mc, p0, kc)
}

func (p *sourcedRows) SourceA(i0, mc, p0, kc int) [2]Region {
	p.named = append(p.named, [4]int{i0, mc, p0, kc})
	return [2]Region{{Src: p.a[i0*p.k+p0:], LD: p.k, Rows: mc, Width: kc}}
}

// sourcedTransposed is transposedPacker naming its sources (BSourcer).
type sourcedTransposed struct {
	transposedPacker
	named, packed [][4]int
}

func (p *sourcedTransposed) PackB(dst []float32, p0, kc, j0, nc int) {
	p.packed = append(p.packed, [4]int{p0, kc, j0, nc})
	p.transposedPacker.PackB(dst, p0, kc, j0, nc)
}

func (p *sourcedTransposed) SourceB(p0, kc, j0, nc int) [2]Region {
	p.named = append(p.named, [4]int{p0, kc, j0, nc})
	return [2]Region{{Src: p.bt[j0*p.k+p0:], LD: p.k, Rows: nc, Width: kc}}
}

// TestPackedProductSources: packers that name their sources (ASourcer,
// BSourcer) give C bit for bit as without, and every A block or B panel
// named for prefetching is the one packed next (the last one named, after
// the product's last block, none).
func TestPackedProductSources(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	mk := kernel
	for _, sh := range []struct{ m, n, k, nc int }{{37, 70, 300, 0}, {300, 40, 700, 0}, {64, 1200, 96, 256}, {150, 600, 520, 128}} {
		m, n, k := sh.m, sh.n, sh.k
		a := make([]float32, m*k)
		bt := make([]float32, n*k)
		for i := range a {
			a[i] = float32(rng.NormFloat64())
		}
		for i := range bt {
			bt[i] = float32(rng.NormFloat64())
		}
		plainC := make([]float32, m*n)
		pp := PackedProduct{M: m, N: n, K: k, APacker: &rowsPacker{a: a, k: k}, BPacker: &transposedPacker{bt: bt, k: k}, C: plainC, LDC: n, NC: sh.nc}
		pp.blocked(mk, 0, m, 0, n)
		ap := &sourcedRows{rowsPacker: rowsPacker{a: a, k: k}}
		bp := &sourcedTransposed{transposedPacker: transposedPacker{bt: bt, k: k}}
		c := make([]float32, m*n)
		pp = PackedProduct{M: m, N: n, K: k, APacker: ap, BPacker: bp, C: c, LDC: n, NC: sh.nc}
		pp.blocked(mk, 0, m, 0, n)
		require.Equal(t, plainC, c, "%+v", sh)
		require.NotEmpty(t, ap.named, "%+v", sh)
		require.NotEmpty(t, bp.named, "%+v", sh)
		// Each named A block is packed right after the block that named it.
		require.Equal(t, ap.packed[1:], ap.named, "%+v: A blocks named against packed", sh)
		// Each panel names the next once, before its A blocks compute.
		require.Equal(t, bp.packed[1:], bp.named, "%+v: B panels named against packed", sh)
	}
}

// TestRowsShare: the shares of two regions' rows cover them once, in
// order, for any number of parts.
func TestRowsShare(t *testing.T) {
	src := make([]float32, 1000)
	for i := range src {
		src[i] = float32(i)
	}
	for _, rows := range [][2]int{{7, 0}, {5, 9}, {0, 4}, {1, 1}} {
		rs := [2]Region{{Src: src, LD: 10, Rows: rows[0], Width: 3}, {Src: src[500:], LD: 20, Rows: rows[1], Width: 2}}
		for parts := 1; parts <= 20; parts++ {
			var got []float32
			for t0 := 0; t0 < parts; t0++ {
				a, b := rowsShare(rs, t0, parts)
				for _, r := range []Region{a, b} {
					for i := 0; i < r.Rows; i++ {
						got = append(got, r.Src[i*r.LD], float32(r.Width))
					}
				}
			}
			var want []float32
			for _, r := range rs {
				for i := 0; i < r.Rows; i++ {
					want = append(want, r.Src[i*r.LD], float32(r.Width))
				}
			}
			require.Equal(t, want, got, "rows %v, %d parts", rows, parts)
		}
	}
}
