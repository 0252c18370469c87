package graph

import (
	"slices"
	"strings"
)

// Einsum lowers to Transpose, Reshape, Gather (diagonals), ReduceSum and
// MatMul, with the CPU kernel's semantics (backend/cpu/ops/linalg/einsum.go):
// labels are letters, an ellipsis stands for right-aligned dims shared by
// every operand that has it, a label of extent 1 broadcasts against a larger
// one, and the implicit output is the ellipsis dims then the letters used
// once, sorted. Operands need static shapes.
//
// Each operand first takes the diagonal of every repeated label and sums
// out the labels no other operand and not the output uses; then the
// operands fold left to right, two at a time, into one batched MatMul:
// labels both share and still need become batch dims, labels both share
// and nothing later needs are contracted, the others are the rows and the
// columns. A final transpose puts the labels in output order.

func init() {
	registerTyped("Einsum", lowerEinsum)
}

// einsumEllipsis is the first label of the dims an ellipsis stands for.
const einsumEllipsis = 1 << 10

// einsumValue is a value with one label per dim.
type einsumValue struct {
	name   string
	labels []int
	shape  []int64
}

func lowerEinsum(l *lowering) error {
	eq := strings.ReplaceAll(l.n.AttrString("equation", ""), " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(l.n.Inputs) || len(terms) == 0 {
		return l.unsupported("equation %q has %d terms for %d inputs", eq, len(terms), len(l.n.Inputs))
	}
	tokens := func(term string) ([]int, bool) {
		var out []int
		ellipsis := false
		for i := 0; i < len(term); i++ {
			ch := term[i]
			switch {
			case ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z':
				out = append(out, int(ch))
			case strings.HasPrefix(term[i:], "...") && !ellipsis:
				ellipsis = true
				out = append(out, -1)
				i += 2
			default:
				return nil, false
			}
		}
		return out, true
	}
	ops := make([]*einsumValue, len(terms))
	toks := make([][]int, len(terms))
	ellRank := make([]int, len(terms))
	maxEll := 0
	for i, term := range terms {
		s, ok := l.staticShape(l.in(i))
		if !ok {
			return l.unsupported("Einsum needs static operand shapes")
		}
		t, ok := tokens(term)
		if !ok {
			return l.unsupported("term %q", term)
		}
		letters := len(t)
		if slices.Contains(t, -1) {
			letters--
			ellRank[i] = len(s) - letters
		}
		if ellRank[i] < 0 || (!slices.Contains(t, -1) && letters != len(s)) {
			return l.unsupported("term %q does not match input %d of rank %d", term, i, len(s))
		}
		toks[i] = t
		maxEll = max(maxEll, ellRank[i])
		ops[i] = &einsumValue{name: l.in(i), shape: s}
	}
	counts := map[int]int{}
	for i, t := range toks {
		for _, lb := range t {
			if lb == -1 {
				for e := maxEll - ellRank[i]; e < maxEll; e++ {
					ops[i].labels = append(ops[i].labels, einsumEllipsis+e)
				}
				continue
			}
			ops[i].labels = append(ops[i].labels, lb)
			counts[lb]++
		}
	}
	var output []int
	if explicit {
		t, ok := tokens(rhs)
		if !ok {
			return l.unsupported("output term %q", rhs)
		}
		for _, lb := range t {
			if lb == -1 {
				for e := 0; e < maxEll; e++ {
					output = append(output, einsumEllipsis+e)
				}
				continue
			}
			if counts[lb] == 0 || slices.Contains(output, lb) {
				return l.unsupported("output label %q", string(rune(lb)))
			}
			output = append(output, lb)
		}
	} else {
		for e := 0; e < maxEll; e++ {
			output = append(output, einsumEllipsis+e)
		}
		var once []int
		for lb, c := range counts {
			if c == 1 {
				once = append(once, lb)
			}
		}
		slices.Sort(once)
		output = append(output, once...)
	}
	// needed(i) lists the labels used after operand i is folded in.
	needed := func(i int) map[int]bool {
		m := map[int]bool{}
		for _, lb := range output {
			m[lb] = true
		}
		for _, op := range ops[i+1:] {
			for _, lb := range op.labels {
				m[lb] = true
			}
		}
		return m
	}
	for i, op := range ops {
		var err error
		if op, err = l.einsumDiagonals(op); err != nil {
			return err
		}
		if i == 0 {
			// Sum out what only the first operand has (einsumPair does
			// it for the others as they fold in).
			op = l.einsumSumOut(op, needed(0))
		}
		ops[i] = op
	}
	acc := ops[0]
	for i := 1; i < len(ops); i++ {
		var err error
		if acc, err = l.einsumPair(acc, ops[i], needed(i)); err != nil {
			return err
		}
	}
	// The labels in output order.
	perm := make([]int64, len(output))
	for k, lb := range output {
		j := slices.Index(acc.labels, lb)
		if j < 0 {
			return l.unsupported("output label %d is missing", lb)
		}
		perm[k] = int64(j)
	}
	res := acc.name
	if !slices.IsSorted(perm) {
		res = l.opAttrs("Transpose", []string{res}, IntsAttr("perm", perm...))
	} else if res == l.in(0) {
		res = l.op("Identity", res)
	}
	l.finish(0, res)
	return nil
}

