package graph

import "fmt"

// The optimizer-step ops of onnxtrain's own domain (InternalDomain). They
// update many tensors in one node, so that a backend can run a whole
// optimizer step as one pass over every parameter. Each is functional in
// the graph (its outputs are the new values of some of its inputs); a
// backend may write an output into the input it replaces when that input is
// a state buffer the output updates and no later node reads it, or a value
// of the run nothing else reads (UpdatedInput names the pairs). A training
// program may hold one update node per parameter (tensors=1), placed after
// the parameter's last reader in backward (train.Program.BindUpdate). The arithmetic is PyTorch 1.13's
// single-tensor code paths, float32 element by element; the scalars that
// PyTorch computes in Python floats (learning rates, bias corrections)
// arrive already rounded to float32 in the "hyper" inputs, computed by the
// caller in float64.
//
// With n the attribute "tensors" (the number of tensors updated):
//
//	SGDUpdate      inputs  consts[2] = (momentum, 1-dampening), hyper[n,3] = (-lr, weight_decay, first),
//	                       X_1..X_n, G_1..G_n, and with attribute momentum=1 B_1..B_n
//	               outputs X'_1..X'_n, and with momentum B'_1..B'_n
//	               attrs   tensors, momentum, nesterov, maximize
//	               per element: d = ±g; d = fma(wd, x, d) if wd != 0; b = first ? d : fma(1-damp, d, b*m);
//	               d = nesterov ? fma(m, b, d) : b; x = fma(-lr, d, x)
//	AdamUpdate     inputs  consts[5] = (β1, β2, 1-β1, 1-β2, eps), hyper[n,5] = (-lr/bc1, sqrt(bc2), wd, 1-lr*wd, l2),
//	                       X_1..X_n, G_1..G_n, M_1..M_n, V_1..V_n, and with amsgrad=1 MX_1..MX_n
//	               outputs X', M', V' (and MX') for each tensor, grouped by kind as the inputs
//	               attrs   tensors, amsgrad, maximize, decoupled (AdamW)
//	(both)         with attribute gated=1 a third scalar input, skip (bool), follows hyper: when it
//	               is true every output is its input unchanged (fp16's skipped step, the found-inf
//	               flag of UnscaleGrads in the same program)
//	ClipGradNorm   inputs  max_norm (float32 scalar), G_1..G_n
//	               outputs total_norm (float32 scalar, before clipping), G'_1..G'_n
//	               (torch.nn.utils.clip_grad_norm_: the norm of the per-tensor float32 norms;
//	               coefficient (1/(total+1e-6))*max_norm applied when below 1)
//	ClipGradValue  inputs  clip (float32 scalar), G_1..G_n; outputs G'_1..G'_n (clamp to [-clip, clip], NaN kept)
//	UnscaleGrads   inputs  inv_scale (float32 scalar), G_1..G_n
//	               outputs found_inf (bool scalar: any element inf or NaN before scaling), G'_i = G_i*inv_scale
//	AccumulateGrad inputs  fresh (bool scalar), S_1..S_n, G_1..G_n
//	               outputs S'_i = fresh ? G_i : S_i + G_i
//	SGDUpdateGathered  SGDUpdate of one tensor (tensors=1) whose gradient is GatherGrad(dY, X,
//	               indices) along axis 0 (an embedding table's), made by FuseUpdateGathered:
//	               inputs consts, hyper (and skip when gated), indices, X, dY (and B with momentum);
//	               outputs and attributes SGDUpdate's. Every element of X and B is updated as
//	               SGDUpdate updates it with G = GatherGrad(dY, X, indices) (G's rows summed in
//	               index order from +0, rows no index names +0), bit for bit, without G being
//	               written and read back (the GPT's token table: 154 MB each way a step).
//	               With attribute norm=1 it is also the per-tensor ClipGradNorm before the
//	               update: max_norm follows skip (before the indices) and the norm is output 0,
//	               the gradient scaled as ClipGradNorm scales it
//	AdamUpdateGathered  the same for AdamUpdate: inputs consts, hyper (and skip when gated),
//	               (max_norm with norm=1,) indices, X, dY, M, V (and MX with amsgrad); outputs
//	               (the norm with norm=1 and) AdamUpdate's; attributes AdamUpdate's and norm
//	SGDUpdateProduct  SGDUpdate of one matrix X whose gradient is MatMulGradB(dY, A, X) = Aᵀ·dY
//	               over every row of the batch (A [..., m, k], dY [..., m, n], X [k, n]: a linear
//	               layer's weight, the GPT's 50257-wide head), made by FuseUpdateProduct: inputs
//	               consts, hyper (and skip when gated), (max_norm with norm=1,) A, X, dY (and B with
//	               momentum); outputs and attributes SGDUpdateGathered's. The gradient is made a
//	               block of X's rows at a time, each row as the product makes it, and those rows
//	               of X and B are updated before the next block: the same bits as MatMulGradB then
//	               SGDUpdate without the X-sized gradient held (the GPT's head: 147 MiB at the
//	               step's peak). With norm=1 the per-tensor ClipGradNorm's norm is output 0 (its
//	               sum of squares in element order, block after block); a finite max_norm needs the
//	               whole gradient before any update, which the kernel then holds
//	AdamUpdateProduct  the same for AdamUpdate: inputs consts, hyper (and skip when gated),
//	               (max_norm with norm=1,) A, X, dY, M, V (and MX with amsgrad)
const (
	SGDUpdateOp      = "SGDUpdate"
	AdamUpdateOp     = "AdamUpdate"
	ClipGradNormOp   = "ClipGradNorm"
	ClipGradValueOp  = "ClipGradValue"
	UnscaleGradsOp   = "UnscaleGrads"
	AccumulateGradOp = "AccumulateGrad"

	SGDUpdateGatheredOp  = "SGDUpdateGathered"
	AdamUpdateGatheredOp = "AdamUpdateGathered"

	SGDUpdateProductOp  = "SGDUpdateProduct"
	AdamUpdateProductOp = "AdamUpdateProduct"
)

