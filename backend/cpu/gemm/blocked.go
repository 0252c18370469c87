package gemm

import (
	"runtime"
	"sync"
)

// smallWork is the m*n*k below which packing does not pay for itself.
const smallWork = 32 * 32 * 32

// parallelWork is the m*n*k from which a product is split across goroutines.
const parallelWork = 128 * 128 * 64

// buffers are one worker's packing areas.
type buffers struct {
	a, b []float32
}

var bufferPool = sync.Pool{New: func() any { return new(buffers) }}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// run computes the whole product with packing, in parallel when it is big.
func (p *problem) run() {
	workers := runtime.GOMAXPROCS(0)
	if p.m*p.n*p.k < parallelWork || workers < 2 {
		p.blocked(0, p.m, 0, p.n)
		return
	}
	mk := kernel
	// Split the dimension with more micro-tiles so each worker gets a
	// rectangle of whole tiles.
	if p.m/mk.mr >= p.n/mk.nr {
		parts := splitRange(p.m, mk.mr, workers)
		parallelFor(len(parts)-1, func(w int) { p.blocked(parts[w], parts[w+1], 0, p.n) })
	} else {
		parts := splitRange(p.n, mk.nr, workers)
		parallelFor(len(parts)-1, func(w int) { p.blocked(0, p.m, parts[w], parts[w+1]) })
	}
}

// splitRange cuts [0, size) into at most parts pieces whose boundaries are
// multiples of unit, returned as boundaries (len = pieces+1).
func splitRange(size, unit, parts int) []int {
	units := (size + unit - 1) / unit
	if parts > units {
		parts = units
	}
	bounds := make([]int, parts+1)
	for w := 0; w <= parts; w++ {
		bounds[w] = min(size, (units*w/parts)*unit)
	}
	return bounds
}

// parallelFor runs fn(0..count-1) on up to GOMAXPROCS goroutines.
func parallelFor(count int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), count)
	if workers <= 1 {
		for i := 0; i < count; i++ {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= count {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// blocked computes rows [i0, i1) and columns [j0, j1) of C with packed
// panels and the micro-kernel.
func (p *problem) blocked(i0, i1, j0, j1 int) {
	mk := kernel
	buf := bufferPool.Get().(*buffers)
	defer bufferPool.Put(buf)
	var tile [64 * 64]float32 // scratch for edge tiles (mr*nr <= 4096)
	for jc := j0; jc < j1; jc += mk.nc {
		ncur := min(mk.nc, j1-jc)
		nstrips := (ncur + mk.nr - 1) / mk.nr
		for pc := 0; pc < p.k; pc += mk.kc {
			kcur := min(mk.kc, p.k-pc)
			buf.b = grow(buf.b, nstrips*mk.nr*kcur)
			p.packB(buf.b, pc, kcur, jc, ncur, mk.nr)
			for ic := i0; ic < i1; ic += mk.mc {
				mcur := min(mk.mc, i1-ic)
				mstrips := (mcur + mk.mr - 1) / mk.mr
				buf.a = grow(buf.a, mstrips*mk.mr*kcur)
				p.packA(buf.a, ic, mcur, pc, kcur, mk.mr)
				macroKernel(mk, mcur, ncur, kcur, buf.a, buf.b, p.c[ic*p.ldc+jc:], p.ldc, tile[:mk.mr*mk.nr])
			}
		}
	}
}

// macroKernel runs the micro-kernel over every tile of an mc×nc block of C
// from packed A (mc rows) and B (nc columns) panels kc deep.
func macroKernel(mk microKernel, mc, nc, kc int, ap, bp, c []float32, ldc int, tile []float32) {
	mr, nr := mk.mr, mk.nr
	for jr := 0; jr < nc; jr += nr {
		nb := min(nr, nc-jr)
		bs := bp[jr*kc : jr*kc+nr*kc]
		for ir := 0; ir < mc; ir += mr {
			mb := min(mr, mc-ir)
			as := ap[ir*kc : ir*kc+mr*kc]
			if mb == mr && nb == nr {
				mk.fn(kc, as, bs, c[ir*ldc+jr:], ldc)
				continue
			}
			clear(tile)
			mk.fn(kc, as, bs, tile, nr)
			for i := 0; i < mb; i++ {
				row := c[(ir+i)*ldc+jr : (ir+i)*ldc+jr+nb]
				t := tile[i*nr : i*nr+nb]
				for j := range row {
					row[j] += t[j]
				}
			}
		}
	}
}

// packA packs rows [i0, i0+mc) and columns [p0, p0+kc) of alpha*op(A) into
// mr-high strips, each stored k-major; rows past mc are zero.
func (p *problem) packA(dst []float32, i0, mc, p0, kc, mr int) {
	alpha := p.alpha
	for is := 0; is < mc; is += mr {
		strip := dst[is*kc : is*kc+mr*kc]
		rows := min(mr, mc-is)
		if rows < mr {
			clear(strip)
		}
		for i := 0; i < rows; i++ {
			r := i0 + is + i
			if p.transA {
				// A stored k×m: element (r, q) at a[q*lda+r].
				src := p.a[p0*p.lda+r:]
				for q := 0; q < kc; q++ {
					strip[q*mr+i] = alpha * src[q*p.lda]
				}
			} else {
				src := p.a[r*p.lda+p0 : r*p.lda+p0+kc]
				for q, v := range src {
					strip[q*mr+i] = alpha * v
				}
			}
		}
	}
}

// packB packs rows [p0, p0+kc) and columns [j0, j0+nc) of op(B) into
// nr-wide strips, each stored k-major; columns past nc are zero.
func (p *problem) packB(dst []float32, p0, kc, j0, nc, nr int) {
	for js := 0; js < nc; js += nr {
		strip := dst[js*kc : js*kc+nr*kc]
		cols := min(nr, nc-js)
		if cols < nr {
			clear(strip)
		}
		if p.transB {
			// B stored n×k: element (q, col) at b[col*ldb+q].
			for j := 0; j < cols; j++ {
				src := p.b[(j0+js+j)*p.ldb+p0 : (j0+js+j)*p.ldb+p0+kc]
				for q, v := range src {
					strip[q*nr+j] = v
				}
			}
			continue
		}
		for q := 0; q < kc; q++ {
			src := p.b[(p0+q)*p.ldb+j0+js : (p0+q)*p.ldb+j0+js+cols]
			copy(strip[q*nr:q*nr+cols], src)
		}
	}
}
