package gradient

// Float32 row kernels of SumToShape, SoftmaxGrad and
// LayerNormalizationGrad. On amd64 with AVX2 and FMA the body of a row runs
// in assembly (rows_amd64.s; a softmax-gradient row wholly) and the rest in
// Go; elsewhere, or with rowAsm
// off, all of it runs in Go. The Go forms take the same steps in the same
// order where the assembly has no fused multiply-add, so that those give
// the same bits either way.

// colSum32 adds rows rows of len(acc) elements, stride elements apart in
// src, to acc in float64, one row after the other: the rows are read in
// memory order, which the hardware prefetchers follow best when they come
// from main memory (four rows at a time, 6 KB windows read as four
// interleaved streams, were faster only on rows already in cache), and
// each row's loop asks for the next row's lines.
func colSum32(acc []float64, src []float32, rows, stride int) {
	n := len(acc)
	if rows <= 0 || n == 0 {
		return
	}
	_ = src[(rows-1)*stride+n-1]
	body := 0
	if rowAsm && n >= 4 {
		body = n &^ 3
		for r := 0; r < rows; r++ {
			// Each row asks for the next one's lines as it goes.
			pf := 4 * stride
			if r+1 == rows {
				pf = 0
			}
			colSumAVX2(&acc[0], &src[r*stride], body, pf)
		}
		if body == n {
			return
		}
	}
	a := acc[body:n]
	for r := 0; r < rows; r++ {
		for i, v := range src[r*stride+body : r*stride+n] {
			a[i] += float64(v)
		}
	}
}

// dot32 returns Σ a[i]·b[i] in float64 over len(a) elements (the products
// are exact), in pairs: even elements into one sum, odd into another. It
// is the softmax gradient's sum where the row kernel does not run (rows
// under 8 elements, or no AVX2); softmaxGradRowAVX2 takes its tail the
// same way.
func dot32(a, b []float32) float64 {
	n := len(a)
	b = b[:n]
	var s0, s1 float64
	i := 0
	for ; i+2 <= n; i += 2 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
	}
	if i < n {
		s0 += float64(a[i]) * float64(b[i])
	}
	return s0 + s1
}

// softmaxRowGrad32 writes dx = float32(y·(dy − s)), the difference and
// product taken in float64.
func softmaxRowGrad32(dy, y, dx []float32, s float64) {
	y, dx = y[:len(dy)], dx[:len(dy)]
	for i, g := range dy {
		dx[i] = float32(float64(y[i]) * (float64(g) - s))
	}
}

// lnGradSums returns, over a LayerNorm row, Σd, Σd², Σg and Σg·d in
// float64, with d = x − x0 and g = dy·scale (for float32 data d, d² and g
// are exact in float64 when the row's values have similar magnitudes).
func lnGradSums[F float](x, dy []F, scale []float64, x0 float64) (sd, sq, sg, sgd float64) {
	n := len(x)
	dy, scale = dy[:n], scale[:n]
	i := 0
	if x32, ok := any(x).([]float32); ok && rowAsm && n >= 4 {
		i = n &^ 3
		var out [4]float64
		lnGradStatsAVX2(&x32[0], &any(dy).([]float32)[0], &scale[0], i, x0, &out)
		sd, sq, sg, sgd = out[0], out[1], out[2], out[3]
	}
	var sd0, sd1, sq0, sq1, sg0, sg1, sgd0, sgd1 float64
	for ; i+2 <= n; i += 2 {
		d0, d1 := float64(x[i])-x0, float64(x[i+1])-x0
		g0, g1 := float64(dy[i])*scale[i], float64(dy[i+1])*scale[i+1]
		sd0 += d0
		sd1 += d1
		sq0 += d0 * d0
		sq1 += d1 * d1
		sg0 += g0
		sg1 += g1
		sgd0 += g0 * d0
		sgd1 += g1 * d1
	}
	if i < n {
		d := float64(x[i]) - x0
		g := float64(dy[i]) * scale[i]
		sd0 += d
		sq0 += d * d
		sg0 += g
		sgd0 += g * d
	}
	return sd + (sd0 + sd1), sq + (sq0 + sq1), sg + (sg0 + sg1), sgd + (sgd0 + sgd1)
}

// lnGradApply writes a LayerNorm row's input gradient and adds its
// parameter gradient terms, in the element type: with
// h = ((x − c[0]) − c[1])·c[2] (x̂, c[0] + c[1] being the mean and c[2]
// the inverse standard deviation), dx = c[2]·(dy·scale − c[3]) + c[4]·h,
// ds += dy·h and db += dy. With res (the row's residual gradient, nil for
// none), res is added to dx, the sum rounded to the element type as the
// Add kernel rounds it. ahead is the distance in elements from this row to
// the next one (0: none): the assembly loop asks for the next row's dx and
// res lines and the following row's x and dy as it goes (a prefetch past
// the end of the operands is harmless).
func lnGradApply[F float](x, dy, scale, dx, ds, db, res []F, c *[5]F, ahead int) {
	n := len(x)
	dy, scale, dx, ds, db = dy[:n], scale[:n], dx[:n], ds[:n], db[:n]
	if res != nil {
		res = res[:n]
	}
	i := 0
	if x32, ok := any(x).([]float32); ok && rowAsm && n >= 8 {
		i = n &^ 7
		c32 := any(c).(*[5]float32)
		var r *float32
		if res != nil {
			r = &any(res).([]float32)[0]
		}
		lnGradApplyAVX2(&x32[0], &any(dy).([]float32)[0], &any(scale).([]float32)[0],
			&any(dx).([]float32)[0], &any(ds).([]float32)[0], &any(db).([]float32)[0], r, i, c32, 4*ahead)
	}
	for ; i < n; i++ {
		h := ((x[i] - c[0]) - c[1]) * c[2]
		g := dy[i]
		v := c[2]*(g*scale[i]-c[3]) + c[4]*h
		if res != nil {
			v = F(v) + res[i]
		}
		dx[i] = v
		ds[i] += g * h
		db[i] += g
	}
}
