package linalg

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Backward passes of RNN, GRU and LSTM (backpropagation through time).
//
// The internal ops RNNGrad, GRUGrad and LSTMGrad carry the forward node's
// attributes and take 11 inputs: the forward inputs X, W, R, B,
// sequence_lens, initial_h, initial_c, P at positions 0-7 (empty where
// absent; initial_c and P exist for LSTM only), then the gradients of the
// outputs Y, Y_h and Y_c at 8-10 (empty where none flows). They return dX,
// dW, dR, dB, d(initial_h), d(initial_c) and dP, in that order; trailing
// outputs may be left off. The kernel re-runs the forward pass keeping every
// step's gate values, then walks the steps backwards.
//
// Every attribute of the forward op is supported: directions, layouts,
// activations with their alphas and betas, clip (whose gradient is zero
// where the input was clipped), sequence_lens (a finished sequence keeps
// its state and passes gradients through unchanged), GRU's
// linear_before_reset, LSTM's peepholes and input_forget.

func init() {
	for kind, op := range map[rnnKind]string{rnnPlain: "RNNGrad", rnnGRU: "GRUGrad", rnnLSTM: "LSTMGrad"} {
		kind := kind
		kern.RegisterSpec(graph.InternalDomain, op, kern.Spec{Fn: func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
			return recurrentGradKernel(kind, n, in)
		}})
	}
}

// rnnGemm computes C = op(A)·op(B) + beta·C with row-major operands.
type rnnGemm[T rnnFloat] func(transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)

func rnnGemmF32(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemm.Sgemm(transA, transB, m, n, k, 1, a, lda, b, ldb, beta, c, ldc)
}

func rnnGemmGeneric[T rnnFloat](transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	at := func(i, p int) T {
		if transA {
			return a[p*lda+i]
		}
		return a[i*lda+p]
	}
	bt := func(p, j int) T {
		if transB {
			return b[j*ldb+p]
		}
		return b[p*ldb+j]
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s T
			for p := 0; p < k; p++ {
				s += at(i, p) * bt(p, j)
			}
			if beta == 0 {
				c[i*ldc+j] = s
			} else {
				c[i*ldc+j] = s + beta*c[i*ldc+j]
			}
		}
	}
}

func recurrentGradKernel(kind rnnKind, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(in) != 11 {
		return nil, n.Errorf("takes 11 inputs (the forward inputs at 0-7, the output gradients at 8-10), got %d", len(in))
	}
	fwd := in[:8]
	cfg, err := parseRecurrent(kind, n, fwd)
	if err != nil {
		return nil, err
	}
	x := in[0]
	for i, t := range in[8:] {
		if t != nil && t.DType != x.DType {
			return nil, n.Errorf("output gradient %d is %v but X is %v", i, t.DType, x.DType)
		}
	}
	dY, dYh, dYc := kern.Opt(in, 8), kern.Opt(in, 9), kern.Opt(in, 10)
	yShape := []int{cfg.seq, cfg.dirs, cfg.batch, cfg.hid}
	stateShape := []int{cfg.dirs, cfg.batch, cfg.hid}
	if cfg.layout == 1 {
		yShape = []int{cfg.batch, cfg.seq, cfg.dirs, cfg.hid}
		stateShape = []int{cfg.batch, cfg.dirs, cfg.hid}
	}
	for i, c := range []struct {
		t    *graph.Tensor
		want []int
	}{{dY, yShape}, {dYh, stateShape}, {dYc, stateShape}} {
		if c.t != nil && !equalInts(c.t.Shape, c.want) {
			return nil, n.Errorf("gradient of output %d has shape %v, want %v", i, c.t.Shape, c.want)
		}
	}
	if kind != rnnLSTM && dYc != nil {
		return nil, n.Errorf("%s has no Y_c output, but a gradient for it was given", n.OpType)
	}
	var outs []*graph.Tensor
	switch x.DType {
	case graph.Float32:
		outs = rnnBackward(cfg, fwd, dY, dYh, dYc, rnnGemmF32)
	case graph.Float64:
		outs = rnnBackward(cfg, fwd, dY, dYh, dYc, rnnGemmGeneric[float64])
	default:
		return nil, n.Errorf("dtype %v is not supported", x.DType)
	}
	if len(n.Outputs) < len(outs) {
		outs = outs[:len(n.Outputs)]
	}
	return outs, nil
}

