package nn

import (
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/stretchr/testify/require"
)

// TestPackerSources: the regions a 1×1 filter gradient's packers name for
// prefetching (planeRowsT.SourceB, outputRowPacker.SourceA) are exactly
// the values their packs read when a pack reads at most two image runs,
// and among them otherwise. Each source value holds its index plus one,
// so the packed panel lists what was read (zero: a padding lane).
func TestPackerSources(t *testing.T) {
	mr, nr := gemm.KernelShape()
	covered := func(rs [2]gemm.Region, base []float32) map[int]bool {
		in := map[int]bool{}
		for _, r := range rs {
			off := len(base) - len(r.Src)
			for i := 0; i < r.Rows; i++ {
				for j := 0; j < r.Width; j++ {
					in[off+i*r.LD+j] = true
				}
			}
		}
		return in
	}
	read := func(dst []float32) map[int]bool {
		got := map[int]bool{}
		for _, v := range dst {
			if v != 0 {
				got[int(v)-1] = true
			}
		}
		return got
	}
	check := func(name string, named, got map[int]bool, runs int) {
		for i := range named {
			require.True(t, got[i], "%s: named %d, not read", name, i)
		}
		if runs <= 2 {
			require.Equal(t, len(got), len(named), "%s: read values not named", name)
		}
	}
	for _, sh := range []struct{ n, c, l int }{{3, 40, 49}, {2, 20, 196}, {2, 9, 300}} {
		x := make([]float32, sh.n*sh.c*sh.l)
		for i := range x {
			x[i] = float32(i + 1)
		}
		K := sh.n * sh.l
		pk := planeRowsT{x: x, c: sh.c, l: sh.l}
		// x as dY of a unit 1×1 convolution with c output channels.
		g := Conv2D{N: sh.n, C: 1, H: sh.l, W: 1, M: sh.c, KH: 1, KW: 1, SH: 1, SW: 1, DH: 1, DW: 1, OH: sh.l, OW: 1}
		ap := outputRowPacker{g: g, dy: x}
		// Both pack channels [ch0, ch0+n) at positions [p0, p0+kc) of
		// the batch, in strips of width channels.
		for _, pkr := range []struct {
			name   string
			width  int
			pack   func(dst []float32, ch0, n, p0, kc int)
			source func(ch0, n, p0, kc int) [2]gemm.Region
		}{
			{"planeRowsT", nr, func(dst []float32, ch0, n, p0, kc int) { pk.PackB(dst, p0, kc, ch0, n) },
				func(ch0, n, p0, kc int) [2]gemm.Region { return pk.SourceB(p0, kc, ch0, n) }},
			{"outputRowPacker", mr, ap.PackA, ap.SourceA},
		} {
			w := pkr.width
			for _, blk := range [][4]int{{0, sh.c, 0, 40}, {w, min(w, sh.c-w), 30, 100}, {1, 5, K - 70, 70}, {0, sh.c, 0, K}} {
				ch0, n, p0, kc := blk[0], blk[1], blk[2], blk[3]
				if n <= 0 {
					continue
				}
				dst := make([]float32, (n+w-1)/w*w*kc)
				pkr.pack(dst, ch0, n, p0, kc)
				runs := (p0+kc-1)/sh.l - p0/sh.l + 1
				check(pkr.name, covered(pkr.source(ch0, n, p0, kc), x), read(dst), runs)
			}
		}
	}
}
