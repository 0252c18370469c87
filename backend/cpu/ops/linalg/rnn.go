package linalg

import (
	"math"
	"strings"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("RNN", func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		return recurrentKernel(rnnPlain, n, in)
	})
	kern.Register("GRU", func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		return recurrentKernel(rnnGRU, n, in)
	})
	kern.Register("LSTM", func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		return recurrentKernel(rnnLSTM, n, in)
	})
}

// rnnKind selects the recurrent cell.
type rnnKind int

const (
	rnnPlain rnnKind = iota // RNN: one gate
	rnnGRU                  // GRU: gates z, r, h
	rnnLSTM                 // LSTM: gates i, o, f, c
)

// gates is the number of gate blocks in W and R.
func (k rnnKind) gates() int { return [...]int{1, 3, 4}[k] }

// defaultActivations are the per-direction activations when the node names
// none: f for RNN; f, g for GRU; f, g, h for LSTM.
func (k rnnKind) defaultActivations() []string {
	return [...][]string{{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}}[k]
}

// rnnActKind enumerates the activation functions recurrent ops accept.
type rnnActKind int

const (
	actRelu rnnActKind = iota
	actTanh
	actSigmoid
	actAffine
	actLeakyRelu
	actThresholdedRelu
	actScaledTanh
	actHardSigmoid
	actElu
	actSoftsign
	actSoftplus
)

// rnnActInfo gives, per lower-cased name, the kind and the default alpha and
// beta (NaN where the function takes none).
var rnnActInfo = map[string]struct {
	kind        rnnActKind
	alpha, beta float64
}{
	"relu":            {actRelu, math.NaN(), math.NaN()},
	"tanh":            {actTanh, math.NaN(), math.NaN()},
	"sigmoid":         {actSigmoid, math.NaN(), math.NaN()},
	"affine":          {actAffine, 1, 0},
	"leakyrelu":       {actLeakyRelu, 0.01, math.NaN()},
	"thresholdedrelu": {actThresholdedRelu, 1, math.NaN()},
	"scaledtanh":      {actScaledTanh, 1, 1},
	"hardsigmoid":     {actHardSigmoid, 0.2, 0.5},
	"elu":             {actElu, 1, math.NaN()},
	"softsign":        {actSoftsign, math.NaN(), math.NaN()},
	"softplus":        {actSoftplus, math.NaN(), math.NaN()},
}

// rnnActivation is one activation function with its parameters.
type rnnActivation struct {
	kind        rnnActKind
	alpha, beta float64
}

// rnnActivations resolves the activations attribute (and its alphas and
// betas, consumed in order by the functions that take them) into perDir
// functions for each direction.
func rnnActivations(n *graph.Node, kind rnnKind, dirs int) ([]rnnActivation, error) {
	names := kind.defaultActivations()
	perDir := len(names)
	if a := n.Attr("activations"); a != nil && len(a.Strings) > 0 {
		names = a.Strings
	}
	if len(names) == perDir && dirs == 2 {
		names = append(append([]string{}, names...), names...)
	}
	if len(names) != perDir*dirs {
		return nil, n.Errorf("activations lists %d functions, want %d (%d per direction)", len(names), perDir*dirs, perDir)
	}
	alphas, betas := n.AttrFloats("activation_alpha", nil), n.AttrFloats("activation_beta", nil)
	out := make([]rnnActivation, len(names))
	for i, name := range names {
		info, ok := rnnActInfo[strings.ToLower(name)]
		if !ok {
			return nil, n.Errorf("unknown activation %q", name)
		}
		act := rnnActivation{kind: info.kind, alpha: info.alpha, beta: info.beta}
		if !math.IsNaN(info.alpha) && len(alphas) > 0 {
			act.alpha, alphas = float64(alphas[0]), alphas[1:]
		}
		if !math.IsNaN(info.beta) && len(betas) > 0 {
			act.beta, betas = float64(betas[0]), betas[1:]
		}
		out[i] = act
	}
	return out, nil
}

// rnnFloat is the element type of a recurrent computation.
type rnnFloat interface{ ~float32 | ~float64 }