// rnnActGrad returns the derivative of act at pre (the gate input before
// clipping), given post = act(clip(pre)).
func rnnActGrad(act rnnActivation, clip, pre, post float64) float64 {
	x := pre
	if clip > 0 {
		if x < -clip || x > clip {
			return 0
		}
	}
	a, b := act.alpha, act.beta
	switch act.kind {
	case actRelu:
		if x > 0 {
			return 1
		}
		return 0
	case actTanh:
		return 1 - post*post
	case actSigmoid:
		return post * (1 - post)
	case actAffine:
		return a
	case actLeakyRelu:
		if x < 0 {
			return a
		}
		return 1
	case actThresholdedRelu:
		if x > a {
			return 1
		}
		return 0
	case actScaledTanh:
		t := math.Tanh(b * x)
		return a * b * (1 - t*t)
	case actHardSigmoid:
		if v := a*x + b; v > 0 && v < 1 {
			return a
		}
		return 0
	case actElu:
		if x < 0 {
			return a * math.Exp(x)
		}
		return 1
	case actSoftsign:
		d := 1 + math.Abs(x)
		return 1 / (d * d)
	case actSoftplus:
		if x > 30 {
			return 1
		}
		return rnnSigmoid(x)
	}
	return 0
}

// rnnTape is what the forward pass of one direction keeps for backward,
// per step s (processing order) and batch row: the state before the step,
// the gate inputs and outputs, and the kind-specific extras.
type rnnTape[T rnnFloat] struct {
	hPrev, cPrev []T // [seq, batch, hid]
	pre, post    []T // [seq, batch, gates*hid]
	cNew         []T // LSTM: cell state after the step [seq, batch, hid]
	hAct         []T // LSTM: h-activation of cNew [seq, batch, hid]
	extra        []T // GRU: r⊙hPrev (or, with linear_before_reset, hPrev·Rhᵀ+Rbh) [seq, batch, hid]
}

