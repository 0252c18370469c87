package nn

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
)

// convElem is the element types the convolution machinery computes in.
type convElem interface {
	float32 | float64
}

// nnNumber is every integer and float element type.
type nnNumber interface {
	int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64
}

// validRange returns the output positions [lo, hi) of one spatial axis whose
// input position o*stride+off lies in [0, in), clamped to [0, out).
func validRange(off, stride, in, out int) (lo, hi int) {
	if off < 0 {
		lo = (-off + stride - 1) / stride
	}
	if last := in - 1 - off; last >= 0 {
		hi = last/stride + 1
	}
	if hi > out {
		hi = out
	}
	if lo > hi {
		lo = hi
	}
	return lo, hi
}

// im2col fills col with the receptive fields of one image and one group: cg
// channels of x (each prod(w.in) elements) become cg*prod(w.kernel) rows,
// and the output positions of outer rows [r0, r1) become the columns (an
// outer row is one line along the last spatial axis, w.out[last] positions).
// Positions in the padding read as zero.
func im2col[T convElem](col, x []T, cg int, w *window, r0, r1 int) {
	im2colStrided(col, (r1-r0)*w.out[w.rank()-1], x, cg, w, r0, r1)
}

// im2colStrided is im2col into rows ld elements apart (ld at least the
// (r1-r0)·w.out[last] columns written), so that several images' columns can
// sit side by side in one matrix.
func im2colStrided[T convElem](col []T, ld int, x []T, cg int, w *window, r0, r1 int) {
	if w.rank() == 2 {
		im2col2D(col, ld, x, cg, w, r0, r1)
		return
	}
	r := w.rank()
	last := r - 1
	oLast := w.out[last]
	cols := (r1 - r0) * oLast
	inSize := prod(w.in)
	inStride := make([]int, r)
	acc := 1
	for j := last; j >= 0; j-- {
		inStride[j] = acc
		acc *= w.in[j]
	}
	kSize := prod(w.kernel)
	kIdx := make([]int, r)
	oIdx := make([]int, r)
	sLast := w.strides[last]
	row := 0
	for c := 0; c < cg; c++ {
		xc := x[c*inSize : (c+1)*inSize]
		for j := range kIdx {
			kIdx[j] = 0
		}
		for k := 0; k < kSize; k++ {
			dst := col[row*ld : row*ld+cols]
			off := kIdx[last]*w.dilations[last] - w.padBegin[last]
			lo, hi := validRange(off, sLast, w.in[last], oLast)
			// Position the outer-row counter at r0.
			rem := r0
			for j := last - 1; j >= 0; j-- {
				oIdx[j] = rem % w.out[j]
				rem /= w.out[j]
			}
			for rr := r0; rr < r1; rr++ {
				d := dst[(rr-r0)*oLast : (rr-r0+1)*oLast]
				base, ok := 0, true
				for j := 0; j < last; j++ {
					i := oIdx[j]*w.strides[j] + kIdx[j]*w.dilations[j] - w.padBegin[j]
					if i < 0 || i >= w.in[j] {
						ok = false
						break
					}
					base += i * inStride[j]
				}
				if !ok || lo == hi {
					clear(d)
				} else {
					clear(d[:lo])
					clear(d[hi:])
					if sLast == 1 {
						copy(d[lo:hi], xc[base+lo+off:base+hi+off])
					} else {
						src := xc[base:]
						p := lo*sLast + off
						for o := lo; o < hi; o++ {
							d[o] = src[p]
							p += sLast
						}
					}
				}
				for j := last - 1; j >= 0; j-- {
					oIdx[j]++
					if oIdx[j] < w.out[j] {
						break
					}
					oIdx[j] = 0
				}
			}
			row++
			for j := last; j >= 0; j-- {
				kIdx[j]++
				if kIdx[j] < w.kernel[j] {
					break
				}
				kIdx[j] = 0
			}
		}
	}
}

