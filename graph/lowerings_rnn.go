package graph

import (
	"fmt"
	"math"
	"strings"
)

// Lowerings of the recurrent layers (RNN, GRU, LSTM) and of their gradient
// ops (RNNGrad, GRUGrad, LSTMGrad).
//
// The forward op unrolls over its sequence, which must have a static
// length: per direction, one MatMul projects the whole input (X·Wᵀ plus the
// biases that do not depend on the state), Split cuts it into steps, and
// each step is the cell's arithmetic on [batch, hidden] values, with the
// activations written in primitives. The semantics are those of the CPU
// kernel (backend/cpu/ops/linalg/rnn.go): gate order i, o, f, c (LSTM) and
// z, r, h (GRU); clip bounds the input of every gate activation but not
// LSTM's output activation h; the peepholes of i and f read the previous
// cell state, that of o the new one. With sequence_lens, batch element b
// stops at step lens[b]: its state stays, its outputs beyond are zero, and
// a reverse direction reads its own sequence backwards from lens[b]-1 (a
// Gather with indices computed at run time from lens, so lens need not be
// constant).
//
// The gradient op lowers to the unrolled forward pass followed by its
// reverse-mode derivative (GradientsOf), seeded with the incoming
// gradients of Y, Y_h and Y_c: backpropagation through time in primitives.

func init() {
	for _, op := range []string{"RNN", "GRU", "LSTM"} {
		registerTyped(op, lowerRecurrent)
		domainLowerings[InternalDomain+":"+op+"Grad"] = lowerRecurrentGrad(op)
		internalInferRules[op+"Grad"] = inferRecurrentGrad
		inferRules[op] = inferRecurrent
	}
}

// rnnAct is one activation function of a recurrent cell.
type rnnAct struct {
	name        string // lower case
	alpha, beta float64
}

// rnnActDefaults gives, per lower-cased activation name, its default alpha
// and beta (NaN where the function takes none).
var rnnActDefaults = map[string][2]float64{
	"relu": {math.NaN(), math.NaN()}, "tanh": {math.NaN(), math.NaN()}, "sigmoid": {math.NaN(), math.NaN()},
	"affine": {1, 0}, "leakyrelu": {0.01, math.NaN()}, "thresholdedrelu": {1, math.NaN()},
	"scaledtanh": {1, 1}, "hardsigmoid": {0.2, 0.5}, "elu": {1, math.NaN()},
	"softsign": {math.NaN(), math.NaN()}, "softplus": {math.NaN(), math.NaN()},
}

// recurrent is a RNN/GRU/LSTM node being lowered.
type recurrent struct {
	l                      *lowering
	kind                   string
	dt                     DType
	seq, batch, input, hid int64
	dirs                   int
	reverse                []bool
	layout                 int64
	clip                   float64 // 0: none
	acts                   []rnnAct
	perDir                 int
	linearBeforeReset      bool
	inputForget            bool
}

func (k *recurrent) gates() int64 {
	switch k.kind {
	case "GRU":
		return 3
	case "LSTM":
		return 4
	}
	return 1
}