// rnnBackward computes dX, dW, dR, dB, dh0, dc0 and dP (the last three
// only for the inputs that exist; nil otherwise).
func rnnBackward[T rnnFloat](cfg *rnnConfig, fwd []*graph.Tensor, dYt, dYht, dYct *graph.Tensor, mm rnnGemm[T]) []*graph.Tensor {
	seq, batch, hid, dirs, nin := cfg.seq, cfg.batch, cfg.hid, cfg.dirs, cfg.input
	g := cfg.kind.gates()
	gh := g * hid
	xt, wt, rt, bt := fwd[0], fwd[1], fwd[2], kern.Opt(fwd, 3)
	h0t, c0t, pt := kern.Opt(fwd, 5), kern.Opt(fwd, 6), kern.Opt(fwd, 7)
	x, h0, c0 := rnnData[T](xt), rnnData[T](h0t), rnnData[T](c0t)
	dY, dYh, dYc := rnnData[T](dYt), rnnData[T](dYht), rnnData[T](dYct)
	if cfg.layout == 1 {
		x = rnnSwap01(x, batch, seq, nin)
		if h0 != nil {
			h0 = rnnSwap01(h0, batch, dirs, hid)
		}
		if c0 != nil {
			c0 = rnnSwap01(c0, batch, dirs, hid)
		}
		if dY != nil { // [batch, seq, dirs, hid] -> [seq, dirs, batch, hid]
			d := make([]T, len(dY))
			stridedCopy(d, dY, []int{seq, dirs, batch, hid}, []int{dirs * hid, hid, seq * dirs * hid, 1})
			dY = d
		}
		if dYh != nil {
			dYh = rnnSwap01(dYh, batch, dirs, hid)
		}
		if dYc != nil {
			dYc = rnnSwap01(dYc, batch, dirs, hid)
		}
	}
	w, r, b, p := rnnData[T](wt), rnnData[T](rt), rnnData[T](bt), rnnData[T](pt)
	dX := make([]T, seq*batch*nin)
	dW, dR := make([]T, len(w)), make([]T, len(r))
	var dB, dP, dh0, dc0 []T
	if b != nil {
		dB = make([]T, len(b))
	}
	if p != nil {
		dP = make([]T, len(p))
	}
	if h0 != nil {
		dh0 = make([]T, dirs*batch*hid)
	}
	if c0 != nil {
		dc0 = make([]T, dirs*batch*hid)
	}
	perDir := len(cfg.kind.defaultActivations())
	for d := 0; d < dirs; d++ {
		dir := &rnnDir[T]{
			cfg: cfg, d: d, mm: mm, acts: cfg.acts[d*perDir : (d+1)*perDir],
			w: w[d*gh*nin : (d+1)*gh*nin], r: r[d*gh*hid : (d+1)*gh*hid],
			dW: dW[d*gh*nin : (d+1)*gh*nin], dR: dR[d*gh*hid : (d+1)*gh*hid],
		}
		if b != nil {
			dir.wb, dir.rb = b[2*d*gh:(2*d+1)*gh], b[(2*d+1)*gh:(2*d+2)*gh]
			dir.dWb, dir.dRb = dB[2*d*gh:(2*d+1)*gh], dB[(2*d+1)*gh:(2*d+2)*gh]
		}
		if p != nil {
			dir.p, dir.dP = p[d*3*hid:(d+1)*3*hid], dP[d*3*hid:(d+1)*3*hid]
		}
		dir.h, dir.c = make([]T, batch*hid), make([]T, batch*hid)
		if h0 != nil {
			copy(dir.h, h0[d*batch*hid:])
		}
		if c0 != nil {
			copy(dir.c, c0[d*batch*hid:])
		}
		tape := dir.forward(x)
		dh, dc := make([]T, batch*hid), make([]T, batch*hid)
		if dYh != nil {
			copy(dh, dYh[d*batch*hid:])
		}
		if dYc != nil {
			copy(dc, dYc[d*batch*hid:])
		}
		dir.backward(tape, x, dY, dh, dc, dX)
		if dh0 != nil {
			copy(dh0[d*batch*hid:], dh)
		}
		if dc0 != nil {
			copy(dc0[d*batch*hid:], dc)
		}
	}
	xShape := []int{seq, batch, nin}
	stateShape := []int{dirs, batch, hid}
	if cfg.layout == 1 {
		dX = rnnSwap01(dX, seq, batch, nin)
		xShape = []int{batch, seq, nin}
		stateShape = []int{batch, dirs, hid}
		if dh0 != nil {
			dh0 = rnnSwap01(dh0, dirs, batch, hid)
		}
		if dc0 != nil {
			dc0 = rnnSwap01(dc0, dirs, batch, hid)
		}
	}
	dt := xt.DType
	mk := func(data []T, shape []int) *graph.Tensor {
		if data == nil {
			return nil
		}
		return &graph.Tensor{DType: dt, Shape: append([]int{}, shape...), Data: data}
	}
	outs := []*graph.Tensor{mk(dX, xShape), mk(dW, wt.Shape), mk(dR, rt.Shape), nil, nil, nil, nil}
	if bt != nil {
		outs[3] = mk(dB, bt.Shape)
	}
	outs[4] = mk(dh0, stateShape)
	outs[5] = mk(dc0, stateShape)
	if pt != nil {
		outs[6] = mk(dP, pt.Shape)
	}
	return outs
}

// rnnDir is one direction of a recurrent layer with its gradient buffers.
type rnnDir[T rnnFloat] struct {
	cfg      *rnnConfig
	d        int
	mm       rnnGemm[T]
	acts     []rnnActivation
	w, r     []T
	wb, rb   []T
	p        []T
	dW, dR   []T
	dWb, dRb []T
	dP       []T
	h, c     []T // running state [batch, hid]
}

// timeOf is the time index batch row bi processes at step s, or -1 once
// its sequence is over.
func (dr *rnnDir[T]) timeOf(s, bi int) int {
	l := dr.cfg.seqLens[bi]
	if s >= l {
		return -1
	}
	if dr.cfg.reverse[dr.d] {
		return l - 1 - s
	}
	return s
}

// act applies activation k (with the layer's clip, except for LSTM's h)
// to v in place.
func (dr *rnnDir[T]) act(k int, clip bool, v []T) {
	c := 0.0
	if clip {
		c = dr.cfg.clip
	}
	rnnApply(dr.acts[k], c, v)
}

