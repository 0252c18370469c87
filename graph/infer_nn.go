package graph

import (
	"fmt"
	"math"
	"strings"
)

// Inference rules of linear algebra, convolution, pooling, normalisation,
// reduction, resizing and loss ops.

func init() {
	inferRules["MatMul"] = inferMatMul
	inferRules["MatMulInteger"] = inferMatMul
	inferRules["Gemm"] = inferGemm
	inferRules["Einsum"] = inferEinsum
	inferRules["Conv"] = inferConv
	inferRules["ConvInteger"] = inferConv
	inferRules["ConvTranspose"] = inferConvTranspose
	inferRules["MaxPool"] = inferPool
	inferRules["AveragePool"] = inferPool
	inferRules["LpPool"] = inferPool
	inferRules["GlobalAveragePool"] = inferGlobalPool
	inferRules["GlobalMaxPool"] = inferGlobalPool
	inferRules["GlobalLpPool"] = inferGlobalPool
	inferRules["MaxUnpool"] = inferMaxUnpool
	inferRules["BatchNormalization"] = inferBatchNorm
	inferRules["LayerNormalization"] = inferLayerNorm
	for _, op := range []string{"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
		"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"} {
		inferRules[op] = inferReduce
	}
	inferRules["ArgMax"] = inferArgReduce
	inferRules["ArgMin"] = inferArgReduce
	inferRules["TopK"] = inferTopK
	inferRules["Resize"] = inferResize
	inferRules["Upsample"] = inferResize
	inferRules["SoftmaxCrossEntropyLoss"] = inferLoss
	inferRules["NegativeLogLikelihoodLoss"] = inferLoss
	inferRules["QuantizeLinear"] = inferQuantize
	inferRules["DequantizeLinear"] = inferDequantize
	inferRules["GridSample"] = inferGridSample
}

func inferMatMul(c *inferCall) error {
	dt := c.dtype(0)
	if c.n.OpType == "MatMulInteger" {
		dt = Int32
	}
	a, okA := c.shape(0)
	b, okB := c.shape(1)
	if !okA || !okB {
		c.setUnranked(0, dt)
		return nil
	}
	if len(a) == 0 || len(b) == 0 {
		return c.errorf("MatMul of a scalar (shapes %s)", dimsString(a, b))
	}
	vecA, vecB := len(a) == 1, len(b) == 1
	if vecA {
		a = []Dim{knownDim(1), a[0]}
	}
	if vecB {
		b = []Dim{b[0], knownDim(1)}
	}
	if _, err := unifyDims(a[len(a)-1], b[len(b)-2]); err != nil {
		return c.errorf("inner dims differ: %s times %s", dimsString(a), dimsString(b))
	}
	batch, err := broadcastShapes(a[:len(a)-2], b[:len(b)-2])
	if err != nil {
		return c.errorf("batch dims of %s and %s cannot be broadcast", dimsString(a), dimsString(b))
	}
	out := batch
	if !vecA {
		out = append(out, a[len(a)-2])
	}
	if !vecB {
		out = append(out, b[len(b)-1])
	}
	c.setOut(0, dt, out)
	return nil
}

func inferGemm(c *inferCall) error {
	dt := c.dtype(0)
	a, okA := c.shape(0)
	b, okB := c.shape(1)
	if !okA || !okB {
		c.setOut(0, dt, []Dim{{}, {}})
		return nil
	}
	if len(a) != 2 || len(b) != 2 {
		return c.errorf("Gemm needs 2-D inputs, got %s", dimsString(a, b))
	}
	m, k := a[0], a[1]
	if c.n.AttrInt("transA", 0) != 0 {
		m, k = k, m
	}
	k2, n := b[0], b[1]
	if c.n.AttrInt("transB", 0) != 0 {
		k2, n = n, k2
	}
	if _, err := unifyDims(k, k2); err != nil {
		return c.errorf("inner dims differ: A %s (transA=%d), B %s (transB=%d)",
			dimsString(a), c.n.AttrInt("transA", 0), dimsString(b), c.n.AttrInt("transB", 0))
	}
	out := []Dim{m, n}
	if cs, ok := c.shape(2); ok && c.has(2) {
		if _, err := broadcastShapes(cs, out); err != nil || len(cs) > 2 {
			return c.errorf("C %s does not broadcast to %s", dimsString(cs), dimsString(out))
		}
	}
	c.setOut(0, dt, out)
	return nil
}