// rnnApply applies act in place to v, clipping its input to [-clip, clip]
// first when clip > 0.
func rnnApply[T rnnFloat](act rnnActivation, clip float64, v []T) {
	if clip > 0 {
		lo, hi := T(-clip), T(clip)
		for i, x := range v {
			v[i] = min(max(x, lo), hi)
		}
	}
	a, b := act.alpha, act.beta
	switch act.kind {
	case actRelu:
		for i, x := range v {
			v[i] = max(x, 0)
		}
	case actTanh:
		for i, x := range v {
			v[i] = T(math.Tanh(float64(x)))
		}
	case actSigmoid:
		for i, x := range v {
			v[i] = T(rnnSigmoid(float64(x)))
		}
	case actAffine:
		for i, x := range v {
			v[i] = T(a*float64(x) + b)
		}
	case actLeakyRelu:
		for i, x := range v {
			if x < 0 {
				v[i] = T(a * float64(x))
			}
		}
	case actThresholdedRelu:
		for i, x := range v {
			if float64(x) <= a {
				v[i] = 0
			}
		}
	case actScaledTanh:
		for i, x := range v {
			v[i] = T(a * math.Tanh(b*float64(x)))
		}
	case actHardSigmoid:
		for i, x := range v {
			v[i] = T(min(max(a*float64(x)+b, 0), 1))
		}
	case actElu:
		for i, x := range v {
			if x < 0 {
				v[i] = T(a * math.Expm1(float64(x)))
			}
		}
	case actSoftsign:
		for i, x := range v {
			v[i] = T(float64(x) / (1 + math.Abs(float64(x))))
		}
	case actSoftplus:
		for i, x := range v {
			f := float64(x)
			if f > 30 {
				v[i] = x
			} else {
				v[i] = T(math.Log1p(math.Exp(f)))
			}
		}
	}
}

func rnnSigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// rnnConfig is a recurrent node's resolved attributes and shapes.
type rnnConfig struct {
	kind                     rnnKind
	seq, batch, input, hid   int
	dirs                     int
	reverse                  []bool // per direction
	layout                   int
	clip                     float64
	acts                     []rnnActivation // per direction, kind.defaultActivations() long each
	linearBeforeReset        bool
	inputForget              bool
	seqLens                  []int // per batch element
	hasInitialH, hasInitialC bool
}

// rnnMatMulBT computes C = A·Bᵀ + beta·C (A m×k with row stride lda, B n×k
// with row stride ldb, C m×n with row stride ldc).
type rnnMatMulBT[T rnnFloat] func(m, n, k int, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)

func rnnMatMulF32(m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemm.Sgemm(false, true, m, n, k, 1, a, lda, b, ldb, beta, c, ldc)
}

func rnnMatMulGeneric[T rnnFloat](m, n, k int, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	for i := 0; i < m; i++ {
		arow := a[i*lda : i*lda+k]
		crow := c[i*ldc : i*ldc+n]
		for j := range crow {
			brow := b[j*ldb : j*ldb+k]
			var s T
			for q, av := range arow {
				s += av * brow[q]
			}
			if beta == 0 {
				crow[j] = s
			} else {
				crow[j] = s + beta*crow[j]
			}
		}
	}
}

// recurrentKernel validates a RNN/GRU/LSTM node and runs it.
func recurrentKernel(kind rnnKind, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	cfg, err := parseRecurrent(kind, n, in)
	if err != nil {
		return nil, err
	}
	x, w, r := in[0], in[1], in[2]
	b, h0 := kern.Opt(in, 3), kern.Opt(in, 5)
	var c0, peep *graph.Tensor
	if kind == rnnLSTM {
		c0, peep = kern.Opt(in, 6), kern.Opt(in, 7)
	}
	var outs []*graph.Tensor
	switch x.DType {
	case graph.Float32:
		outs = rnnRun(cfg, x, w, r, b, h0, c0, peep, rnnMatMulF32)
	case graph.Float64:
		outs = rnnRun(cfg, x, w, r, b, h0, c0, peep, rnnMatMulGeneric[float64])
	default:
		return nil, n.Errorf("dtype %v is not supported", x.DType)
	}
	if kind != rnnLSTM {
		outs = outs[:2]
	}
	return outs, nil
}