// parseRecurrent resolves a recurrent node's attributes and static shapes;
// anything the kernel would reject, or a shape not known yet, is
// ErrUnsupportedOp so that the kernel (or a specialised plan) takes it.
func parseRecurrent(l *lowering) (*recurrent, error) {
	n := l.n
	r := &recurrent{l: l, kind: n.OpType, layout: n.AttrInt("layout", 0),
		linearBeforeReset: n.AttrInt("linear_before_reset", 0) != 0,
		inputForget:       n.AttrInt("input_forget", 0) != 0}
	r.dt = l.dtype(l.in(0))
	if r.dt != Float32 && r.dt != Float64 {
		return nil, l.unsupported("%s of dtype %v", r.kind, r.dt)
	}
	if a := n.Attr("clip"); a != nil {
		if a.F <= 0 {
			return nil, l.unsupported("clip %v is not positive", a.F)
		}
		r.clip = float64(a.F)
	}
	switch dir := n.AttrString("direction", "forward"); dir {
	case "forward":
		r.dirs, r.reverse = 1, []bool{false}
	case "reverse":
		r.dirs, r.reverse = 1, []bool{true}
	case "bidirectional":
		r.dirs, r.reverse = 2, []bool{false, true}
	default:
		return nil, l.unsupported("direction %q", dir)
	}
	xs, ok := l.staticShape(l.in(0))
	if !ok || len(xs) != 3 {
		return nil, l.unsupported("%s needs X with a static 3-D shape", r.kind)
	}
	switch r.layout {
	case 0:
		r.seq, r.batch = xs[0], xs[1]
	case 1:
		r.batch, r.seq = xs[0], xs[1]
	default:
		return nil, l.unsupported("layout %d", r.layout)
	}
	r.input = xs[2]
	rs, ok := l.staticShape(l.in(2))
	if !ok || len(rs) != 3 {
		return nil, l.unsupported("%s needs R with a static 3-D shape", r.kind)
	}
	r.hid = n.AttrInt("hidden_size", rs[2])
	if rs[0] != int64(r.dirs) || rs[1] != r.gates()*r.hid || rs[2] != r.hid {
		return nil, l.unsupported("R has shape %v", rs)
	}
	if ws, ok := l.staticShape(l.in(1)); !ok || len(ws) != 3 || ws[0] != int64(r.dirs) || ws[1] != r.gates()*r.hid || ws[2] != r.input {
		return nil, l.unsupported("W's shape is not [%d, %d, %d]", r.dirs, r.gates()*r.hid, r.input)
	}
	if r.seq == 0 || r.batch == 0 {
		return nil, l.unsupported("empty sequence or batch")
	}
	if r.kind == "RNN" && r.linearBeforeReset || r.kind != "LSTM" && r.inputForget {
		return nil, l.unsupported("attribute of another recurrent op")
	}
	defaults := map[string][]string{"RNN": {"Tanh"}, "GRU": {"Sigmoid", "Tanh"}, "LSTM": {"Sigmoid", "Tanh", "Tanh"}}[r.kind]
	r.perDir = len(defaults)
	names := defaults
	if a := n.Attr("activations"); a != nil && len(a.Strings) > 0 {
		names = a.Strings
	}
	if len(names) == r.perDir && r.dirs == 2 {
		names = append(append([]string{}, names...), names...)
	}
	if len(names) != r.perDir*r.dirs {
		return nil, l.unsupported("activations lists %d functions, want %d", len(names), r.perDir*r.dirs)
	}
	alphas, betas := n.AttrFloats("activation_alpha", nil), n.AttrFloats("activation_beta", nil)
	for _, name := range names {
		name = strings.ToLower(name)
		def, ok := rnnActDefaults[name]
		if !ok {
			return nil, l.unsupported("activation %q", name)
		}
		act := rnnAct{name: name, alpha: def[0], beta: def[1]}
		if !math.IsNaN(def[0]) && len(alphas) > 0 {
			act.alpha, alphas = float64(alphas[0]), alphas[1:]
		}
		if !math.IsNaN(def[1]) && len(betas) > 0 {
			act.beta, betas = float64(betas[0]), betas[1:]
		}
		r.acts = append(r.acts, act)
	}
	return r, nil
}

func (r *recurrent) scalar(v float64) string { return r.l.scalarOf(r.dt, v) }