// OptimizerOps lists the optimizer-step ops.
var OptimizerOps = []string{SGDUpdateOp, AdamUpdateOp, ClipGradNormOp, ClipGradValueOp, UnscaleGradsOp, AccumulateGradOp,
	ClipGradNormShardedOp, UnscaleGradsShardedOp, // zero_ops.go
	SGDUpdateGatheredOp, AdamUpdateGatheredOp, // fuse_update_gathered.go
	SGDUpdateProductOp, AdamUpdateProductOp} // fuse_update_product.go

// IsParamUpdate reports whether n updates parameters: SGDUpdate,
// AdamUpdate, or one of their gathered or product forms.
func IsParamUpdate(n *Node) bool {
	return n.Domain == InternalDomain && (n.OpType == SGDUpdateOp || n.OpType == AdamUpdateOp) || IsGatheredUpdate(n) || IsProductUpdate(n)
}

// IsProductUpdate reports whether n is SGDUpdateProduct or
// AdamUpdateProduct (a weight's update from the product that makes its
// gradient, FuseUpdateProduct).
func IsProductUpdate(n *Node) bool {
	return n.Domain == InternalDomain && (n.OpType == SGDUpdateProductOp || n.OpType == AdamUpdateProductOp)
}

// IsGatheredUpdate reports whether n is SGDUpdateGathered or
// AdamUpdateGathered (an embedding table's update from the gathered rows
// of its gradient, FuseUpdateGathered).
func IsGatheredUpdate(n *Node) bool {
	return n.Domain == InternalDomain && (n.OpType == SGDUpdateGatheredOp || n.OpType == AdamUpdateGatheredOp)
}

// IsOptimizerOp reports whether n is one of the optimizer-step ops.
func IsOptimizerOp(n *Node) bool {
	if n.Domain != InternalDomain {
		return false
	}
	for _, op := range OptimizerOps {
		if n.OpType == op {
			return true
		}
	}
	return false
}

// UpdatedInput returns, for each output of an optimizer-step or collective
// op (collective_ops.go), the index
// of the input whose new value it is (-1 for an output that replaces no
// input, such as ClipGradNorm's total norm), or nil for other ops or a
// malformed node.
func UpdatedInput(n *Node) []int {
	if IsCollectiveOp(n) { // collective_ops.go
		upd, err := collectiveLayout(n)
		if err != nil {
			return nil
		}
		return upd
	}
	if !IsOptimizerOp(n) {
		return nil
	}
	lay, err := optimizerLayout(n)
	if err != nil {
		return nil
	}
	return lay.updated
}

// optimizerOpLayout says where an optimizer op's operand groups start.
type optimizerOpLayout struct {
	tensors int
	// updated[j] is the input output j replaces (-1: none).
	updated []int
}