// forward re-runs the direction, recording the tape.
func (dr *rnnDir[T]) forward(x []T) *rnnTape[T] {
	cfg := dr.cfg
	seq, batch, hid, nin := cfg.seq, cfg.batch, cfg.hid, cfg.input
	gh := cfg.kind.gates() * hid
	tp := &rnnTape[T]{
		hPrev: make([]T, seq*batch*hid), pre: make([]T, seq*batch*gh), post: make([]T, seq*batch*gh),
	}
	switch cfg.kind {
	case rnnLSTM:
		tp.cPrev, tp.cNew, tp.hAct = make([]T, seq*batch*hid), make([]T, seq*batch*hid), make([]T, seq*batch*hid)
	case rnnGRU:
		tp.extra = make([]T, seq*batch*hid)
	}
	xs := make([]T, batch*nin)
	hr := make([]T, batch*gh)
	for s := 0; s < seq; s++ {
		// This step's input rows (zero for finished sequences).
		clear(xs)
		for bi := 0; bi < batch; bi++ {
			if t := dr.timeOf(s, bi); t >= 0 {
				copy(xs[bi*nin:(bi+1)*nin], x[(t*batch+bi)*nin:(t*batch+bi+1)*nin])
			}
		}
		pre := tp.pre[s*batch*gh : (s+1)*batch*gh]
		copy(tp.hPrev[s*batch*hid:], dr.h)
		if tp.cPrev != nil {
			copy(tp.cPrev[s*batch*hid:], dr.c)
		}
		dr.mm(false, true, batch, gh, nin, xs, nin, dr.w, nin, 0, pre, gh)
		switch cfg.kind {
		case rnnPlain, rnnLSTM:
			dr.mm(false, true, batch, gh, hid, dr.h, hid, dr.r, hid, 0, hr, gh)
		case rnnGRU:
			// z and r from H directly; the candidate's recurrent term below.
			dr.mm(false, true, batch, 2*hid, hid, dr.h, hid, dr.r, hid, 0, hr, gh)
		}
		for bi := 0; bi < batch; bi++ {
			if dr.timeOf(s, bi) < 0 {
				continue
			}
			row := bi * gh
			for j := 0; j < gh; j++ {
				v := pre[row+j]
				if cfg.kind != rnnGRU || j < 2*hid {
					v += hr[row+j]
				}
				if dr.wb != nil {
					if cfg.kind != rnnGRU || j < 2*hid {
						v += dr.wb[j] + dr.rb[j]
					} else {
						v += dr.wb[j]
					}
				}
				pre[row+j] = v
			}
		}
		switch cfg.kind {
		case rnnPlain:
			dr.stepPlain(s, tp)
		case rnnGRU:
			dr.stepGRU(s, tp, hr)
		case rnnLSTM:
			dr.stepLSTM(s, tp)
		}
	}
	return tp
}

func (dr *rnnDir[T]) stepPlain(s int, tp *rnnTape[T]) {
	batch, hid := dr.cfg.batch, dr.cfg.hid
	for bi := 0; bi < batch; bi++ {
		if dr.timeOf(s, bi) < 0 {
			continue
		}
		o := (s*batch + bi) * hid
		post := tp.post[o : o+hid]
		copy(post, tp.pre[o:o+hid])
		dr.act(0, true, post)
		copy(dr.h[bi*hid:(bi+1)*hid], post)
	}
}

func (dr *rnnDir[T]) stepGRU(s int, tp *rnnTape[T], hr []T) {
	cfg := dr.cfg
	batch, hid := cfg.batch, cfg.hid
	gh := 3 * hid
	rh := dr.r[2*hid*hid : 3*hid*hid] // [hid, hid]
	var rbh []T
	if dr.rb != nil {
		rbh = dr.rb[2*hid : 3*hid]
	}
	extra := tp.extra[s*batch*hid : (s+1)*batch*hid]
	// z and r.
	for bi := 0; bi < batch; bi++ {
		if dr.timeOf(s, bi) < 0 {
			continue
		}
		o := (s*batch + bi) * gh
		zr := tp.post[o : o+2*hid]
		copy(zr, tp.pre[o:o+2*hid])
		dr.act(0, true, zr)
	}
	// The candidate's recurrent term, for every row at once.
	if cfg.linearBeforeReset {
		// lin = H·Rhᵀ + Rbh
		dr.mm(false, true, batch, hid, hid, dr.h, hid, rh, hid, 0, extra, hid)
		if rbh != nil {
			for bi := 0; bi < batch; bi++ {
				for j := range rbh {
					extra[bi*hid+j] += rbh[j]
				}
			}
		}
	} else {
		// extra = r ⊙ H, then (r ⊙ H)·Rhᵀ
		for bi := 0; bi < batch; bi++ {
			o := (s*batch + bi) * gh
			for j := 0; j < hid; j++ {
				extra[bi*hid+j] = tp.post[o+hid+j] * dr.h[bi*hid+j]
			}
		}
		dr.mm(false, true, batch, hid, hid, extra, hid, rh, hid, 0, hr[:batch*hid], hid)
	}
	for bi := 0; bi < batch; bi++ {
		if dr.timeOf(s, bi) < 0 {
			continue
		}
		o := (s*batch + bi) * gh
		r := tp.post[o+hid : o+2*hid]
		pre := tp.pre[o+2*hid : o+3*hid]
		for j := range pre {
			if cfg.linearBeforeReset {
				pre[j] += r[j] * extra[bi*hid+j]
			} else {
				pre[j] += hr[bi*hid+j]
				if rbh != nil {
					pre[j] += rbh[j]
				}
			}
		}
		cand := tp.post[o+2*hid : o+3*hid]
		copy(cand, pre)
		dr.act(1, true, cand)
		z := tp.post[o : o+hid]
		h := dr.h[bi*hid : (bi+1)*hid]
		for j := range h {
			h[j] = (1-z[j])*cand[j] + z[j]*h[j]
		}
	}
}