// activate applies act to x, clipping x to [-clip, clip] first when clip.
func (r *recurrent) activate(act rnnAct, x string, clip bool) string {
	l := r.l
	if clip && r.clip > 0 {
		x = l.op("Max", l.op("Min", x, r.scalar(r.clip)), r.scalar(-r.clip))
	}
	switch act.name {
	case "relu":
		return l.op("Relu", x)
	case "tanh":
		return l.op("Tanh", x)
	case "sigmoid":
		return l.op("Sigmoid", x)
	case "affine":
		return l.add(l.mul(x, r.scalar(act.alpha)), r.scalar(act.beta))
	case "leakyrelu":
		return l.op("Where", l.op("Less", x, r.scalar(0)), l.mul(x, r.scalar(act.alpha)), x)
	case "thresholdedrelu":
		return l.op("Where", l.op("Less", r.scalar(act.alpha), x), x, r.scalar(0))
	case "scaledtanh":
		return l.mul(l.op("Tanh", l.mul(x, r.scalar(act.beta))), r.scalar(act.alpha))
	case "hardsigmoid":
		y := l.add(l.mul(x, r.scalar(act.alpha)), r.scalar(act.beta))
		return l.op("Max", l.op("Min", y, r.scalar(1)), r.scalar(0))
	case "elu":
		// Exp of min(x, 0): the branch Where drops never overflows, so its
		// zero gradient stays zero.
		neg := l.mul(l.sub(l.op("Exp", l.op("Min", x, r.scalar(0))), r.scalar(1)), r.scalar(act.alpha))
		return l.op("Where", l.op("Less", x, r.scalar(0)), neg, x)
	case "softsign":
		return l.div(x, l.add(l.op("Abs", x), r.scalar(1)))
	case "softplus":
		// The kernel's log1p(exp(x)), and x itself above 30.
		soft := l.op("Log", l.add(l.op("Exp", l.op("Min", x, r.scalar(30))), r.scalar(1)))
		return l.op("Where", l.op("Less", r.scalar(30), x), x, soft)
	}
	panic("graph: unknown recurrent activation " + act.name) // parseRecurrent checked the names
}

// split cuts x along axis into pieces of the given sizes.
func (r *recurrent) split(x string, axis int64, sizes ...int64) []string {
	l := r.l
	outs := make([]string, len(sizes))
	for i := range outs {
		outs[i] = l.b.Fresh("Split")
	}
	if l.opset() == 0 || l.opset() >= 13 {
		l.b.OpTo("Split", []string{x, l.int64s(sizes...)}, outs, IntAttr("axis", axis))
	} else {
		l.b.OpTo("Split", []string{x}, outs, IntAttr("axis", axis), IntsAttr("split", sizes...))
	}
	return outs
}

// pick is x[i] along axis 0 (that axis removed).
func (r *recurrent) pick(x string, i int) string {
	return r.l.opAttrs("Gather", []string{x, r.l.b.Const(Scalar(Int64, float64(i)))}, IntAttr("axis", 0))
}

// transpose2 is the transpose of a 2-D value.
func (r *recurrent) transpose2(x string) string {
	return r.l.opAttrs("Transpose", []string{x}, IntsAttr("perm", 1, 0))
}

// lowerRecurrent unrolls a RNN, GRU or LSTM node.
func lowerRecurrent(l *lowering) error {
	r, err := parseRecurrent(l)
	if err != nil {
		return err
	}
	out := func(i int) bool { return i < len(l.n.Outputs) && l.n.Outputs[i] != "" }
	outs, err := r.emit([]bool{out(0), out(1), out(2)})
	if err != nil {
		return err
	}
	for i, v := range outs {
		if v != "" {
			l.finish(i, v)
		}
	}
	return nil
}