// parseRecurrent checks a RNN/GRU/LSTM node's inputs (X, W, R, B,
// sequence_lens, initial_h, initial_c, P) and resolves its attributes.
func parseRecurrent(kind rnnKind, n *graph.Node, in []*graph.Tensor) (*rnnConfig, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	x, w, r := in[0], in[1], in[2]
	b, seqLens, h0 := kern.Opt(in, 3), kern.Opt(in, 4), kern.Opt(in, 5)
	var c0, peep *graph.Tensor
	if kind == rnnLSTM {
		c0, peep = kern.Opt(in, 6), kern.Opt(in, 7)
	}
	for i, t := range []*graph.Tensor{w, r, b, h0, c0, peep} {
		if t != nil && t.DType != x.DType {
			return nil, n.Errorf("input %d is %v but X is %v", []int{1, 2, 3, 5, 6, 7}[i], t.DType, x.DType)
		}
	}
	cfg := &rnnConfig{
		kind:              kind,
		layout:            int(n.AttrInt("layout", 0)),
		linearBeforeReset: n.AttrInt("linear_before_reset", 0) != 0,
		inputForget:       n.AttrInt("input_forget", 0) != 0,
	}
	if a := n.Attr("clip"); a != nil {
		if a.F <= 0 {
			return nil, n.Errorf("clip must be positive, got %v", a.F)
		}
		cfg.clip = float64(a.F)
	}
	switch dir := n.AttrString("direction", "forward"); dir {
	case "forward":
		cfg.dirs, cfg.reverse = 1, []bool{false}
	case "reverse":
		cfg.dirs, cfg.reverse = 1, []bool{true}
	case "bidirectional":
		cfg.dirs, cfg.reverse = 2, []bool{false, true}
	default:
		return nil, n.Errorf("unknown direction %q", dir)
	}
	if len(x.Shape) != 3 {
		return nil, n.Errorf("X must be 3-D, got shape %v", x.Shape)
	}
	switch cfg.layout {
	case 0:
		cfg.seq, cfg.batch = x.Shape[0], x.Shape[1]
	case 1:
		cfg.batch, cfg.seq = x.Shape[0], x.Shape[1]
	default:
		return nil, n.Errorf("layout must be 0 or 1, got %d", cfg.layout)
	}
	cfg.input = x.Shape[2]
	if len(r.Shape) != 3 {
		return nil, n.Errorf("R must be 3-D, got shape %v", r.Shape)
	}
	cfg.hid = int(n.AttrInt("hidden_size", int64(r.Shape[2])))
	g := kind.gates()
	gh := g * cfg.hid
	check := func(name string, t *graph.Tensor, want ...int) error {
		if t != nil && !equalInts(t.Shape, want) {
			return n.Errorf("%s has shape %v, want %v", name, t.Shape, want)
		}
		return nil
	}
	stateShape := []int{cfg.dirs, cfg.batch, cfg.hid}
	if cfg.layout == 1 {
		stateShape = []int{cfg.batch, cfg.dirs, cfg.hid}
	}
	for _, err := range []error{
		check("W", w, cfg.dirs, gh, cfg.input),
		check("R", r, cfg.dirs, gh, cfg.hid),
		check("B", b, cfg.dirs, 2*gh),
		check("sequence_lens", seqLens, cfg.batch),
		check("initial_h", h0, stateShape...),
		check("initial_c", c0, stateShape...),
		check("P", peep, cfg.dirs, 3*cfg.hid),
	} {
		if err != nil {
			return nil, err
		}
	}
	cfg.seqLens = make([]int, cfg.batch)
	for i := range cfg.seqLens {
		cfg.seqLens[i] = cfg.seq
		if seqLens != nil {
			l := int(seqLens.Int(i))
			if l < 0 || l > cfg.seq {
				return nil, n.Errorf("sequence_lens[%d] = %d is outside [0, %d]", i, l, cfg.seq)
			}
			cfg.seqLens[i] = l
		}
	}
	var err error
	if cfg.acts, err = rnnActivations(n, kind, cfg.dirs); err != nil {
		return nil, err
	}
	cfg.hasInitialH, cfg.hasInitialC = h0 != nil, c0 != nil
	return cfg, nil
}