func (dr *rnnDir[T]) stepLSTM(s int, tp *rnnTape[T]) {
	cfg := dr.cfg
	batch, hid := cfg.batch, cfg.hid
	gh := 4 * hid
	for bi := 0; bi < batch; bi++ {
		if dr.timeOf(s, bi) < 0 {
			continue
		}
		o := (s*batch + bi) * gh
		pre, post := tp.pre[o:o+gh], tp.post[o:o+gh]
		c := dr.c[bi*hid : (bi+1)*hid]
		if dr.p != nil {
			for j := 0; j < hid; j++ {
				pre[j] += dr.p[j] * c[j]             // i
				pre[2*hid+j] += dr.p[2*hid+j] * c[j] // f
			}
		}
		ig, og, fg, cg := post[:hid], post[hid:2*hid], post[2*hid:3*hid], post[3*hid:]
		copy(ig, pre[:hid])
		dr.act(0, true, ig)
		if cfg.inputForget {
			for j := range fg {
				fg[j] = 1 - ig[j]
			}
		} else {
			copy(fg, pre[2*hid:3*hid])
			dr.act(0, true, fg)
		}
		copy(cg, pre[3*hid:])
		dr.act(1, true, cg)
		for j := range c {
			c[j] = fg[j]*c[j] + ig[j]*cg[j]
		}
		if dr.p != nil {
			for j := 0; j < hid; j++ {
				pre[hid+j] += dr.p[hid+j] * c[j] // o
			}
		}
		copy(og, pre[hid:2*hid])
		dr.act(0, true, og)
		so := (s*batch + bi) * hid
		copy(tp.cNew[so:so+hid], c)
		ha := tp.hAct[so : so+hid]
		copy(ha, c)
		dr.act(2, false, ha)
		h := dr.h[bi*hid : (bi+1)*hid]
		for j := range h {
			h[j] = og[j] * ha[j]
		}
	}
}