// im2col2D is im2colStrided for two spatial dims, with the window geometry
// hoisted out of the loops: the rows of late CNN layers are only a few
// positions long, so per-row bookkeeping would cost more than the copy.
func im2col2D[T convElem](col []T, ld int, x []T, cg int, w *window, r0, r1 int) {
	ih, iw, ow := w.in[0], w.in[1], w.out[1]
	kh, kw := w.kernel[0], w.kernel[1]
	sh, sw, dh, dw := w.strides[0], w.strides[1], w.dilations[0], w.dilations[1]
	ph, pw := w.padBegin[0], w.padBegin[1]
	cols := (r1 - r0) * ow
	row := 0
	for c := 0; c < cg; c++ {
		xc := x[c*ih*iw : (c+1)*ih*iw]
		for a := 0; a < kh; a++ {
			for b := 0; b < kw; b++ {
				dst := col[row*ld : row*ld+cols]
				row++
				off := b*dw - pw
				lo, hi := validRange(off, sw, iw, ow)
				for rr := r0; rr < r1; rr++ {
					d := dst[(rr-r0)*ow : (rr-r0+1)*ow]
					in := rr*sh + a*dh - ph
					if in < 0 || in >= ih || lo >= hi {
						clear(d)
						continue
					}
					for o := 0; o < lo; o++ {
						d[o] = 0
					}
					for o := hi; o < ow; o++ {
						d[o] = 0
					}
					src := xc[in*iw : (in+1)*iw]
					if sw == 1 {
						s := src[lo+off : hi+off]
						dd := d[lo:hi]
						dd = dd[:len(s)]
						for o, v := range s {
							dd[o] = v
						}
					} else {
						p := lo*sw + off
						for o := lo; o < hi; o++ {
							d[o] = src[p]
							p += sw
						}
					}
				}
			}
		}
	}
}

// Im2Col is im2colStrided for the other CPU kernels (the convolution
// gradients): ch channels of the image x, each prod(w.In) elements, become
// ch·prod(w.Kernel) rows of col, ld elements apart, whose columns are the
// window positions of outer rows [r0, r1). Taps in the padding read zero.
func Im2Col[T convElem](col []T, ld int, x []T, ch int, w Window, r0, r1 int) {
	im2colStrided(col, ld, x, ch, w.internal(), r0, r1)
}

// Col2ImAdd is the adjoint of Im2Col: it adds every column entry of outer
// rows [r0, r1) (rows of col ld elements apart) into the image position it
// was read from; entries that fall in the padding are dropped.
func Col2ImAdd[T convElem](img, col []T, ld int, ch int, w Window, r0, r1 int) {
	col2imStrided(img, col, ld, ch, w.internal(), r0, r1)
}

// internal returns the window as package nn's kernels keep it.
func (w Window) internal() *window {
	return &window{in: w.In, out: w.Out, kernel: w.Kernel, strides: w.Strides, dilations: w.Dilations,
		padBegin: w.PadBegin, padEnd: w.PadEnd}
}

// col2imAdd is the adjoint of im2col: it adds every column entry of outer
// rows [r0, r1) into the image position it was read from, for cg channels
// of y (each prod(w.in) elements). Entries that fall in the padding are
// dropped. Pads may be negative (ConvTranspose with a larger output_shape).
func col2imAdd[T nnNumber](y, col []T, cg int, w *window, r0, r1 int) {
	col2imStrided(y, col, (r1-r0)*w.out[w.rank()-1], cg, w, r0, r1)
}

