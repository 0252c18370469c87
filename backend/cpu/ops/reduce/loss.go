package reduce

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("NegativeLogLikelihoodLoss", nllLoss)
	kern.Register("SoftmaxCrossEntropyLoss", softmaxCrossEntropyLoss)
}

// lossOptions are the attributes the two losses share.
type lossOptions struct {
	reduction   string
	hasIgnore   bool
	ignoreIndex int64
}

func readLossOptions(n *graph.Node) (lossOptions, error) {
	o := lossOptions{
		reduction:   n.AttrString("reduction", "mean"),
		hasIgnore:   n.HasAttr("ignore_index"),
		ignoreIndex: n.AttrInt("ignore_index", 0),
	}
	switch o.reduction {
	case "none", "sum", "mean":
		return o, nil
	}
	return o, n.Errorf("reduction %q is not one of none, sum, mean", o.reduction)
}

// nllLoss is NegativeLogLikelihoodLoss: input (N, C, d1, ...) holds
// log-probabilities, target (N, d1, ...) class indices, the optional weight
// (C) per-class weights. loss = -input[n, target, d...] · weight[target],
// zero (with zero weight) where target equals ignore_index. reduction
// "none" returns the per-element losses, "sum" their sum, "mean" (the
// default) their sum divided by the sum of the weights used.
func nllLoss(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	opts, err := readLossOptions(n)
	if err != nil {
		return nil, err
	}
	loss, err := nll(n, in[0], in[1], kern.Opt(in, 2), opts, nil)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, loss), nil
}

// softmaxCrossEntropyLoss is SoftmaxCrossEntropyLoss: the
// NegativeLogLikelihoodLoss of LogSoftmax(scores) along axis 1, with the
// same target, weights, ignore_index and reduction. The optional second
// output is the log-probabilities.
func softmaxCrossEntropyLoss(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	opts, err := readLossOptions(n)
	if err != nil {
		return nil, err
	}
	x := in[0]
	if x.Rank() < 2 {
		return nil, n.Errorf("scores must have rank 2 or more (N, C, ...), has shape %v", x.Shape)
	}
	if xs, ok := x.Data.([]float32); ok && x.Rank() == 2 && (len(n.Outputs) < 2 || n.Outputs[1] == "") {
		// No log_prob output is read: the loss needs one log-sum-exp per
		// row, not the log-probabilities of every class (at a language
		// model's vocabulary, a tensor as large as the logits).
		st := kern.State[sceLSETask](n)
		if cap(st.lse) < x.Shape[0] {
			st.lse = make([]float64, x.Shape[0])
		}
		st.x, st.c = xs, x.Shape[1]
		lse := st.lse[:x.Shape[0]]
		runRows(x.Shape[0], x.Shape[1], st)
		st.x = nil
		loss, err := nll(n, x, in[1], kern.Opt(in, 2), opts, lse)
		if err != nil {
			return nil, err
		}
		return kern.Results(n, loss), nil
	}
	logProb, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	b := blocks{outer: x.Shape[0], r: x.Shape[1], inner: product(x.Shape[2:])}
	switch xs := x.Data.(type) {
	case []float32:
		softmaxBlocksWith(kern.State[softmaxTask[float32]](n), kindLogSoftmax, xs, logProb.Data.([]float32), b, 0)
	case []float64:
		softmaxBlocksWith(kern.State[softmaxTask[float64]](n), kindLogSoftmax, xs, logProb.Data.([]float64), b, 0)
	default:
		return nil, n.Errorf("dtype %v is not supported (want a float type)", x.DType)
	}
	loss, err := nll(n, logProb, in[1], kern.Opt(in, 2), opts, nil)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, loss, logProb), nil
}

// sceLSETask computes the log-sum-exp of each row of float32 scores
// [N, C]: the largest element (AVX2), then the sum of e^(x-m) without
// writing the terms (vmath.SumExpShift32: float32 lanes over blocks of
// 512, float64 across them; 1.7x cheaper per element than ExpShift32's
// exact difference, stores and per-element widening, which made the loss
// over a 50257-word vocabulary compute-bound), so no log-probability
// tensor is made. Kept in the node's state.
type sceLSETask struct {
	x   []float32
	c   int
	lse []float64
}