// backward walks the steps in reverse. dh and dc hold the gradient of the
// state after the last step on entry and of the initial state on return;
// dX accumulates the input gradient ([seq, batch, input]).
func (dr *rnnDir[T]) backward(tp *rnnTape[T], x, dY, dh, dc, dX []T) {
	cfg := dr.cfg
	seq, batch, hid, nin, dirs := cfg.seq, cfg.batch, cfg.hid, cfg.input, cfg.dirs
	gh := cfg.kind.gates() * hid
	clip := cfg.clip
	dA := make([]T, batch*gh)    // gradient of the gate inputs, this step
	dhp := make([]T, batch*hid)  // gradient of hPrev through R
	tmp := make([]T, batch*hid)  // GRU scratch
	xs := make([]T, batch*nin)   // this step's input rows
	dxs := make([]T, batch*nin)  // their gradient
	dLin := make([]T, batch*hid) // GRU: gradient of the candidate's recurrent term
	actGrad := func(k int, useClip bool, pre, post T) T {
		c := 0.0
		if useClip {
			c = clip
		}
		return T(rnnActGrad(dr.acts[k], c, float64(pre), float64(post)))
	}
	for s := seq - 1; s >= 0; s-- {
		clear(dA)
		clear(xs)
		hPrev := tp.hPrev[s*batch*hid : (s+1)*batch*hid]
		// Total gradient of this step's output state, per active row.
		for bi := 0; bi < batch; bi++ {
			t := dr.timeOf(s, bi)
			if t < 0 {
				continue
			}
			copy(xs[bi*nin:(bi+1)*nin], x[(t*batch+bi)*nin:(t*batch+bi+1)*nin])
			if dY != nil {
				yrow := dY[((t*dirs+dr.d)*batch+bi)*hid:]
				for j := 0; j < hid; j++ {
					dh[bi*hid+j] += yrow[j]
				}
			}
		}
		switch cfg.kind {
		case rnnPlain:
			for bi := 0; bi < batch; bi++ {
				if dr.timeOf(s, bi) < 0 {
					continue
				}
				o := (s*batch + bi) * hid
				for j := 0; j < hid; j++ {
					dA[bi*hid+j] = dh[bi*hid+j] * actGrad(0, true, tp.pre[o+j], tp.post[o+j])
				}
			}
		case rnnLSTM:
			dr.backLSTM(s, tp, dh, dc, dA, actGrad)
		case rnnGRU:
			dr.backGRU(s, tp, hPrev, dh, dA, tmp, dLin, actGrad)
		}
		// dhPrev through R (for GRU, the z and r blocks only: the
		// candidate's recurrent term was handled by backGRU).
		k := gh
		if cfg.kind == rnnGRU {
			k = 2 * hid
		}
		dr.mm(false, false, batch, hid, k, dA, gh, dr.r, hid, 0, dhp, hid)
		dr.mm(true, false, k, hid, batch, dA, gh, hPrev, hid, 1, dr.dR, hid)
		// Input gradient and dW for this step.
		dr.mm(false, false, batch, nin, gh, dA, gh, dr.w, nin, 0, dxs, nin)
		dr.mm(true, false, gh, nin, batch, dA, gh, xs, nin, 1, dr.dW, nin)
		for bi := 0; bi < batch; bi++ {
			t := dr.timeOf(s, bi)
			if t < 0 {
				continue // finished: the state (and its gradient) passes through
			}
			drow := dX[(t*batch+bi)*nin : (t*batch+bi+1)*nin]
			for j, v := range dxs[bi*nin : (bi+1)*nin] {
				drow[j] += v
			}
			a := dA[bi*gh : (bi+1)*gh]
			if dr.dWb != nil {
				for j, v := range a {
					dr.dWb[j] += v
					if cfg.kind != rnnGRU || j < 2*hid {
						dr.dRb[j] += v
					}
				}
				if cfg.kind == rnnGRU {
					rbh := dr.dRb[2*hid:]
					src := a[2*hid:]
					if cfg.linearBeforeReset {
						src = dLin[bi*hid : (bi+1)*hid]
					}
					for j, v := range src {
						rbh[j] += v
					}
				}
			}
			row := dh[bi*hid : (bi+1)*hid]
			switch cfg.kind {
			case rnnGRU:
				// backGRU left the direct terms in tmp.
				for j := range row {
					row[j] = tmp[bi*hid+j] + dhp[bi*hid+j]
				}
			default:
				copy(row, dhp[bi*hid:(bi+1)*hid])
			}
		}
	}
}

// backLSTM fills dA for step s and turns dc into the gradient of the cell
// state before the step (active rows only).
func (dr *rnnDir[T]) backLSTM(s int, tp *rnnTape[T], dh, dc, dA []T, actGrad func(int, bool, T, T) T) {
	cfg := dr.cfg
	batch, hid := cfg.batch, cfg.hid
	gh := 4 * hid
	for bi := 0; bi < batch; bi++ {
		if dr.timeOf(s, bi) < 0 {
			continue
		}
		o := (s*batch + bi) * gh
		so := (s*batch + bi) * hid
		pre, post := tp.pre[o:o+gh], tp.post[o:o+gh]
		cPrev, cNew, hAct := tp.cPrev[so:so+hid], tp.cNew[so:so+hid], tp.hAct[so:so+hid]
		a := dA[bi*gh : (bi+1)*gh]
		for j := 0; j < hid; j++ {
			ig, og, fg, cg := post[j], post[hid+j], post[2*hid+j], post[3*hid+j]
			dhj := dh[bi*hid+j]
			dao := dhj * hAct[j] * actGrad(0, true, pre[hid+j], og)
			dcT := dc[bi*hid+j] + dhj*og*actGrad(2, false, cNew[j], hAct[j])
			if dr.p != nil {
				dcT += dao * dr.p[hid+j]
				dr.dP[hid+j] += dao * cNew[j]
			}
			di := dcT * cg
			dg := dcT * ig
			df := dcT * cPrev[j]
			dcPrev := dcT * fg
			var daf T
			if cfg.inputForget {
				di -= df
			} else {
				daf = df * actGrad(0, true, pre[2*hid+j], fg)
			}
			dai := di * actGrad(0, true, pre[j], ig)
			dag := dg * actGrad(1, true, pre[3*hid+j], cg)
			if dr.p != nil {
				dcPrev += dai*dr.p[j] + daf*dr.p[2*hid+j]
				dr.dP[j] += dai * cPrev[j]
				dr.dP[2*hid+j] += daf * cPrev[j]
			}
			a[j], a[hid+j], a[2*hid+j], a[3*hid+j] = dai, dao, daf, dag
			dc[bi*hid+j] = dcPrev
		}
	}
}

