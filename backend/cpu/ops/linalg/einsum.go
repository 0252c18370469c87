package linalg

import (
	"slices"
	"strings"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("Einsum", einsumKernel)
}

// Einsum labels are the letters' byte values; the dims an ellipsis stands
// for get labels from einsumEllipsisBase up, right-aligned across operands
// (an operand with fewer ellipsis dims broadcasts against the others).
const einsumEllipsisBase = 1 << 10

// einsumSpec is a parsed equation.
type einsumSpec struct {
	// inputs[i] lists operand i's label per dimension (repeats allowed).
	inputs [][]int
	// output lists the output labels in order.
	output []int
	// sizes maps a label to its (broadcast) extent.
	sizes map[int]int
}

// einsumTokens splits one term into letters and at most one ellipsis
// (reported as -1).
func einsumTokens(n *graph.Node, term string) ([]int, error) {
	var out []int
	ellipsis := false
	for i := 0; i < len(term); i++ {
		ch := term[i]
		switch {
		case ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z':
			out = append(out, int(ch))
		case strings.HasPrefix(term[i:], "..."):
			if ellipsis {
				return nil, n.Errorf("term %q has more than one ellipsis", term)
			}
			ellipsis = true
			out = append(out, -1)
			i += 2
		default:
			return nil, n.Errorf("term %q: unexpected character %q", term, ch)
		}
	}
	return out, nil
}

// parseEinsum checks equation against the operand shapes.
func parseEinsum(n *graph.Node, equation string, shapes [][]int) (*einsumSpec, error) {
	eq := strings.ReplaceAll(equation, " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(shapes) {
		return nil, n.Errorf("equation %q has %d input terms but the node has %d inputs", equation, len(terms), len(shapes))
	}
	spec := &einsumSpec{sizes: map[int]int{}}
	toks := make([][]int, len(terms))
	ellRank := make([]int, len(terms))
	maxEll := 0
	for i, term := range terms {
		t, err := einsumTokens(n, term)
		if err != nil {
			return nil, err
		}
		toks[i] = t
		letters := len(t)
		if slices.Contains(t, -1) {
			letters--
			ellRank[i] = len(shapes[i]) - letters
		}
		if ellRank[i] < 0 || (!slices.Contains(t, -1) && letters != len(shapes[i])) {
			return nil, n.Errorf("term %q does not match input %d of rank %d", term, i, len(shapes[i]))
		}
		maxEll = max(maxEll, ellRank[i])
	}
	counts := map[int]int{}
	for i, t := range toks {
		var labels []int
		for _, l := range t {
			if l == -1 {
				for e := maxEll - ellRank[i]; e < maxEll; e++ {
					labels = append(labels, einsumEllipsisBase+e)
				}
				continue
			}
			labels = append(labels, l)
			counts[l]++
		}
		for d, l := range labels {
			size := shapes[i][d]
			old, seen := spec.sizes[l]
			switch {
			case !seen || old == 1:
				spec.sizes[l] = size
			case size != old && size != 1:
				return nil, n.Errorf("label %s has extent %d in input %d but %d elsewhere", einsumLabelName(l), size, i, old)
			}
		}
		spec.inputs = append(spec.inputs, labels)
	}
	if explicit {
		t, err := einsumTokens(n, rhs)
		if err != nil {
			return nil, err
		}
		for _, l := range t {
			if l == -1 {
				for e := 0; e < maxEll; e++ {
					spec.output = append(spec.output, einsumEllipsisBase+e)
				}
				continue
			}
			if _, ok := spec.sizes[l]; !ok {
				return nil, n.Errorf("output label %s appears in no input", einsumLabelName(l))
			}
			if slices.Contains(spec.output, l) {
				return nil, n.Errorf("output label %s is repeated", einsumLabelName(l))
			}
			spec.output = append(spec.output, l)
		}
	} else {
		for e := 0; e < maxEll; e++ {
			spec.output = append(spec.output, einsumEllipsisBase+e)
		}
		var once []int
		for l, c := range counts {
			if c == 1 {
				once = append(once, l)
			}
		}
		slices.Sort(once)
		spec.output = append(spec.output, once...)
	}
	return spec, nil
}

func einsumLabelName(l int) string {
	if l >= einsumEllipsisBase {
		return "..."
	}
	return string(rune(l))
}