// col2imStrided is col2imAdd with the column matrix's rows ld elements
// apart (ld at least the (r1-r0)·w.out[last] columns read), so that
// several images' columns can sit side by side in one matrix.
func col2imStrided[T nnNumber](y, col []T, ld int, cg int, w *window, r0, r1 int) {
	if w.rank() == 2 {
		col2im2D(y, col, ld, cg, w, r0, r1)
		return
	}
	r := w.rank()
	last := r - 1
	oLast := w.out[last]
	cols := (r1 - r0) * oLast
	inSize := prod(w.in)
	inStride := make([]int, r)
	acc := 1
	for j := last; j >= 0; j-- {
		inStride[j] = acc
		acc *= w.in[j]
	}
	kSize := prod(w.kernel)
	kIdx := make([]int, r)
	oIdx := make([]int, r)
	sLast := w.strides[last]
	row := 0
	for c := 0; c < cg; c++ {
		yc := y[c*inSize : (c+1)*inSize]
		for j := range kIdx {
			kIdx[j] = 0
		}
		for k := 0; k < kSize; k++ {
			src := col[row*ld : row*ld+cols]
			off := kIdx[last]*w.dilations[last] - w.padBegin[last]
			lo, hi := validRange(off, sLast, w.in[last], oLast)
			rem := r0
			for j := last - 1; j >= 0; j-- {
				oIdx[j] = rem % w.out[j]
				rem /= w.out[j]
			}
			for rr := r0; rr < r1; rr++ {
				base, ok := 0, lo < hi
				for j := 0; j < last && ok; j++ {
					i := oIdx[j]*w.strides[j] + kIdx[j]*w.dilations[j] - w.padBegin[j]
					if i < 0 || i >= w.in[j] {
						ok = false
					}
					base += i * inStride[j]
				}
				if ok {
					s := src[(rr-r0)*oLast+lo : (rr-r0)*oLast+hi]
					if sLast == 1 {
						d := yc[base+lo+off : base+hi+off]
						d = d[:len(s)]
						for i, v := range s {
							d[i] += v
						}
					} else {
						p := base + lo*sLast + off
						for _, v := range s {
							yc[p] += v
							p += sLast
						}
					}
				}
				for j := last - 1; j >= 0; j-- {
					oIdx[j]++
					if oIdx[j] < w.out[j] {
						break
					}
					oIdx[j] = 0
				}
			}
			row++
			for j := last; j >= 0; j-- {
				kIdx[j]++
				if kIdx[j] < w.kernel[j] {
					break
				}
				kIdx[j] = 0
			}
		}
	}
}

// col2im2D is col2imStrided for two spatial dims, with the window
// geometry hoisted out of the loops (the rows of late CNN layers are only a
// few positions long).
func col2im2D[T nnNumber](y, col []T, ld int, cg int, w *window, r0, r1 int) {
	ih, iw, ow := w.in[0], w.in[1], w.out[1]
	kh, kw := w.kernel[0], w.kernel[1]
	sh, sw, dh, dw := w.strides[0], w.strides[1], w.dilations[0], w.dilations[1]
	ph, pw := w.padBegin[0], w.padBegin[1]
	cols := (r1 - r0) * ow
	row := 0
	for c := 0; c < cg; c++ {
		yc := y[c*ih*iw : (c+1)*ih*iw]
		for a := 0; a < kh; a++ {
			for b := 0; b < kw; b++ {
				src := col[row*ld : row*ld+cols]
				row++
				off := b*dw - pw
				lo, hi := validRange(off, sw, iw, ow)
				if lo >= hi {
					continue
				}
				for rr := r0; rr < r1; rr++ {
					in := rr*sh + a*dh - ph
					if in < 0 || in >= ih {
						continue
					}
					line := yc[in*iw : (in+1)*iw]
					s := src[(rr-r0)*ow+lo : (rr-r0)*ow+hi]
					if sw == 1 {
						d := line[lo+off : hi+off]
						d = d[:len(s)]
						for o, v := range s {
							d[o] += v
						}
						continue
					}
					p := lo*sw + off
					for _, v := range s {
						line[p] += v
						p += sw
					}
				}
			}
		}
	}
}