// UpdateOperands says, from an optimizer op's type and attributes alone,
// where its operand groups start (the input index of its first tensor's
// first operand: X for the updates, after the scalar inputs) and how many
// groups it has; ok is false for other ops.
func UpdateOperands(n *Node) (first, groups int, ok bool) {
	lead, groups, _, _, err := optimizerShape(n)
	return lead, groups, err == nil
}

// optimizerShape is an optimizer op's scalar inputs (lead), operand
// groups, leading outputs that replace no input, and the groups its
// outputs update, in order.
func optimizerShape(n *Node) (lead, groups, outLead int, updGroups []int, err error) {
	switch n.OpType {
	case SGDUpdateOp, SGDUpdateGatheredOp, SGDUpdateProductOp:
		lead, groups = 2+int(n.AttrInt("gated", 0)&1), 2
		updGroups = []int{0}
		if n.AttrInt("momentum", 0) == 1 {
			groups = 3
			updGroups = []int{0, 2}
		}
	case AdamUpdateOp, AdamUpdateGatheredOp, AdamUpdateProductOp:
		lead, groups = 2+int(n.AttrInt("gated", 0)&1), 4
		updGroups = []int{0, 2, 3}
		if n.AttrInt("amsgrad", 0) == 1 {
			groups = 5
			updGroups = []int{0, 2, 3, 4}
		}
	case ClipGradNormOp, UnscaleGradsOp, ClipGradNormShardedOp, UnscaleGradsShardedOp:
		lead, groups, outLead = 1, 1, 1
		updGroups = []int{0}
	case ClipGradValueOp:
		lead, groups = 1, 1
		updGroups = []int{0}
	case AccumulateGradOp:
		lead, groups = 1, 2
		updGroups = []int{0}
	default:
		return 0, 0, 0, nil, fmt.Errorf("not an optimizer op")
	}
	if IsGatheredUpdate(n) || IsProductUpdate(n) {
		// The indices (the product's A) follow the scalar inputs (G's
		// place holds dY); with norm=1 max_norm comes before them and the
		// norm is output 0.
		lead++
		if n.AttrInt("norm", 0) == 1 {
			lead, outLead = lead+1, 1
		}
	}
	return lead, groups, outLead, updGroups, nil
}

func optimizerLayout(n *Node) (optimizerOpLayout, error) {
	lay := optimizerOpLayout{}
	ins := len(n.Inputs)
	lead, groups, outLead, updGroups, err := optimizerShape(n)
	if err != nil {
		return lay, err
	}
	gathered := IsGatheredUpdate(n) || IsProductUpdate(n)
	if (ins-lead)%groups != 0 || ins <= lead {
		return lay, n.Errorf("%d inputs do not make %d scalar inputs and %d groups of operands", ins, lead, groups)
	}
	k := (ins - lead) / groups
	if t := n.AttrInt("tensors", int64(k)); int(t) != k {
		return lay, n.Errorf("attribute tensors=%d but the inputs hold %d tensors per operand group", t, k)
	}
	if gathered && k != 1 {
		return lay, n.Errorf("updates %d tensors, want 1", k)
	}
	lay.tensors = k
	for range outLead {
		lay.updated = append(lay.updated, -1)
	}
	for _, gi := range updGroups {
		for i := range k {
			lay.updated = append(lay.updated, lead+gi*k+i)
		}
	}
	if len(n.Outputs) != len(lay.updated) {
		return lay, n.Errorf("%d outputs, want %d", len(n.Outputs), len(lay.updated))
	}
	return lay, nil
}

func init() {
	for _, op := range OptimizerOps {
		internalInferRules[op] = inferOptimizerOp
	}
}

// inferOptimizerOp types each output as the input it replaces; the
// leading scalar outputs are float32 (the norm) or bool (found_inf).
func inferOptimizerOp(c *inferCall) error {
	lay, err := optimizerLayout(c.n)
	if err != nil {
		return err
	}
	for j, in := range lay.updated {
		if in < 0 {
			dt := Float32
			if c.n.OpType == UnscaleGradsOp || c.n.OpType == UnscaleGradsShardedOp {
				dt = Bool
			}
			c.setOut(j, dt, nil)
			continue
		}
		t := c.typ(in)
		if t == nil {
			continue
		}
		s, ok := c.shape(in)
		c.setShapeOrUnranked(j, t.DType, s, ok)
	}
	return nil
}