// emit writes the unrolled layer and returns Y, Y_h and Y_c (each only
// when want says so; Y_c for LSTM only).
func (r *recurrent) emit(want []bool) ([]string, error) {
	l := r.l
	S, B, H := r.seq, r.batch, r.hid
	GH := r.gates() * H
	x := l.in(0)
	if r.layout == 1 {
		x = l.opAttrs("Transpose", []string{x}, IntsAttr("perm", 1, 0, 2))
	}
	state := func(i int) string {
		v := l.in(i)
		if v != "" && r.layout == 1 {
			v = l.opAttrs("Transpose", []string{v}, IntsAttr("perm", 1, 0, 2))
		}
		return v
	}
	h0, c0 := state(5), ""
	if r.kind == "LSTM" {
		c0 = state(6)
	}
	var lens, lensRow, lensCol, mask string
	if len(want) < 3 {
		want = append(want, make([]bool, 3-len(want))...)
	}
	if v := l.in(4); v != "" {
		if c, ok := l.int64Values(v); ok && allEqual(c, S) {
			v = ""
		}
		if v != "" {
			if s, ok := l.staticShape(v); !ok || len(s) != 1 || s[0] != B {
				return nil, l.unsupported("sequence_lens is not a vector of %d lengths", B)
			}
			lens = l.cast(v, Int64)
			lensRow, lensCol = l.reshape(lens, 1, B), l.reshape(lens, B, 1)
			// mask[t, b] = t < lens[b]
		}
	}
	// reversed[t, b] = max(lens[b]-1-t, 0)*B + b: the row of [S*B, ...]
	// that batch element b reads at step t of a reverse direction.
	var reversed string
	if lens != "" && (r.reverse[0] || r.dirs == 2) {
		steps, cols := make([]int64, S), make([]int64, B)
		for i := range steps {
			steps[i] = int64(i) + 1
		}
		for i := range cols {
			cols[i] = int64(i)
		}
		t := l.sub(lensRow, l.b.Const(FromInt64(steps, int(S), 1)))
		t = l.op("Max", t, l.b.Const(Scalar(Int64, 0)))
		reversed = l.add(l.mul(t, l.b.Const(Scalar(Int64, float64(B)))), l.b.Const(FromInt64(cols, 1, int(B))))
		// mask[t, b] = t < lens[b]
		times := make([]int64, S)
		for i := range times {
			times[i] = int64(i)
		}
		mask = l.op("Less", l.b.Const(FromInt64(times, int(S), 1)), lensRow)
	}
	zeroState := l.b.Const(Zeros(r.dt, int(B), int(H)))
	var ys, hs, cs []string
	for d := 0; d < r.dirs; d++ {
		acts := r.acts[d*r.perDir : (d+1)*r.perDir]
		reverse := r.reverse[d]
		w := r.transpose2(r.pick(l.in(1), d)) // [I, GH]
		rd := r.pick(l.in(2), d)              // [GH, H]
		xw := l.op("MatMul", x, w)            // [S, B, GH]
		var rbh string
		if bias := l.in(3); bias != "" {
			bd := r.pick(bias, d)
			wb, rb := l.sliceAxis(bd, 0, 0, GH), l.sliceAxis(bd, 0, GH, 2*GH)
			if r.kind == "GRU" {
				// Rbh stays out: with linear_before_reset r scales it.
				both := l.add(l.sliceAxis(wb, 0, 0, 2*H), l.sliceAxis(rb, 0, 0, 2*H))
				xw = l.add(xw, l.opAttrs("Concat", []string{both, l.sliceAxis(wb, 0, 2*H, GH)}, IntAttr("axis", 0)))
				rbh = l.sliceAxis(rb, 0, 2*H, GH)
			} else {
				xw = l.add(xw, l.add(wb, rb))
			}
		}
		permuted := reverse && reversed != ""
		if permuted {
			xw = l.opAttrs("Gather", []string{l.reshape(xw, S*B, GH), reversed}, IntAttr("axis", 0))
		}
		steps := r.split(xw, 0, repeat(1, int(S))...)
		cell := r.cell(d, acts, rd, rbh)
		h, c := zeroState, zeroState
		if h0 != "" {
			h = r.pick(h0, d)
		}
		if c0 != "" {
			c = r.pick(c0, d)
		}
		out := make([]string, S) // per step, in processing order
		for s := int64(0); s < S; s++ {
			t := s
			if reverse && !permuted {
				t = S - 1 - s
			}
			hNew, cNew := cell(l.reshape(steps[t], B, GH), h, c)
			if lens == "" {
				h, c, out[s] = hNew, cNew, hNew
				continue
			}
			m := l.op("Less", l.b.Const(Scalar(Int64, float64(s))), lensCol) // [B, 1]
			h = l.op("Where", m, hNew, h)
			if cNew != "" {
				c = l.op("Where", m, cNew, c)
			}
			out[s] = l.op("Where", m, hNew, r.scalar(0))
		}
		if want[0] {
			timeOrder := make([]string, S)
			for s := range out {
				t := s
				if reverse && !permuted {
					t = int(S) - 1 - s
				}
				timeOrder[t] = l.reshape(out[s], 1, B, H)
			}
			y := l.opAttrs("Concat", timeOrder, IntAttr("axis", 0)) // [S, B, H]
			if permuted {
				y = l.opAttrs("Gather", []string{l.reshape(y, S*B, H), reversed}, IntAttr("axis", 0))
				y = l.op("Where", l.reshape(mask, S, B, 1), y, r.scalar(0))
			}
			ys = append(ys, l.reshape(y, S, 1, B, H))
		}
		if want[1] {
			hs = append(hs, l.reshape(h, 1, B, H))
		}
		if want[2] && r.kind == "LSTM" {
			cs = append(cs, l.reshape(c, 1, B, H))
		}
	}
	join := func(parts []string, axis int64) string {
		if len(parts) == 1 {
			return parts[0]
		}
		return l.opAttrs("Concat", parts, IntAttr("axis", axis))
	}
	outs := make([]string, 3)
	if want[0] {
		outs[0] = join(ys, 1) // [S, D, B, H]
		if r.layout == 1 {
			outs[0] = l.opAttrs("Transpose", []string{outs[0]}, IntsAttr("perm", 2, 0, 1, 3))
		}
	}
	for i, parts := range [][]string{hs, cs} {
		if !want[i+1] || i == 1 && r.kind != "LSTM" {
			continue
		}
		v := join(parts, 0) // [D, B, H]
		if r.layout == 1 {
			v = l.opAttrs("Transpose", []string{v}, IntsAttr("perm", 1, 0, 2))
		}
		outs[i+1] = v
	}
	return outs, nil
}