// matmul computes C = op(A)·B (accumulate false) or C += op(A)·B, with
// op(A) m×k (A stored k×m when transA), B k×n, row-major with leading
// dimensions lda, ldb, ldc. float32 goes to gemm.Sgemm; the other types use
// a plain loop (float64 serves gradient checks).
func matmul[T convElem](transA bool, m, n, k int, a []T, lda int, b []T, ldb int, accumulate bool, c []T, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if af, ok := any(a).([]float32); ok {
		beta := float32(0)
		if accumulate {
			beta = 1
		}
		gemm.Sgemm(transA, false, m, n, k, 1, af, lda, any(b).([]float32), ldb, beta, any(c).([]float32), ldc)
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if !accumulate {
			clear(row)
		}
		for p := 0; p < k; p++ {
			var av T
			if transA {
				av = a[p*lda+i]
			} else {
				av = a[i*lda+p]
			}
			if av == 0 {
				continue
			}
			brow := b[p*ldb : p*ldb+n]
			for j, bv := range brow {
				row[j] += av * bv
			}
		}
	}
}

// Col2ImAddImages is Col2ImAdd over a 2-D window for channels [c0, c1)
// of nb images whose column matrices sit side by side: row (c, a, b) of
// col (rows ld apart) holds image i's window positions at columns
// i·L onwards (L = prod(w.Out)), and image i is img[i·imgStride:]. The
// loops run channel, tap, image, so that each column row is read once
// from start to end (walking image by image instead reads a short piece
// of every row, L values, and jumps ld ahead for the next). Workers
// given disjoint channel ranges write disjoint planes.
func Col2ImAddImages[T convElem](img []T, imgStride int, col []T, ld, nb, c0, c1 int, w Window) {
	if len(w.In) != 2 || nb <= 0 || c0 >= c1 {
		return
	}
	ih, iw, oh, ow := w.In[0], w.In[1], w.Out[0], w.Out[1]
	kh, kw := w.Kernel[0], w.Kernel[1]
	sh, sw, dh, dw := w.Strides[0], w.Strides[1], w.Dilations[0], w.Dilations[1]
	ph, pw := w.PadBegin[0], w.PadBegin[1]
	L, I := oh*ow, ih*iw
	if L == 0 || I == 0 {
		return
	}
	var spanBuf [64]int
	span := spanBuf[:0]
	if 2*(kh+kw) > len(spanBuf) {
		span = make([]int, 0, 2*(kh+kw))
	}
	for b := 0; b < kw; b++ {
		lo, hi := validRange(b*dw-pw, sw, iw, ow)
		span = append(span, lo, hi)
	}
	for a := 0; a < kh; a++ {
		lo, hi := validRange(a*dh-ph, sh, ih, oh)
		span = append(span, lo, hi)
	}
	colSpan, rowSpan := span[:2*kw], span[2*kw:]
	for c := c0; c < c1; c++ {
		for a := 0; a < kh; a++ {
			rlo, rhi := rowSpan[2*a], rowSpan[2*a+1]
			for b := 0; b < kw; b++ {
				row := (c*kh+a)*kw + b
				lo, hi := colSpan[2*b], colSpan[2*b+1]
				if lo >= hi || rlo >= rhi {
					continue
				}
				src := col[row*ld : row*ld+nb*L]
				off := b*dw - pw
				n := hi - lo
				for i := 0; i < nb; i++ {
					yc := img[i*imgStride+c*I : i*imgStride+(c+1)*I]
					si := src[i*L : (i+1)*L]
					for rr := rlo; rr < rhi; rr++ {
						line := yc[(rr*sh+a*dh-ph)*iw:]
						s := si[rr*ow+lo : rr*ow+hi]
						switch sw {
						case 1:
							d := line[lo+off : lo+off+n]
							for o, v := range s {
								d[o] += v
							}
						case 2:
							p := lo*2 + off
							d := line[p : p+2*(n-1)+1]
							for o, v := range s {
								d[2*o] += v
							}
						default:
							p := lo*sw + off
							for _, v := range s {
								line[p] += v
								p += sw
							}
						}
					}
				}
			}
		}
	}
}