// rnnData returns t's data as []T, or nil for an absent tensor.
func rnnData[T rnnFloat](t *graph.Tensor) []T {
	if t == nil {
		return nil
	}
	return t.Data.([]T)
}

// rnnSwap01 transposes the first two dims of a [d0, d1, rest] array.
func rnnSwap01[T rnnFloat](src []T, d0, d1, rest int) []T {
	out := make([]T, len(src))
	stridedCopy(out, src, []int{d1, d0, rest}, []int{rest, d1 * rest, 1})
	return out
}

// rnnRun computes Y, Y_h and Y_c (layout-converted) for every direction.
func rnnRun[T rnnFloat](cfg *rnnConfig, xt, wt, rt, bt, h0t, c0t, pt *graph.Tensor, mm rnnMatMulBT[T]) []*graph.Tensor {
	seq, batch, hid, dirs := cfg.seq, cfg.batch, cfg.hid, cfg.dirs
	gh := cfg.kind.gates() * hid
	x, h0, c0 := rnnData[T](xt), rnnData[T](h0t), rnnData[T](c0t)
	if cfg.layout == 1 {
		x = rnnSwap01(x, batch, seq, cfg.input)
		if h0 != nil {
			h0 = rnnSwap01(h0, batch, dirs, hid)
		}
		if c0 != nil {
			c0 = rnnSwap01(c0, batch, dirs, hid)
		}
	}
	y := make([]T, seq*dirs*batch*hid)
	yh := make([]T, dirs*batch*hid)
	yc := make([]T, dirs*batch*hid)
	w, r, b, p := rnnData[T](wt), rnnData[T](rt), rnnData[T](bt), rnnData[T](pt)
	for d := 0; d < dirs; d++ {
		cell := &rnnCell[T]{
			cfg: cfg, dir: d, mm: mm,
			w: w[d*gh*cfg.input : (d+1)*gh*cfg.input],
			r: r[d*gh*hid : (d+1)*gh*hid],
			h: yh[d*batch*hid : (d+1)*batch*hid],
			c: yc[d*batch*hid : (d+1)*batch*hid],
		}
		if b != nil {
			cell.wb, cell.rb = b[2*d*gh:(2*d+1)*gh], b[(2*d+1)*gh:(2*d+2)*gh]
		}
		if p != nil {
			cell.p = p[d*3*hid : (d+1)*3*hid]
		}
		if h0 != nil {
			copy(cell.h, h0[d*batch*hid:])
		}
		if c0 != nil {
			copy(cell.c, c0[d*batch*hid:])
		}
		cell.run(x, y)
	}
	yShape := []int{seq, dirs, batch, hid}
	stateShape := []int{dirs, batch, hid}
	if cfg.layout == 1 {
		// [seq, dirs, batch, hid] -> [batch, seq, dirs, hid]
		yl := make([]T, len(y))
		stridedCopy(yl, y, []int{batch, seq, dirs, hid}, []int{hid, dirs * batch * hid, batch * hid, 1})
		y = yl
		yh, yc = rnnSwap01(yh, dirs, batch, hid), rnnSwap01(yc, dirs, batch, hid)
		yShape = []int{batch, seq, dirs, hid}
		stateShape = []int{batch, dirs, hid}
	}
	dt := xt.DType
	return []*graph.Tensor{
		{DType: dt, Shape: yShape, Data: y},
		{DType: dt, Shape: stateShape, Data: yh},
		{DType: dt, Shape: append([]int{}, stateShape...), Data: yc},
	}
}

// rnnCell is one direction of a recurrent layer.
type rnnCell[T rnnFloat] struct {
	cfg    *rnnConfig
	dir    int
	mm     rnnMatMulBT[T]
	w, r   []T // [gates*hid, input], [gates*hid, hid]
	wb, rb []T // [gates*hid] each, nil without B
	p      []T // peepholes [3*hid] (LSTM), nil without P
	h, c   []T // state [batch, hid], updated in place
}