func (t *sceLSETask) Chunk(lo, hi int) {
	var m float32
	haveM := false // m is row k's maximum, taken in row k-1's loop
	for k := lo; k < hi; k++ {
		row := t.x[k*t.c : (k+1)*t.c]
		if len(row) == 0 {
			t.lse[k] = math.Inf(-1)
			continue
		}
		if !haveM {
			m = maxRow32(row)
		}
		haveM = false
		var next []float32
		if k+1 < hi {
			next = t.x[(k+1)*t.c : (k+2)*t.c]
		}
		if useAVX2 && !use512 && next != nil {
			// With AVX2 the sum's loop also reads row k+1 from
			// memory (with a prefetch further on) and takes its
			// maximum: the memory read of one row overlaps the
			// exponentials of the one before, and no row but the
			// first needs a pass of its own for its maximum.
			if s, mNext, ok := vmath.SumExpShiftMax32(row, m, next); ok {
				t.lse[k] = float64(m) + math.Log(s)
				m, haveM = mNext, true
				continue
			}
		}
		// Else the sum's loop prefetches row k+1 into L2 as it goes,
		// so that its maximum (the pass that reads memory) finds it
		// there.
		t.lse[k] = float64(m) + math.Log(vmath.SumExpShiftAhead32(row, m, next))
	}
}

// nll computes the negative log-likelihood loss of log-probabilities x
// (N, C, d...) against target (N, d...). With lse, x holds scores [N, C]
// instead and the log-probability of class t in row k is x[k, t] - lse[k].
func nll(n *graph.Node, x, target, weight *graph.Tensor, opts lossOptions, lse []float64) (*graph.Tensor, error) {
	if x.Rank() < 2 {
		return nil, n.Errorf("input must have rank 2 or more (N, C, ...), has shape %v", x.Shape)
	}
	batch, c := x.Shape[0], x.Shape[1]
	// The target's shape and the losses live in the node's state between
	// runs.
	st := kern.State[nllState](n)
	want := append(append(st.want[:0], batch), x.Shape[2:]...)
	st.want = want
	if !graph.SameShape(target.Shape, want) {
		return nil, n.Errorf("target has shape %v, want %v for input of shape %v", target.Shape, want, x.Shape)
	}
	if !target.DType.IsInt() {
		return nil, n.Errorf("target has dtype %v, want int32 or int64", target.DType)
	}
	var w []float64
	if weight != nil {
		if weight.Size() != c || weight.Rank() != 1 {
			return nil, n.Errorf("weight has shape %v, want [%d]", weight.Shape, c)
		}
		w = float64s(weight)
	}
	labels := int64s(target)
	inner := product(x.Shape[2:])
	if cap(st.losses) < len(labels) {
		st.losses = make([]float64, len(labels))
	}
	losses := st.losses[:len(labels)]
	clear(losses)
	var weightSum float64
	var bad int
	switch xs := x.Data.(type) {
	case []float32:
		weightSum, bad = nllGather(xs, labels, w, losses, c, inner, opts, lse)
	case []float64:
		weightSum, bad = nllGather(xs, labels, w, losses, c, inner, opts, lse)
	default:
		return nil, n.Errorf("dtype %v is not supported (want a float type)", x.DType)
	}
	if bad >= 0 {
		return nil, n.Errorf("target %d at element %d is out of range [0, %d)", labels[bad], bad, c)
	}
	if opts.reduction == "none" {
		return floatTensor(n, x.DType, want, losses)
	}
	var sum float64
	for _, l := range losses {
		sum += l
	}
	if opts.reduction == "mean" {
		sum /= weightSum
	}
	return floatTensor(n, x.DType, nil, []float64{sum})
}

// nllState is what a loss node keeps between runs.
type nllState struct {
	want   []int
	losses []float64
}

// nllGather sets losses[k] = -x[n, t, j]·w[t] for every target t =
// labels[k] (k = n·inner + j) and returns the sum of the weights used. An
// ignored target gets loss and weight 0. bad is the index of the first
// target out of [0, c), or -1. With lse (inner 1), x holds scores and the
// log-probability is x[k, t] - lse[k].
func nllGather[F float](x []F, labels []int64, w, losses []float64, c, inner int, opts lossOptions, lse []float64) (weightSum float64, bad int) {
	for k, t := range labels {
		if opts.hasIgnore && t == opts.ignoreIndex {
			continue
		}
		if t < 0 || t >= int64(c) {
			return 0, k
		}
		wt := 1.0
		if w != nil {
			wt = w[t]
		}
		s, j := k/inner, k%inner
		lp := float64(x[(s*c+int(t))*inner+j])
		if lse != nil {
			lp -= lse[k]
		}
		losses[k] = -lp * wt
		weightSum += wt
	}
	return weightSum, -1
}

// int64s returns an integer tensor's elements as int64 (its own data when
// it is int64 already; do not modify).
func int64s(t *graph.Tensor) []int64 {
	switch s := t.Data.(type) {
	case []int64:
		return s
	case []int32:
		out := make([]int64, len(s))
		for i, v := range s {
			out[i] = int64(v)
		}
		return out
	}
	out := make([]int64, t.Size())
	for i := range out {
		out[i] = t.Int(i)
	}
	return out
}