// cell returns the step function of direction d: from the step's input
// projection xg ([B, GH], biases included) and the state h, c ([B, H])
// to the new state (c is "" except for LSTM).
func (r *recurrent) cell(d int, acts []rnnAct, rd, rbh string) func(xg, h, c string) (string, string) {
	l := r.l
	H := r.hid
	switch r.kind {
	case "RNN":
		rt := r.transpose2(rd)
		return func(xg, h, _ string) (string, string) {
			return r.activate(acts[0], l.add(xg, l.op("MatMul", h, rt)), true), ""
		}
	case "GRU":
		rzr := r.transpose2(l.sliceAxis(rd, 0, 0, 2*H))  // [H, 2H]
		rh := r.transpose2(l.sliceAxis(rd, 0, 2*H, 3*H)) // [H, H]
		return func(xg, h, _ string) (string, string) {
			xp := r.split(xg, 1, 2*H, H)
			zr := r.activate(acts[0], l.add(xp[0], l.op("MatMul", h, rzr)), true)
			zs := r.split(zr, 1, H, H)
			z, rg := zs[0], zs[1]
			var cand string
			if r.linearBeforeReset {
				lin := l.op("MatMul", h, rh)
				if rbh != "" {
					lin = l.add(lin, rbh)
				}
				cand = l.add(xp[1], l.mul(rg, lin))
			} else {
				cand = l.add(xp[1], l.op("MatMul", l.mul(rg, h), rh))
				if rbh != "" {
					cand = l.add(cand, rbh)
				}
			}
			cand = r.activate(acts[1], cand, true)
			hNew := l.add(l.mul(l.sub(r.scalar(1), z), cand), l.mul(z, h))
			return hNew, ""
		}
	}
	// LSTM
	rt := r.transpose2(rd)
	var pi, po, pf string
	if p := l.in(7); p != "" {
		pd := r.pick(p, d)
		pi, po, pf = l.sliceAxis(pd, 0, 0, H), l.sliceAxis(pd, 0, H, 2*H), l.sliceAxis(pd, 0, 2*H, 3*H)
	}
	return func(xg, h, c string) (string, string) {
		g := r.split(l.add(xg, l.op("MatMul", h, rt)), 1, H, H, H, H)
		ig, og, fg, cg := g[0], g[1], g[2], g[3]
		if pi != "" {
			ig, fg = l.add(ig, l.mul(pi, c)), l.add(fg, l.mul(pf, c))
		}
		ig = r.activate(acts[0], ig, true)
		if r.inputForget {
			fg = l.sub(r.scalar(1), ig)
		} else {
			fg = r.activate(acts[0], fg, true)
		}
		cg = r.activate(acts[1], cg, true)
		cNew := l.add(l.mul(fg, c), l.mul(ig, cg))
		if po != "" {
			og = l.add(og, l.mul(po, cNew))
		}
		og = r.activate(acts[0], og, true)
		return l.mul(r.activate(acts[2], cNew, false), og), cNew
	}
}

func allEqual(v []int64, x int64) bool {
	for _, e := range v {
		if e != x {
			return false
		}
	}
	return true
}