// run processes the whole sequence x ([seq, batch, input]) writing this
// direction's hidden states into y ([seq, dirs, batch, hid]).
func (cl *rnnCell[T]) run(x, y []T) {
	cfg := cl.cfg
	seq, batch, hid, in := cfg.seq, cfg.batch, cfg.hid, cfg.input
	gh := cfg.kind.gates() * hid
	// xw[t, b, :] = X[t, b] · Wᵀ + biases that do not depend on the state.
	xw := make([]T, seq*batch*gh)
	cl.mm(seq*batch, gh, in, x, in, cl.w, in, 0, xw, gh)
	if cl.wb != nil {
		bias := make([]T, gh)
		for j := range bias {
			bias[j] = cl.wb[j] + cl.rb[j]
		}
		if cfg.kind == rnnGRU {
			// Rbh stays out: with linear_before_reset it is scaled by r.
			copy(bias[2*hid:], cl.wb[2*hid:])
		}
		for row := 0; row < seq*batch; row++ {
			v := xw[row*gh : (row+1)*gh]
			for j, bv := range bias {
				v[j] += bv
			}
		}
	}
	hr := make([]T, batch*gh)    // H·Rᵀ for the step
	gates := make([]T, gh)       // one batch row's gate pre-activations
	rh := make([]T, batch*hid)   // GRU: r ⊙ H
	hNew := make([]T, batch*hid) // GRU: candidate state
	acts := cfg.acts[cl.dir*len(cfg.kind.defaultActivations()):]
	reverse := cfg.reverse[cl.dir]
	dirs := cfg.dirs
	for s := 0; s < seq; s++ {
		// time index of batch element bi at step s, or -1 when its sequence is over
		timeOf := func(bi int) int {
			l := cfg.seqLens[bi]
			if s >= l {
				return -1
			}
			if reverse {
				return l - 1 - s
			}
			return s
		}
		switch cfg.kind {
		case rnnPlain:
			cl.mm(batch, gh, hid, cl.h, hid, cl.r, hid, 0, hr, gh)
			for bi := 0; bi < batch; bi++ {
				t := timeOf(bi)
				if t < 0 {
					continue
				}
				g := gates[:hid]
				xr, hrr := xw[(t*batch+bi)*gh:], hr[bi*gh:]
				for j := range g {
					g[j] = xr[j] + hrr[j]
				}
				rnnApply(acts[0], cfg.clip, g)
				copy(cl.h[bi*hid:(bi+1)*hid], g)
				copy(y[((t*dirs+cl.dir)*batch+bi)*hid:], g)
			}
		case rnnGRU:
			cl.stepGRU(timeOf, xw, hr, gates, rh, hNew, acts, y)
		case rnnLSTM:
			cl.stepLSTM(timeOf, xw, hr, gates, acts, y)
		}
	}
}