// einsumDiagonals takes the diagonal of each label v repeats.
func (l *lowering) einsumDiagonals(v *einsumValue) (*einsumValue, error) {
	for {
		p, q := -1, -1
		for i := 0; i < len(v.labels) && p < 0; i++ {
			for j := i + 1; j < len(v.labels); j++ {
				if v.labels[i] == v.labels[j] {
					p, q = i, j
					break
				}
			}
		}
		if p < 0 {
			return v, nil
		}
		n := v.shape[p]
		if v.shape[q] != n {
			return nil, l.unsupported("repeated label with extents %d and %d", n, v.shape[q])
		}
		var perm []int64
		var labels []int
		var shape []int64
		for i := range v.labels {
			if i != p && i != q {
				perm = append(perm, int64(i))
				labels = append(labels, v.labels[i])
				shape = append(shape, v.shape[i])
			}
		}
		perm = append(perm, int64(p), int64(q))
		t := l.opAttrs("Transpose", []string{v.name}, IntsAttr("perm", perm...))
		t = l.reshape(t, append(append([]int64{}, shape...), n*n)...)
		idx := make([]int64, n)
		for k := range idx {
			idx[k] = int64(k) * (n + 1)
		}
		t = l.opAttrs("Gather", []string{t, l.int64s(idx...)}, IntAttr("axis", int64(len(shape))))
		v = &einsumValue{name: t, labels: append(labels, v.labels[p]), shape: append(shape, n)}
	}
}

// einsumSumOut sums over the labels of v that neither keep nor any of
// others has.
func (l *lowering) einsumSumOut(v *einsumValue, keep map[int]bool, others ...*einsumValue) *einsumValue {
	var axes []int64
	var labels []int
	var shape []int64
	for i, lb := range v.labels {
		used := keep[lb]
		for _, o := range others {
			used = used || slices.Contains(o.labels, lb)
		}
		if used {
			labels = append(labels, lb)
			shape = append(shape, v.shape[i])
		} else {
			axes = append(axes, int64(i))
		}
	}
	if len(axes) == 0 {
		return v
	}
	s, _ := l.reduce("ReduceSum", v.name, reduceAxes{list: axes}, false)
	return &einsumValue{name: s, labels: labels, shape: shape}
}

// einsumPair multiplies a and b into one value over the labels keep needs
// (contracting the labels both have that keep does not).
func (l *lowering) einsumPair(a, b *einsumValue, keep map[int]bool) (*einsumValue, error) {
	a = l.einsumSumOut(a, keep, b)
	b = l.einsumSumOut(b, keep, a)
	var batch, contracted, rows, cols []int
	for _, lb := range a.labels {
		switch {
		case !slices.Contains(b.labels, lb):
			rows = append(rows, lb)
		case keep[lb]:
			batch = append(batch, lb)
		default:
			contracted = append(contracted, lb)
		}
	}
	for _, lb := range b.labels {
		if !slices.Contains(a.labels, lb) {
			cols = append(cols, lb)
		}
	}
	size := func(v *einsumValue, lb int) int64 { return v.shape[slices.Index(v.labels, lb)] }
	// A contracted label of extent 1 on one side and n on the other: the
	// n side sums over it first.
	for _, lb := range contracted {
		sa, sb := size(a, lb), size(b, lb)
		switch {
		case sa == sb:
		case sa == 1:
			b = l.einsumSumLabel(b, lb)
		case sb == 1:
			a = l.einsumSumLabel(a, lb)
		default:
			return nil, l.unsupported("label %d has extents %d and %d", lb, sa, sb)
		}
	}
	for _, lb := range batch {
		if sa, sb := size(a, lb), size(b, lb); sa != sb && sa != 1 && sb != 1 {
			return nil, l.unsupported("label %d has extents %d and %d", lb, sa, sb)
		}
	}
	prod := func(v *einsumValue, ls []int) int64 {
		p := int64(1)
		for _, lb := range ls {
			p *= size(v, lb)
		}
		return p
	}
	arrange := func(v *einsumValue, order []int, tail ...int64) string {
		perm := make([]int64, len(order))
		for k, lb := range order {
			perm[k] = int64(slices.Index(v.labels, lb))
		}
		t := v.name
		if !slices.IsSorted(perm) {
			t = l.opAttrs("Transpose", []string{t}, IntsAttr("perm", perm...))
		}
		var shape []int64
		for _, lb := range batch {
			shape = append(shape, size(v, lb))
		}
		return l.reshape(t, append(shape, tail...)...)
	}
	am := arrange(a, concatInts(batch, rows, contracted), prod(a, rows), prod(a, contracted))
	bm := arrange(b, concatInts(batch, contracted, cols), prod(b, contracted), prod(b, cols))
	c := l.op("MatMul", am, bm)
	out := &einsumValue{labels: concatInts(batch, rows, cols)}
	for _, lb := range batch {
		out.shape = append(out.shape, max(size(a, lb), size(b, lb)))
	}
	for _, lb := range rows {
		out.shape = append(out.shape, size(a, lb))
	}
	for _, lb := range cols {
		out.shape = append(out.shape, size(b, lb))
	}
	out.name = l.reshape(c, out.shape...)
	return out, nil
}

// einsumSumLabel sums v over label lb, keeping it with extent 1.
func (l *lowering) einsumSumLabel(v *einsumValue, lb int) *einsumValue {
	j := slices.Index(v.labels, lb)
	s, _ := l.reduce("ReduceSum", v.name, reduceAxes{list: []int64{int64(j)}}, true)
	shape := append([]int64{}, v.shape...)
	shape[j] = 1
	return &einsumValue{name: s, labels: v.labels, shape: shape}
}

func concatInts(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
