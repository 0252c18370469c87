package cuda

import (
	"slices"

	"github.com/onnxtrain/onnxtrain/graph"
)

// matmul plans numpy matmul as one strided-batched GEMM: 1-D operands are
// promoted, a right operand without batch dims folds the left's batch into
// M, a broadcast operand gets batch stride 0; operands whose batch dims
// broadcast otherwise are expanded first.
func (pl *planner) matmul() error {
	a, err := pl.in(0)
	if err != nil {
		return err
	}
	b, err := pl.in(1)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	g, err := pl.planMatMul(a, b, o)
	if err != nil {
		return pl.node.Errorf("%v", err)
	}
	pl.p.Steps = append(pl.p.Steps, Step{Node: pl.node.Label(), Gemm: g})
	pl.touch([]Arg{g.A, g.B, g.C})
	return nil
}

func (pl *planner) planMatMul(a, b, o *Buffer) (*Gemm, error) {
	as, bs := slices.Clone(a.Shape), slices.Clone(b.Shape)
	if len(as) == 1 {
		as = []int{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int{bs[0], 1}
	}
	if a.DType != b.DType {
		return nil, errorf("MatMul of %v and %v", a.DType, b.DType)
	}
	if _, err := cudaDataType(a.DType); err != nil {
		return nil, err
	}
	M, K := int64(as[len(as)-2]), int64(as[len(as)-1])
	K2, N := int64(bs[len(bs)-2]), int64(bs[len(bs)-1])
	if K != K2 {
		return nil, errorf("MatMul of %v and %v: inner dimensions differ", a.Shape, b.Shape)
	}
	batchA, batchB := as[:len(as)-2], bs[:len(bs)-2]
	batch := broadcastShape(batchA, batchB)
	nb := int64(1)
	for _, d := range batch {
		nb *= int64(d)
	}
	prod := func(s []int) int64 {
		p := int64(1)
		for _, d := range s {
			p *= int64(d)
		}
		return p
	}
	g := &Gemm{M: M, N: N, K: K, A: Ptr(a), B: Ptr(b), C: Ptr(o), Alpha: 1, DType: a.DType, OutDType: o.DType,
		StrideC: M * N, Batch: nb}
	switch {
	case prod(batchB) == 1:
		// [..., M, K] x [K, N]: one GEMM with the batch folded into M.
		g.M, g.Batch, g.StrideA, g.StrideB, g.StrideC = M*nb, 1, 0, 0, 0
	case prod(batchA) == 1 && prod(batchB) == nb:
		g.StrideA, g.StrideB = 0, K*N
	case prod(batchA) == nb && prod(batchB) == nb && slices.Equal(padLeft(batchA, len(batch)), padLeft(batchB, len(batch))):
		g.StrideA, g.StrideB = M*K, K*N
	default:
		// Mixed broadcasting: expand both to the full batch.
		ea := pl.expandTo(a, append(slices.Clone(batch), int(M), int(K)))
		eb := pl.expandTo(b, append(slices.Clone(batch), int(K), int(N)))
		g.A, g.B, g.StrideA, g.StrideB = Ptr(ea), Ptr(eb), M*K, K*N
	}
	return g, nil
}

func padLeft(s []int, r int) []int {
	out := make([]int, 0, r)
	for range r - len(s) {
		out = append(out, 1)
	}
	return append(out, s...)
}

// expandTo copies x broadcast to shape into a scratch buffer.
func (pl *planner) expandTo(x *Buffer, shape []int) *Buffer {
	dst := pl.scratch(x.DType, shape...)
	xs := x.Shape
	if len(xs) == 1 && len(shape) >= 2 {
		xs = []int{xs[0], 1}
	}
	ix, _ := broadcastIndex(shape, xs)
	copy(ix.Strides[1][:], contiguousStrides(shape))
	pl.launch1D("strided_copy", dst.Elements(), Ptr(x), Ptr(dst), I64(dst.Elements()), I32(x.DType.Size()), Idx(ix))
	return dst
}

// convGeometry is a 2-D convolution's sizes (1-D convolutions have H=1).
type convGeometry struct {
	N, C, H, W, M, KH, KW, OH, OW, G int64
	SH, SW, PH, PW, DH, DW           int64
}

// convGeom reads the sizes of Conv (x, w, y) or ConvTranspose (y, w, x:
// the roles of input and output swap in the caller).
func convGeom(n *graph.Node, x, w, y []int, transposed bool) (convGeometry, error) {
	var c convGeometry
	if len(x) != 4 && len(x) != 3 {
		return c, n.Errorf("%d-D convolution: the CUDA backend plans 1-D and 2-D", len(x)-2)
	}
	four := func(s []int) []int {
		if len(s) == 3 {
			return []int{s[0], s[1], 1, s[2]}
		}
		return s
	}
	x4, w4, y4 := four(x), four(w), four(y)
	c.N, c.C, c.H, c.W = int64(x4[0]), int64(x4[1]), int64(x4[2]), int64(x4[3])
	c.M, c.OH, c.OW = int64(y4[1]), int64(y4[2]), int64(y4[3])
	c.KH, c.KW = int64(w4[2]), int64(w4[3])
	c.G = n.AttrInt("group", 1)
	pick := func(name string, def int64) (int64, int64) {
		v := n.AttrInts(name, nil)
		switch len(v) {
		case 0:
			return def, def
		case 1:
			return 1, v[0]
		default:
			return v[0], v[1]
		}
	}
	c.SH, c.SW = pick("strides", 1)
	c.DH, c.DW = pick("dilations", 1)
	pads := n.AttrInts("pads", nil)
	switch len(pads) {
	case 2: // 1-D: begin, end
		c.PW = pads[0]
	case 4:
		c.PH, c.PW = pads[0], pads[1]
	}
	if ap := n.AttrString("auto_pad", "NOTSET"); ap == "SAME_UPPER" || ap == "SAME_LOWER" {
		in, out := [2]int64{c.H, c.W}, [2]int64{c.OH, c.OW}
		k, s, d := [2]int64{c.KH, c.KW}, [2]int64{c.SH, c.SW}, [2]int64{c.DH, c.DW}
		var begin [2]int64
		for i := range 2 {
			var total int64
			if transposed {
				total = max(0, s[i]*(out[i]-1)+(k[i]-1)*d[i]+1-in[i])
			} else {
				total = max(0, (out[i]-1)*s[i]+(k[i]-1)*d[i]+1-in[i])
			}
			begin[i] = total / 2
			if ap == "SAME_LOWER" {
				begin[i] = total - total/2
			}
		}
		c.PH, c.PW = begin[0], begin[1]
	}
	if c.G < 1 || c.C%c.G != 0 || c.M%c.G != 0 {
		return c, n.Errorf("group %d does not divide %d input and %d output channels", c.G, c.C, c.M)
	}
	return c, nil
}

// conv plans Conv as one im2col launch over all images (the images' C
// channels as N*C planes give the [N, G, Cg*KH*KW, OH*OW] column layout)
// and one batched GEMM per group, then the bias as a broadcast add.
func (pl *planner) conv(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	w, err := pl.in(1)
	if err != nil {
		return err
	}
	bias, err := pl.in(2)
	if err != nil {
		return err
	}
	y, err := pl.out(0)
	if err != nil {
		return err
	}
	c, err := convGeom(n, x.Shape, w.Shape, y.Shape, false)
	if err != nil {
		return err
	}
	if _, err := cudaDataType(x.DType); err != nil || w.DType != x.DType {
		return n.Errorf("Conv of %v input and %v weights", x.DType, w.DType)
	}
	es := int64(x.DType.Size())
	cg, mg := c.C/c.G, c.M/c.G
	kk, ohw := cg*c.KH*c.KW, c.OH*c.OW
	col := pl.scratch(x.DType, int(c.N*c.C*c.KH*c.KW*ohw))
	pl.launch1D("im2col", c.N*c.C*c.KH*c.KW*ohw, Ptr(x), Ptr(col), I64(c.N*c.C), I64(c.H), I64(c.W), I64(c.KH), I64(c.KW),
		I64(c.OH), I64(c.OW), I64(c.SH), I64(c.SW), I64(c.PH), I64(c.PW), I64(c.DH), I64(c.DW), I32(int(es)))
	for g := range c.G {
		gm := &Gemm{M: mg, N: ohw, K: kk, Alpha: 1, DType: x.DType, OutDType: y.DType, Batch: c.N,
			A: PtrAt(w, g*mg*kk*es), StrideA: 0,
			B: PtrAt(col, g*kk*ohw*es), StrideB: c.C * c.KH * c.KW * ohw,
			C: PtrAt(y, g*mg*ohw*int64(y.DType.Size())), StrideC: c.M * ohw}
		pl.p.Steps = append(pl.p.Steps, Step{Node: n.Label(), Gemm: gm})
		pl.touch([]Arg{gm.A, gm.B, gm.C})
	}
	if bias != nil {
		ix, err := broadcastIndex(y.Shape, y.Shape, append([]int{int(c.M)}, ones(len(y.Shape)-2)...))
		if err != nil {
			return n.Errorf("bias: %v", err)
		}
		pl.launch1D("binary_fp", y.Elements(), Ptr(y), Ptr(bias), Ptr(y), I64(y.Elements()), I32(0), I32(int(y.DType)), Idx(ix))
	}
	return nil
}

func ones(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// convTranspose plans ConvTranspose (Conv's input gradient): per group a
// batched GEMM W_g^T x X_g into columns, then col2im into the zeroed
// output, then the bias.
func (pl *planner) convTranspose(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	w, err := pl.in(1)
	if err != nil {
		return err
	}
	bias, err := pl.in(2)
	if err != nil {
		return err
	}
	y, err := pl.out(0)
	if err != nil {
		return err
	}
	// As a convolution from y (the "image") to x (the "output" grid).
	c, err := convGeom(n, y.Shape, w.Shape, x.Shape, true)
	if err != nil {
		return err
	}
	// c.C is y's channels (Cout), c.M is x's (Cin); w is [Cin, Cout/G, KH, KW].
	if _, err := cudaDataType(x.DType); err != nil || w.DType != x.DType {
		return n.Errorf("ConvTranspose of %v input and %v weights", x.DType, w.DType)
	}
	es := int64(x.DType.Size())
	cout, cin := c.C, c.M
	cig, cog := cin/c.G, cout/c.G
	hw := c.OH * c.OW // x's spatial size
	kk := cog * c.KH * c.KW
	// Columns in float32 whatever the operands (col2im accumulates in
	// float32); a half-precision output is cast once at the end.
	col := pl.scratch(graph.Float32, int(c.N*cout*c.KH*c.KW*hw))
	for g := range c.G {
		gm := &Gemm{TransA: true, M: kk, N: hw, K: cig, Alpha: 1, DType: x.DType, OutDType: graph.Float32, Batch: c.N,
			A: PtrAt(w, g*cig*kk*es), StrideA: 0,
			B: PtrAt(x, g*cig*hw*es), StrideB: cin * hw,
			C: PtrAt(col, g*kk*hw*4), StrideC: cout * c.KH * c.KW * hw}
		pl.p.Steps = append(pl.p.Steps, Step{Node: n.Label(), Gemm: gm})
		pl.touch([]Arg{gm.A, gm.B, gm.C})
	}
	img := y
	if y.DType != graph.Float32 {
		img = pl.scratch(graph.Float32, y.Shape...)
	}
	pl.p.Steps = append(pl.p.Steps, Step{Node: n.Label(), Zero: img})
	pl.touch([]Arg{Ptr(img)})
	pl.launch1D("col2im_f32", c.N*cout*c.H*c.W, Ptr(col), Ptr(img), I64(c.N*cout), I64(c.H), I64(c.W), I64(c.KH), I64(c.KW),
		I64(c.OH), I64(c.OW), I64(c.SH), I64(c.SW), I64(c.PH), I64(c.PW), I64(c.DH), I64(c.DW))
	if img != y {
		pl.launch1D("cast_any", y.Elements(), Ptr(img), Ptr(y), I64(y.Elements()), I32(int(graph.Float32)), I32(int(y.DType)))
	}
	if bias != nil {
		ix, err := broadcastIndex(y.Shape, y.Shape, append([]int{int(cout)}, ones(len(y.Shape)-2)...))
		if err != nil {
			return n.Errorf("bias: %v", err)
		}
		pl.launch1D("binary_fp", y.Elements(), Ptr(y), Ptr(bias), Ptr(y), I64(y.Elements()), I32(0), I32(int(y.DType)), Idx(ix))
	}
	return nil
}

// pool plans MaxPool and AveragePool over 1-D and 2-D windows.
func (pl *planner) pool(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	y, err := pl.out(0)
	if err != nil {
		return err
	}
	idx, err := pl.out(1)
	if err != nil {
		return err
	}
	ks := n.AttrInts("kernel_shape", nil)
	if len(ks) != len(x.Shape)-2 {
		return n.Errorf("kernel_shape %v for input %v", ks, x.Shape)
	}
	w := append([]int{1, 1}, toInts(ks)...)
	c, err := convGeom(n, x.Shape, w, y.Shape, false)
	if err != nil {
		return err
	}
	mode := 0
	if n.OpType == "AveragePool" {
		mode = 1 + int(n.AttrInt("count_include_pad", 0))
	}
	ia := Arg{Kind: ArgPtr}
	if idx != nil {
		ia = Ptr(idx)
	}
	pl.launch1D("pool2d_f32", y.Elements(), Ptr(x), Ptr(y), ia, I64(c.N*c.C), I64(c.H), I64(c.W), I64(c.OH), I64(c.OW),
		I64(c.KH), I64(c.KW), I64(c.SH), I64(c.SW), I64(c.PH), I64(c.PW), I64(c.DH), I64(c.DW), I32(mode))
	return nil
}

func toInts(v []int64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}