// einsumTerm is one operand of an Einsum equation: its letters, split at the
// ellipsis when there is one.
type einsumTerm struct {
	before, after string
	ellipsis      bool
}

func parseEinsumTerm(s string) (einsumTerm, error) {
	if i := strings.Index(s, "..."); i >= 0 {
		t := einsumTerm{before: s[:i], after: s[i+3:], ellipsis: true}
		if strings.Contains(t.after, ".") {
			return t, fmt.Errorf("more than one ellipsis in %q", s)
		}
		return t, nil
	}
	if strings.Contains(s, ".") {
		return einsumTerm{}, fmt.Errorf("bad term %q", s)
	}
	return einsumTerm{before: s}, nil
}

func inferEinsum(c *inferCall) error {
	dt := c.dtype(0)
	eq := strings.ReplaceAll(c.n.AttrString("equation", ""), " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(c.n.Inputs) {
		return c.errorf("equation %q has %d operands for %d inputs", eq, len(terms), len(c.n.Inputs))
	}
	letter := map[byte]Dim{}
	count := map[byte]int{}
	var ell [][]Dim
	anyEllipsis := false
	allKnown := true
	for i, ts := range terms {
		t, err := parseEinsumTerm(ts)
		if err != nil {
			return c.errorf("equation %q: %v", eq, err)
		}
		for _, l := range []byte(t.before + t.after) {
			count[l]++
		}
		anyEllipsis = anyEllipsis || t.ellipsis
		s, ok := c.shape(i)
		if !ok {
			allKnown = false
			continue
		}
		nl := len(t.before) + len(t.after)
		if len(s) < nl || (!t.ellipsis && len(s) != nl) {
			return c.errorf("operand %d has shape %s for term %q", i, dimsString(s), ts)
		}
		set := func(l byte, d Dim) error {
			if old, ok := letter[l]; ok {
				m, err := broadcastDim(old, d)
				if err != nil {
					return c.errorf("index %q has sizes %v and %v", string(l), old, d)
				}
				letter[l] = m
				return nil
			}
			letter[l] = d
			return nil
		}
		for j := 0; j < len(t.before); j++ {
			if err := set(t.before[j], s[j]); err != nil {
				return err
			}
		}
		for j := 0; j < len(t.after); j++ {
			if err := set(t.after[j], s[len(s)-len(t.after)+j]); err != nil {
				return err
			}
		}
		if t.ellipsis {
			ell = append(ell, s[len(t.before):len(s)-len(t.after)])
		}
	}
	if !explicit {
		var letters []byte
		for l, k := range count {
			if k == 1 {
				letters = append(letters, l)
			}
		}
		sortBytes(letters)
		rhs = string(letters)
		if anyEllipsis {
			rhs = "..." + rhs
		}
	}
	out, err := parseEinsumTerm(rhs)
	if err != nil {
		return c.errorf("equation %q: %v", eq, err)
	}
	var shape []Dim
	if out.ellipsis {
		if !allKnown {
			c.setUnranked(0, dt)
			return nil
		}
		e, err := broadcastShapes(ell...)
		if err != nil {
			return c.wrap(err)
		}
		shape = append(shape, e...)
	}
	for _, l := range []byte(out.before + out.after) {
		shape = append(shape, letter[l])
	}
	if out.ellipsis {
		// the ellipsis dims go where the ellipsis is
		nb := len(out.before)
		e := shape[:len(shape)-len(out.before)-len(out.after)]
		letters := shape[len(e):]
		shape = append(append(append([]Dim{}, letters[:nb]...), e...), letters[nb:]...)
	}
	c.setOut(0, dt, shape)
	return nil
}