// einsumOperand is a strided view of an operand over unique labels: repeated
// labels are folded into one dim whose stride is the sum (a diagonal).
type einsumOperand[T numeric] struct {
	data    []T
	labels  []int
	shape   []int
	strides []int
}

func newEinsumOperand[T numeric](data []T, shape []int, labels []int) *einsumOperand[T] {
	st := contiguousStrides(shape)
	op := &einsumOperand[T]{data: data}
	for d, l := range labels {
		if j := slices.Index(op.labels, l); j >= 0 {
			op.strides[j] += st[d]
			continue
		}
		op.labels = append(op.labels, l)
		op.shape = append(op.shape, shape[d])
		op.strides = append(op.strides, st[d])
	}
	return op
}

// gather materializes the operand contiguously with the given label order
// and extents. A label the operand lacks, or has with extent 1 where a larger
// extent is asked for, is broadcast. Labels of the operand that order omits
// are read at index 0 (callers list them all or have reduced them away).
func (op *einsumOperand[T]) gather(order, extents []int) []T {
	strides := make([]int, len(order))
	for i, l := range order {
		j := slices.Index(op.labels, l)
		if j < 0 || (op.shape[j] == 1 && extents[i] != 1) {
			strides[i] = 0
			continue
		}
		strides[i] = op.strides[j]
	}
	out := make([]T, product(extents))
	stridedCopy(out, op.data, extents, strides)
	return out
}

// reduce sums out every label not in keep.
func (op *einsumOperand[T]) reduce(keep func(l int) bool) *einsumOperand[T] {
	var kept, summed []int
	var keptShape, sumShape []int
	for i, l := range op.labels {
		if keep(l) {
			kept = append(kept, l)
			keptShape = append(keptShape, op.shape[i])
		} else {
			summed = append(summed, l)
			sumShape = append(sumShape, op.shape[i])
		}
	}
	if len(summed) == 0 {
		return op
	}
	full := op.gather(append(append([]int{}, kept...), summed...), append(append([]int{}, keptShape...), sumShape...))
	outer, inner := product(keptShape), product(sumShape)
	data := make([]T, outer)
	for i := range data {
		var s T
		for _, v := range full[i*inner : i*inner+inner] {
			s += v
		}
		data[i] = s
	}
	return &einsumOperand[T]{data: data, labels: kept, shape: keptShape, strides: contiguousStrides(keptShape)}
}

func (op *einsumOperand[T]) size(l int) int {
	if j := slices.Index(op.labels, l); j >= 0 {
		return op.shape[j]
	}
	return 1
}

// einsumContract multiplies a and b, summing the labels they share that keep
// rejects, as one batched matrix product: a is laid out as
// [batch, aOnly, summed] and b as [batch, summed, bOnly].
func einsumContract[T numeric](a, b *einsumOperand[T], keep func(int) bool,
	matmul func(batch, m, n, k int, a, b, c []T)) *einsumOperand[T] {
	var batch, summed, aOnly, bOnly []int
	for _, l := range a.labels {
		switch {
		case !slices.Contains(b.labels, l):
			aOnly = append(aOnly, l)
		case keep(l):
			batch = append(batch, l)
		default:
			summed = append(summed, l)
		}
	}
	for _, l := range b.labels {
		if !slices.Contains(a.labels, l) {
			bOnly = append(bOnly, l)
		}
	}
	shared := func(ls []int) []int {
		out := make([]int, len(ls))
		for i, l := range ls {
			out[i] = max(a.size(l), b.size(l))
		}
		return out
	}
	own := func(op *einsumOperand[T], ls []int) []int {
		out := make([]int, len(ls))
		for i, l := range ls {
			out[i] = op.size(l)
		}
		return out
	}
	batchExt, sumExt := shared(batch), shared(summed)
	aOnlyExt, bOnlyExt := own(a, aOnly), own(b, bOnly)
	ad := a.gather(slices.Concat(batch, aOnly, summed), slices.Concat(batchExt, aOnlyExt, sumExt))
	bd := b.gather(slices.Concat(batch, summed, bOnly), slices.Concat(batchExt, sumExt, bOnlyExt))
	nb, m, nn, k := product(batchExt), product(aOnlyExt), product(bOnlyExt), product(sumExt)
	shape := slices.Concat(batchExt, aOnlyExt, bOnlyExt)
	out := make([]T, product(shape))
	matmul(nb, m, nn, k, ad, bd, out)
	return &einsumOperand[T]{
		data:    out,
		labels:  slices.Concat(batch, aOnly, bOnly),
		shape:   shape,
		strides: contiguousStrides(shape),
	}
}