func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// lowerRecurrentGrad lowers RNNGrad, GRUGrad or LSTMGrad (inputs: the
// forward node's eight inputs, then the gradients of Y, Y_h, Y_c; outputs:
// the gradients of X, W, R, B, initial_h, initial_c, P) to the unrolled
// forward pass and its derivative.
func lowerRecurrentGrad(op string) loweringFunc {
	return func(l *lowering) error {
		n := l.n
		fwd := &Node{Name: n.Label() + "/forward", OpType: op, Attrs: n.Attrs, Inputs: make([]string, 8)}
		for i := range fwd.Inputs {
			fwd.Inputs[i] = n.Input(i)
		}
		fb := NewBuilder(n.Label()+"/forward", l.opset())
		fl := &lowering{n: fwd, b: fb, typeOf: l.typeOf, constOf: l.constOf}
		r, err := parseRecurrent(fl)
		if err != nil {
			return err
		}
		seeds := []string{n.Input(8), n.Input(9), n.Input(10)}
		if op != "LSTM" {
			seeds[2] = ""
		}
		want := make([]bool, 3)
		for i, s := range seeds {
			want[i] = s != ""
		}
		ys, err := r.emit(want)
		if err != nil {
			return err
		}
		// Output k is the gradient of input inputOf[k].
		inputOf := []int{0, 1, 2, 3, 5, 6, 7}
		var xs []string
		var outIdx []int
		for k, i := range inputOf {
			if k >= len(n.Outputs) || n.Outputs[k] == "" {
				continue
			}
			if fwd.Inputs[i] == "" {
				return l.unsupported("%sGrad output %d is the gradient of an absent input", op, k)
			}
			xs = append(xs, fwd.Inputs[i])
			outIdx = append(outIdx, k)
		}
		tg := &Graph{Nodes: fb.Nodes, Initializers: fb.Consts}
		grads, err := GradientsOf(tg, ys, seeds, xs, n.Label()+"/bptt", l.opset())
		if err != nil {
			return fmt.Errorf("graph: lowering %s: %w", n.Label(), err)
		}
		l.b.Nodes = append(l.b.Nodes, tg.Nodes...)
		for k, v := range tg.Initializers {
			l.b.Consts[k] = v
		}
		for j, k := range outIdx {
			l.finish(k, grads[j])
		}
		return nil
	}
}

// inferRecurrent types Y ([S, D, B, H], layout 1 [B, S, D, H]) and Y_h,
// Y_c ([D, B, H], layout 1 [B, D, H]).
func inferRecurrent(c *inferCall) error {
	dt := c.dtype(0)
	xs, ok := c.shape(0)
	if !ok || len(xs) != 3 || dt == Undefined {
		for i := range c.n.Outputs {
			c.setUnranked(i, dt)
		}
		return nil
	}
	dirs := int64(1)
	if c.n.AttrString("direction", "forward") == "bidirectional" {
		dirs = 2
	}
	var hid Dim
	if c.n.HasAttr("hidden_size") {
		hid = knownDim(c.n.AttrInt("hidden_size", 0))
	} else if rs, ok := c.shape(2); ok && len(rs) == 3 {
		hid = rs[2]
	}
	seq, batch := xs[0], xs[1]
	y := []Dim{seq, knownDim(dirs), batch, hid}
	st := []Dim{knownDim(dirs), batch, hid}
	if c.n.AttrInt("layout", 0) == 1 {
		batch, seq = xs[0], xs[1]
		y = []Dim{batch, seq, knownDim(dirs), hid}
		st = []Dim{batch, knownDim(dirs), hid}
	}
	c.setOut(0, dt, y)
	for i := 1; i < len(c.n.Outputs); i++ {
		c.setOut(i, dt, append([]Dim{}, st...))
	}
	return nil
}

// inferRecurrentGrad types each gradient like the input it belongs to.
func inferRecurrentGrad(c *inferCall) error {
	dt := c.dtype(0)
	if dt == Undefined {
		return nil
	}
	for k, i := range []int{0, 1, 2, 3, 5, 6, 7} {
		if k >= len(c.n.Outputs) || !c.has(i) {
			continue
		}
		s, ok := c.shape(i)
		c.setShapeOrUnranked(k, dt, s, ok)
	}
	return nil
}