func sortBytes(b []byte) {
	for i := 1; i < len(b); i++ {
		for j := i; j > 0 && b[j] < b[j-1]; j-- {
			b[j], b[j-1] = b[j-1], b[j]
		}
	}
}

// windowParams are the attributes of Conv, ConvTranspose and the pools.
type windowParams struct {
	kernel, strides, dilations, pads []int64
	autoPad                          string
	ceil                             bool
}

func readWindowParams(c *inferCall, nsp int, kernel []int64) (windowParams, error) {
	p := windowParams{kernel: kernel, autoPad: c.n.AttrString("auto_pad", "NOTSET"), ceil: c.n.AttrInt("ceil_mode", 0) != 0}
	ones := func() []int64 {
		v := make([]int64, nsp)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	p.strides = c.n.AttrInts("strides", nil)
	if len(p.strides) == 0 {
		p.strides = ones()
	}
	p.dilations = c.n.AttrInts("dilations", nil)
	if len(p.dilations) == 0 {
		p.dilations = ones()
	}
	p.pads = c.n.AttrInts("pads", nil)
	if len(p.pads) == 0 {
		p.pads = make([]int64, 2*nsp)
	}
	switch {
	case len(p.kernel) != nsp:
		return p, fmt.Errorf("kernel_shape %v for %d spatial dims", p.kernel, nsp)
	case len(p.strides) != nsp:
		return p, fmt.Errorf("strides %v for %d spatial dims", p.strides, nsp)
	case len(p.dilations) != nsp:
		return p, fmt.Errorf("dilations %v for %d spatial dims", p.dilations, nsp)
	case len(p.pads) != 2*nsp:
		return p, fmt.Errorf("pads %v for %d spatial dims", p.pads, nsp)
	}
	for i := 0; i < nsp; i++ {
		if p.strides[i] <= 0 || p.dilations[i] <= 0 {
			return p, fmt.Errorf("strides %v and dilations %v must be positive", p.strides, p.dilations)
		}
	}
	return p, nil
}

// windowOut is the output size of a sliding window along one spatial axis.
func windowOut(in Dim, i int, p windowParams) (Dim, error) {
	k, s, d := p.kernel[i], p.strides[i], p.dilations[i]
	pb, pe := p.pads[i], p.pads[i+len(p.kernel)]
	keff := d*(k-1) + 1
	switch p.autoPad {
	case "SAME_UPPER", "SAME_LOWER":
		if !in.Known {
			if s == 1 {
				return in, nil
			}
			return Dim{}, nil
		}
		return knownDim((in.Value + s - 1) / s), nil
	case "VALID":
		pb, pe = 0, 0
	}
	if !in.Known {
		if keff == 1 && s == 1 && pb+pe == 0 {
			return in, nil
		}
		return Dim{}, nil
	}
	num := in.Value + pb + pe - keff
	if num < 0 {
		return Dim{}, fmt.Errorf("%w: the window (%d with dilation %d) is larger than the padded input (%d+%d+%d)", ErrShapeMismatch, k, d, in.Value, pb, pe)
	}
	if p.ceil {
		out := (num+s-1)/s + 1
		// A window that would start in the end padding is dropped.
		if (out-1)*s >= in.Value+pb {
			out--
		}
		return knownDim(out), nil
	}
	return knownDim(num/s + 1), nil
}

func inferConv(c *inferCall) error {
	dt := c.dtype(0)
	if c.n.OpType == "ConvInteger" {
		dt = Int32
	}
	x, okX := c.shape(0)
	w, okW := c.shape(1)
	if !okX && !okW {
		c.setUnranked(0, dt)
		return nil
	}
	rank := len(x)
	if !okX {
		rank = len(w)
	}
	if rank < 3 {
		return c.errorf("Conv needs an input of rank 3 or more, got %s", dimsString(x))
	}
	if okX && okW && len(w) != rank {
		return c.errorf("input %s and weight %s have different ranks", dimsString(x), dimsString(w))
	}
	nsp := rank - 2
	out := make([]Dim, rank)
	if okX {
		out[0] = x[0]
	}
	if okW {
		out[1] = w[0]
	}
	group := c.n.AttrInt("group", 1)
	if okX && okW && x[1].Known && w[1].Known && x[1].Value != w[1].Value*group {
		return c.errorf("input has %d channels, weight %s with group %d wants %d", x[1].Value, dimsString(w), group, w[1].Value*group)
	}
	kernel := c.n.AttrInts("kernel_shape", nil)
	if kernel == nil {
		if !okW {
			c.setOut(0, dt, out)
			return nil
		}
		for _, d := range w[2:] {
			if !d.Known {
				c.setOut(0, dt, out)
				return nil
			}
			kernel = append(kernel, d.Value)
		}
	}
	p, err := readWindowParams(c, nsp, kernel)
	if err != nil {
		return c.errorf("%v", err)
	}
	if okX {
		for i := 0; i < nsp; i++ {
			if out[2+i], err = windowOut(x[2+i], i, p); err != nil {
				return c.wrap(err)
			}
		}
	}
	c.setOut(0, dt, out)
	return nil
}

func inferConvTranspose(c *inferCall) error {
	dt := c.dtype(0)
	x, okX := c.shape(0)
	w, okW := c.shape(1)
	if !okX || !okW {
		c.setUnranked(0, dt)
		if okX {
			c.setOut(0, dt, make([]Dim, len(x)))
		}
		return nil
	}
	if len(x) < 3 || len(w) != len(x) {
		return c.errorf("input %s and weight %s do not fit", dimsString(x), dimsString(w))
	}
	nsp := len(x) - 2
	group := c.n.AttrInt("group", 1)
	if x[1].Known && w[0].Known && x[1].Value != w[0].Value {
		return c.errorf("input has %d channels, weight %s wants %d", x[1].Value, dimsString(w), w[0].Value)
	}
	out := make([]Dim, len(x))
	out[0] = x[0]
	out[1] = productDim([]Dim{w[1], knownDim(group)})
	if os := c.n.AttrInts("output_shape", nil); os != nil {
		if len(os) == len(x) {
			os = os[2:]
		}
		if len(os) != nsp {
			return c.errorf("output_shape %v for %d spatial dims", os, nsp)
		}
		for i, v := range os {
			out[2+i] = knownDim(v)
		}
		c.setOut(0, dt, out)
		return nil
	}
	kernel := c.n.AttrInts("kernel_shape", nil)
	if kernel == nil {
		for _, d := range w[2:] {
			if !d.Known {
				c.setOut(0, dt, out)
				return nil
			}
			kernel = append(kernel, d.Value)
		}
	}
	p, err := readWindowParams(c, nsp, kernel)
	if err != nil {
		return c.errorf("%v", err)
	}
	outPad := c.n.AttrInts("output_padding", nil)
	if len(outPad) == 0 {
		outPad = make([]int64, nsp)
	}
	if len(outPad) != nsp {
		return c.errorf("output_padding %v for %d spatial dims", outPad, nsp)
	}
	for i := 0; i < nsp; i++ {
		in := x[2+i]
		if !in.Known {
			continue
		}
		s := p.strides[i]
		switch p.autoPad {
		case "SAME_UPPER", "SAME_LOWER":
			out[2+i] = knownDim(in.Value * s)
		default:
			pb, pe := p.pads[i], p.pads[i+nsp]
			if p.autoPad == "VALID" {
				pb, pe = 0, 0
			}
			v := s*(in.Value-1) + outPad[i] + (p.kernel[i]-1)*p.dilations[i] + 1 - pb - pe
			if v < 0 {
				return c.errorf("output size %d along spatial axis %d is negative", v, i)
			}
			out[2+i] = knownDim(v)
		}
	}
	c.setOut(0, dt, out)
	return nil
}

func inferPool(c *inferCall) error {
	dt := c.dtype(0)
	x, ok := c.shape(0)
	if !ok {
		c.setUnranked(0, dt)
		c.setUnranked(1, Int64)
		return nil
	}
	if len(x) < 3 {
		return c.errorf("pooling needs an input of rank 3 or more, got %s", dimsString(x))
	}
	nsp := len(x) - 2
	p, err := readWindowParams(c, nsp, c.n.AttrInts("kernel_shape", nil))
	if err != nil {
		return c.errorf("%v", err)
	}
	out := append([]Dim{}, x[:2]...)
	for i := 0; i < nsp; i++ {
		d, err := windowOut(x[2+i], i, p)
		if err != nil {
			return c.wrap(err)
		}
		out = append(out, d)
	}
	c.setOut(0, dt, out)
	c.setOut(1, Int64, append([]Dim{}, out...))
	return nil
}

func inferGlobalPool(c *inferCall) error {
	dt := c.dtype(0)
	x, ok := c.shape(0)
	if !ok {
		c.setUnranked(0, dt)
		return nil
	}
	if len(x) < 2 {
		return c.errorf("global pooling needs an input of rank 2 or more, got %s", dimsString(x))
	}
	out := append([]Dim{}, x[:2]...)
	for range x[2:] {
		out = append(out, knownDim(1))
	}
	c.setOut(0, dt, out)
	return nil
}

func inferMaxUnpool(c *inferCall) error {
	dt := c.dtype(0)
	x, ok := c.shape(0)
	if c.has(2) {
		if v, ok := c.ints(2); ok {
			out := make([]Dim, len(v))
			for i, d := range v {
				out[i] = knownDim(d)
			}
			c.setOut(0, dt, out)
			return nil
		}
		if s, ok := c.shape(2); ok && len(s) == 1 && s[0].Known {
			c.setOut(0, dt, make([]Dim, s[0].Value))
			return nil
		}
	}
	if !ok || len(x) < 3 {
		c.setUnranked(0, dt)
		return nil
	}
	nsp := len(x) - 2
	p, err := readWindowParams(c, nsp, c.n.AttrInts("kernel_shape", nil))
	if err != nil {
		return c.errorf("%v", err)
	}
	out := append([]Dim{}, x[:2]...)
	for i := 0; i < nsp; i++ {
		in := x[2+i]
		if !in.Known {
			out = append(out, Dim{})
			continue
		}
		out = append(out, knownDim((in.Value-1)*p.strides[i]+p.kernel[i]-p.pads[i]-p.pads[i+nsp]))
	}
	c.setOut(0, dt, out)
	return nil
}

func inferBatchNorm(c *inferCall) error {
	dt := c.dtype(0)
	x, ok := c.shape(0)
	c.setShapeOrUnranked(0, dt, x, ok)
	ch := Dim{}
	if ok && len(x) >= 2 {
		ch = x[1]
	}
	if s, ok := c.shape(1); ok && len(s) == 1 {
		var err error
		if ch, err = unifyDims(ch, s[0]); err != nil {
			return c.errorf("scale %s does not match the %v channels of %s", dimsString(s), x[1], dimsString(x))
		}
	}
	statType := c.dtype(3)
	if statType == Undefined {
		statType = dt
	}
	for i := 1; i < len(c.n.Outputs); i++ {
		c.setOut(i, statType, []Dim{ch})
	}
	return nil
}

func inferLayerNorm(c *inferCall) error {
	dt := c.dtype(0)
	x, ok := c.shape(0)
	c.setShapeOrUnranked(0, dt, x, ok)
	stash := DType(c.n.AttrInt("stash_type", int64(Float32)))
	if !ok {
		c.setUnranked(1, stash)
		c.setUnranked(2, stash)
		return nil
	}
	axis, err := normAxis(c.n.AttrInt("axis", -1), len(x))
	if err != nil {
		return c.wrap(err)
	}
	stat := append([]Dim{}, x...)
	for i := axis; i < len(stat); i++ {
		stat[i] = knownDim(1)
	}
	c.setOut(1, stash, stat)
	c.setOut(2, stash, append([]Dim{}, stat...))
	return nil
}

func inferReduce(c *inferCall) error {
	dt := c.dtype(0)
	x, ok := c.shape(0)
	inputFrom := int64(18)
	if c.n.OpType == "ReduceSum" {
		inputFrom = 13
	}
	axes, _, axesOK := c.axesFrom(1, inputFrom)
	keep := c.n.AttrInt("keepdims", 1) != 0
	if !ok {
		c.setUnranked(0, dt)
		return nil
	}
	if !axesOK {
		if keep {
			c.setOut(0, dt, make([]Dim, len(x)))
		} else {
			c.setUnranked(0, dt)
		}
		return nil
	}
	if len(axes) == 0 {
		// noop_with_empty_axes exists only where axes is an input.
		if c.n.AttrInt("noop_with_empty_axes", 0) != 0 {
			c.setOut(0, dt, x)
			c.propagateSym()
			return nil
		}
		axes = make([]int64, len(x))
		for i := range axes {
			axes[i] = int64(i)
		}
	}
	ax, err := normAxes(axes, len(x))
	if err != nil {
		return c.wrap(err)
	}
	reduced := map[int]bool{}
	for _, a := range ax {
		reduced[a] = true
	}
	var out []Dim
	for i, d := range x {
		switch {
		case !reduced[i]:
			out = append(out, d)
		case keep:
			out = append(out, knownDim(1))
		}
	}
	c.setOut(0, dt, out)
	// Reductions of a whole shape vector (numel = ReduceProd(Shape(x))).
	if s := c.sym(0); s != nil && len(x) == 1 && dt.IsInt() {
		var d Dim
		switch c.n.OpType {
		case "ReduceProd":
			d = productDim(s.dims)
		case "ReduceSum":
			d = knownDim(0)
			for _, e := range s.dims {
				d = sumDim(d, e)
			}
		case "ReduceMax", "ReduceMin":
			v, ok := s.values()
			if !ok || len(v) == 0 {
				return nil
			}
			m := v[0]
			for _, e := range v[1:] {
				if c.n.OpType == "ReduceMax" {
					m = max(m, e)
				} else {
					m = min(m, e)
				}
			}
			d = knownDim(m)
		default:
			return nil
		}
		c.setSym(0, dt, &symValue{dims: []Dim{d}, scalar: !keep})
	}
	return nil
}

// propagateSym copies input 0's element values to output 0.
func (c *inferCall) propagateSym() {
	if s := c.sym(0); s != nil {
		c.setSym(0, c.dtype(0), s)
	}
}

func inferArgReduce(c *inferCall) error {
	x, ok := c.shape(0)
	if !ok {
		c.setUnranked(0, Int64)
		return nil
	}
	axis, err := normAxis(c.n.AttrInt("axis", 0), len(x))
	if err != nil {
		return c.wrap(err)
	}
	out := append([]Dim{}, x...)
	if c.n.AttrInt("keepdims", 1) != 0 {
		out[axis] = knownDim(1)
	} else {
		out = append(out[:axis], out[axis+1:]...)
	}
	c.setOut(0, Int64, out)
	return nil
}

func inferTopK(c *inferCall) error {
	dt := c.dtype(0)
	x, ok := c.shape(0)
	if !ok {
		c.setUnranked(0, dt)
		c.setUnranked(1, Int64)
		return nil
	}
	axis, err := normAxis(c.n.AttrInt("axis", -1), len(x))
	if err != nil {
		return c.wrap(err)
	}
	k := Dim{}
	if c.opset() > 0 && c.opset() < 10 {
		k = knownDim(c.n.AttrInt("k", 0))
	} else if v, ok := c.ints(1); ok && len(v) == 1 {
		k = knownDim(v[0])
	}
	if k.Known && x[axis].Known && k.Value > x[axis].Value {
		return c.errorf("k=%d is larger than the axis (%d)", k.Value, x[axis].Value)
	}
	x[axis] = k
	c.setOut(0, dt, x)
	c.setOut(1, Int64, append([]Dim{}, x...))
	return nil
}

func inferResize(c *inferCall) error {
	dt := c.dtype(0)
	x, ok := c.shape(0)
	if !ok {
		c.setUnranked(0, dt)
		return nil
	}
	out := make([]Dim, len(x))
	axes := make([]int, len(x))
	for i := range axes {
		axes[i] = i
	}
	if a := c.n.AttrInts("axes", nil); a != nil && c.n.OpType == "Resize" {
		ax, err := normAxes(a, len(x))
		if err != nil {
			return c.wrap(err)
		}
		axes = ax
		copy(out, x)
		for _, i := range ax {
			out[i] = Dim{}
		}
	}
	scalesIdx, sizesIdx := 2, 3
	switch {
	case c.n.OpType == "Upsample" || c.opset() < 11:
		scalesIdx, sizesIdx = 1, -1
	}
	var scales []float64
	if c.n.OpType == "Upsample" && c.opset() > 0 && c.opset() < 9 {
		for _, f := range c.n.AttrFloats("scales", nil) {
			scales = append(scales, float64(f))
		}
	} else if c.has(scalesIdx) {
		scales, _ = c.floats(scalesIdx)
	}
	if sizesIdx >= 0 && c.has(sizesIdx) {
		sizes, ok := c.ints(sizesIdx)
		policy := c.n.AttrString("keep_aspect_ratio_policy", "stretch")
		if ok && policy == "stretch" {
			if len(sizes) != len(axes) {
				return c.errorf("sizes %v for %d axes", sizes, len(axes))
			}
			for i, a := range axes {
				out[a] = knownDim(sizes[i])
			}
		}
		c.setOut(0, dt, out)
		return nil
	}
	if len(scales) > 0 {
		if len(scales) != len(axes) {
			return c.errorf("scales %v for %d axes", scales, len(axes))
		}
		for i, a := range axes {
			switch {
			case x[a].Known:
				out[a] = knownDim(int64(math.Floor(float64(x[a].Value) * scales[i])))
			case scales[i] == 1:
				out[a] = x[a]
			}
		}
	}
	c.setOut(0, dt, out)
	return nil
}

func inferLoss(c *inferCall) error {
	dt := c.dtype(0)
	if c.n.AttrString("reduction", "mean") == "none" {
		s, ok := c.shape(1)
		c.setShapeOrUnranked(0, dt, s, ok)
	} else {
		c.setOut(0, dt, []Dim{})
	}
	if x, ok := c.shape(0); ok {
		c.setOut(1, dt, x)
		if l, ok := c.shape(1); ok && len(x) >= 2 && len(l) == len(x)-1 {
			if _, err := unifyDims(x[0], l[0]); err != nil {
				return c.errorf("scores %s and labels %s disagree on the batch size", dimsString(x), dimsString(l))
			}
		}
	}
	return nil
}

func inferQuantize(c *inferCall) error {
	dt := Uint8
	if c.has(2) && c.dtype(2) != Undefined {
		dt = c.dtype(2)
	}
	if c.n.HasAttr("output_dtype") && c.n.AttrInt("output_dtype", 0) != 0 {
		dt = DType(c.n.AttrInt("output_dtype", 0))
	}
	s, ok := c.shape(0)
	c.setShapeOrUnranked(0, dt, s, ok)
	return nil
}

func inferDequantize(c *inferCall) error {
	dt := Float32
	if c.opset() >= 19 && c.dtype(1) != Undefined {
		dt = c.dtype(1)
	}
	s, ok := c.shape(0)
	c.setShapeOrUnranked(0, dt, s, ok)
	return nil
}

func inferGridSample(c *inferCall) error {
	dt := c.dtype(0)
	x, okX := c.shape(0)
	g, okG := c.shape(1)
	if !okX || !okG || len(g) != len(x) {
		c.setUnranked(0, dt)
		return nil
	}
	out := []Dim{x[0], x[1]}
	out = append(out, g[1:len(g)-1]...)
	c.setOut(0, dt, out)
	return nil
}