// einsumBatchedF32 is the float32 batched product, through Sgemm.
func einsumBatchedF32(batch, m, n, k int, a, b, c []float32) {
	gemm.SgemmStrided(false, false, m, n, k, 1, a, k, m*k, b, n, k*n, 0, c, n, m*n, batch)
}

// einsumBatchedGeneric is the batched product for other dtypes.
func einsumBatchedGeneric[T numeric](batch, m, n, k int, a, b, c []T) {
	for i := 0; i < batch; i++ {
		linalgMatMulGeneric(m, n, k, a[i*m*k:], b[i*k*n:], c[i*m*n:])
	}
}

// einsumRun evaluates spec on operands of element type T, contracting them
// left to right.
func einsumRun[T numeric](spec *einsumSpec, data [][]T, shapes [][]int, matmul func(batch, m, n, k int, a, b, c []T)) ([]T, []int) {
	ops := make([]*einsumOperand[T], len(data))
	for i := range data {
		ops[i] = newEinsumOperand(data[i], shapes[i], spec.inputs[i])
	}
	// neededAfter(i) reports whether a label is used by the output or by
	// an operand from index i on.
	neededAfter := func(i int) func(int) bool {
		return func(l int) bool {
			if slices.Contains(spec.output, l) {
				return true
			}
			for _, op := range ops[i:] {
				if slices.Contains(op.labels, l) {
					return true
				}
			}
			return false
		}
	}
	acc := ops[0].reduce(neededAfter(1))
	for i := 1; i < len(ops); i++ {
		keepRest := neededAfter(i + 1)
		next := ops[i].reduce(func(l int) bool { return keepRest(l) || slices.Contains(acc.labels, l) })
		acc = acc.reduce(func(l int) bool { return keepRest(l) || slices.Contains(next.labels, l) })
		acc = einsumContract(acc, next, keepRest, matmul)
	}
	acc = acc.reduce(func(l int) bool { return slices.Contains(spec.output, l) })
	extents := make([]int, len(spec.output))
	for i, l := range spec.output {
		extents[i] = acc.size(l)
	}
	return acc.gather(spec.output, extents), extents
}

// einsumKernel is Einsum.
func einsumKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(in) == 0 {
		return nil, n.Errorf("needs at least one input")
	}
	if err := kern.Need(n, in, len(in)); err != nil {
		return nil, err
	}
	eq := n.AttrString("equation", "")
	if eq == "" {
		return nil, n.Errorf("attribute equation is required")
	}
	shapes := make([][]int, len(in))
	for i, t := range in {
		if t.DType != in[0].DType {
			return nil, n.Errorf("input %d is %v, input 0 is %v", i, t.DType, in[0].DType)
		}
		shapes[i] = t.Shape
	}
	spec, err := parseEinsum(n, eq, shapes)
	if err != nil {
		return nil, err
	}
	var out *graph.Tensor
	switch in[0].DType {
	case graph.Float32:
		out = einsumTyped(spec, in, shapes, einsumBatchedF32)
	case graph.Float64:
		out = einsumTyped(spec, in, shapes, einsumBatchedGeneric[float64])
	case graph.Int32:
		out = einsumTyped(spec, in, shapes, einsumBatchedGeneric[int32])
	case graph.Int64:
		out = einsumTyped(spec, in, shapes, einsumBatchedGeneric[int64])
	case graph.Uint32:
		out = einsumTyped(spec, in, shapes, einsumBatchedGeneric[uint32])
	case graph.Uint64:
		out = einsumTyped(spec, in, shapes, einsumBatchedGeneric[uint64])
	default:
		return nil, n.Errorf("dtype %v is not supported", in[0].DType)
	}
	return []*graph.Tensor{out}, nil
}

func einsumTyped[T numeric](spec *einsumSpec, in []*graph.Tensor, shapes [][]int, matmul func(batch, m, n, k int, a, b, c []T)) *graph.Tensor {
	data := make([][]T, len(in))
	for i, t := range in {
		data[i] = t.Data.([]T)
	}
	out, shape := einsumRun(spec, data, shapes, matmul)
	return &graph.Tensor{DType: in[0].DType, Shape: shape, Data: out}
}