// backGRU fills dA for step s, leaves in direct the gradient of hPrev from
// everything but the z and r blocks' recurrent product, and dR's candidate
// block; dLin receives the gradient of the candidate's recurrent term.
func (dr *rnnDir[T]) backGRU(s int, tp *rnnTape[T], hPrev, dh, dA, direct, dLin []T, actGrad func(int, bool, T, T) T) {
	cfg := dr.cfg
	batch, hid := cfg.batch, cfg.hid
	gh := 3 * hid
	rh := dr.r[2*hid*hid : 3*hid*hid]
	dRh := dr.dR[2*hid*hid : 3*hid*hid]
	extra := tp.extra[s*batch*hid : (s+1)*batch*hid]
	clear(dLin)
	clear(direct)
	// Candidate and z; for linear_before_reset also r.
	for bi := 0; bi < batch; bi++ {
		if dr.timeOf(s, bi) < 0 {
			continue
		}
		o := (s*batch + bi) * gh
		pre, post := tp.pre[o:o+gh], tp.post[o:o+gh]
		a := dA[bi*gh : (bi+1)*gh]
		for j := 0; j < hid; j++ {
			z, n := post[j], post[2*hid+j]
			dhj := dh[bi*hid+j]
			hp := hPrev[bi*hid+j]
			dan := dhj * (1 - z) * actGrad(1, true, pre[2*hid+j], n)
			a[j] = dhj * (hp - n) * actGrad(0, true, pre[j], z)
			a[2*hid+j] = dan
			direct[bi*hid+j] = dhj * z
			if cfg.linearBeforeReset {
				r := post[hid+j]
				a[hid+j] = dan * extra[bi*hid+j] * actGrad(0, true, pre[hid+j], r)
				dLin[bi*hid+j] = dan * r
			}
		}
	}
	if cfg.linearBeforeReset {
		// lin = hPrev·Rhᵀ + Rbh: dhPrev += dLin·Rh, dRh += dLinᵀ·hPrev.
		dr.mm(false, false, batch, hid, hid, dLin, hid, rh, hid, 1, direct, hid)
		dr.mm(true, false, hid, hid, batch, dLin, hid, hPrev, hid, 1, dRh, hid)
		return
	}
	// n's input includes (r⊙hPrev)·Rhᵀ: d(r⊙hPrev) = dan·Rh.
	dan := make([]T, batch*hid)
	for bi := 0; bi < batch; bi++ {
		copy(dan[bi*hid:(bi+1)*hid], dA[bi*gh+2*hid:bi*gh+3*hid])
	}
	drh := dLin // scratch: d(r⊙hPrev)
	dr.mm(false, false, batch, hid, hid, dan, hid, rh, hid, 0, drh, hid)
	dr.mm(true, false, hid, hid, batch, dan, hid, extra, hid, 1, dRh, hid)
	for bi := 0; bi < batch; bi++ {
		if dr.timeOf(s, bi) < 0 {
			continue
		}
		o := (s*batch + bi) * gh
		pre, post := tp.pre[o:o+gh], tp.post[o:o+gh]
		for j := 0; j < hid; j++ {
			r := post[hid+j]
			g := drh[bi*hid+j]
			dA[bi*gh+hid+j] = g * hPrev[bi*hid+j] * actGrad(0, true, pre[hid+j], r)
			direct[bi*hid+j] += g * r
		}
	}
	// dRbh is the sum of dan (added by the caller from dA's candidate
	// block); dLin is not used further without linear_before_reset.
}