// stepGRU advances the GRU state by one step.
func (cl *rnnCell[T]) stepGRU(timeOf func(int) int, xw, hr, gates, rh, hNew []T, acts []rnnActivation, y []T) {
	cfg := cl.cfg
	batch, hid, dirs := cfg.batch, cfg.hid, cfg.dirs
	gh := 3 * hid
	var rbh []T
	if cl.rb != nil {
		rbh = cl.rb[2*hid : 3*hid]
	}
	lbr := cfg.linearBeforeReset
	if lbr {
		cl.mm(batch, gh, hid, cl.h, hid, cl.r, hid, 0, hr, gh)
	} else {
		// Only the z and r blocks of R apply to H directly.
		cl.mm(batch, 2*hid, hid, cl.h, hid, cl.r, hid, 0, hr, gh)
	}
	for bi := 0; bi < batch; bi++ {
		t := timeOf(bi)
		if t < 0 {
			continue
		}
		xr, hrr := xw[(t*batch+bi)*gh:(t*batch+bi+1)*gh], hr[bi*gh:(bi+1)*gh]
		zr := gates[:2*hid]
		for j := range zr {
			zr[j] = xr[j] + hrr[j]
		}
		rnnApply(acts[0], cfg.clip, zr)
		r, h := zr[hid:2*hid], cl.h[bi*hid:(bi+1)*hid]
		cand := hNew[bi*hid : (bi+1)*hid]
		if lbr {
			for j := range cand {
				lin := hrr[2*hid+j]
				if rbh != nil {
					lin += rbh[j]
				}
				cand[j] = xr[2*hid+j] + r[j]*lin
			}
		} else {
			rrow := rh[bi*hid : (bi+1)*hid]
			for j := range rrow {
				rrow[j] = r[j] * h[j]
			}
		}
		// Park z in the row's spent z block of hr for the final update.
		copy(hrr[:hid], zr[:hid])
	}
	if !lbr {
		// (r ⊙ H)·Rhᵀ for every row, then the candidate.
		cl.mm(batch, hid, hid, rh, hid, cl.r[2*hid*hid:], hid, 0, hr[2*hid:], gh)
		for bi := 0; bi < batch; bi++ {
			t := timeOf(bi)
			if t < 0 {
				continue
			}
			xr, hrr := xw[(t*batch+bi)*gh:(t*batch+bi+1)*gh], hr[bi*gh:(bi+1)*gh]
			cand := hNew[bi*hid : (bi+1)*hid]
			for j := range cand {
				v := xr[2*hid+j] + hrr[2*hid+j]
				if rbh != nil {
					v += rbh[j]
				}
				cand[j] = v
			}
		}
	}
	for bi := 0; bi < batch; bi++ {
		t := timeOf(bi)
		if t < 0 {
			continue
		}
		cand := hNew[bi*hid : (bi+1)*hid]
		rnnApply(acts[1], cfg.clip, cand)
		z, h := hr[bi*gh:bi*gh+hid], cl.h[bi*hid:(bi+1)*hid]
		for j := range h {
			h[j] = (1-z[j])*cand[j] + z[j]*h[j]
		}
		copy(y[((t*dirs+cl.dir)*batch+bi)*hid:], h)
	}
}

// stepLSTM advances the LSTM state by one step.
func (cl *rnnCell[T]) stepLSTM(timeOf func(int) int, xw, hr, gates []T, acts []rnnActivation, y []T) {
	cfg := cl.cfg
	batch, hid, dirs := cfg.batch, cfg.hid, cfg.dirs
	gh := 4 * hid
	cl.mm(batch, gh, hid, cl.h, hid, cl.r, hid, 0, hr, gh)
	var pi, po, pf []T
	if cl.p != nil {
		pi, po, pf = cl.p[:hid], cl.p[hid:2*hid], cl.p[2*hid:3*hid]
	}
	for bi := 0; bi < batch; bi++ {
		t := timeOf(bi)
		if t < 0 {
			continue
		}
		xr, hrr := xw[(t*batch+bi)*gh:(t*batch+bi+1)*gh], hr[bi*gh:(bi+1)*gh]
		for j := range gates {
			gates[j] = xr[j] + hrr[j]
		}
		// Gate blocks in W/R order: i, o, f, c.
		ig, og, fg, cg := gates[:hid], gates[hid:2*hid], gates[2*hid:3*hid], gates[3*hid:]
		c, h := cl.c[bi*hid:(bi+1)*hid], cl.h[bi*hid:(bi+1)*hid]
		if pi != nil {
			for j := range ig {
				ig[j] += pi[j] * c[j]
				fg[j] += pf[j] * c[j]
			}
		}
		rnnApply(acts[0], cfg.clip, ig)
		if cfg.inputForget {
			for j := range fg {
				fg[j] = 1 - ig[j]
			}
		} else {
			rnnApply(acts[0], cfg.clip, fg)
		}
		rnnApply(acts[1], cfg.clip, cg)
		for j := range c {
			c[j] = fg[j]*c[j] + ig[j]*cg[j]
		}
		if po != nil {
			for j := range og {
				og[j] += po[j] * c[j]
			}
		}
		rnnApply(acts[0], cfg.clip, og)
		copy(h, c)
		rnnApply(acts[2], 0, h)
		for j := range h {
			h[j] *= og[j]
		}
		copy(y[((t*dirs+cl.dir)*batch+bi)*hid:], h)
	}
}
