package graph

// ClipGradNormShardedOp is ClipGradNorm (optimizer_ops.go) for tensors
// sharded across the processes of a data-parallel group (ZeRO,
// train/zero.go): each process holds slices of some whole tensors, and the
// norm is that of the whole tensors. Its layout (operands, outputs,
// in-place pairs) is ClipGradNorm's.
//
//	ClipGradNormSharded  inputs  max_norm (float32 scalar), G_1..G_k (this process's slices)
//	                     outputs total_norm (float32 scalar, before clipping), G'_1..G'_k
//	                     attrs   tensors (k), whole (n: the number of whole tensors),
//	                             slice_of (k ints in [0, n), ascending: the whole tensor of each slice)
//
// Each process sums x*x over each of its slices in float64, from the
// slice's first element, and adds the sums of the slices of one whole
// tensor in operand order, starting from 0 (s_j, 0 for a tensor it holds
// no slice of). S_j is the sum of every process's s_j in rank order,
// starting from 0. The total norm is float32(sqrt(Σ_j N_j²)) in float64
// over j in order, with N_j = float32(sqrt(S_j)) (each whole tensor's
// norm rounded to float32, as torch.nn.utils.clip_grad_norm_'s is); the
// coefficient and the scaling of the slices are ClipGradNorm's. The
// processes exchange their n sums with the communicator's AllGather, each
// float64 as two float32 words of its bits (low word first; AllGather
// copies values, it does no arithmetic). Without a communicator (one
// process) S_j = s_j. Every process of the group must run the node.
const ClipGradNormShardedOp = "ClipGradNormSharded"

// ShardedClipLayout checks a ClipGradNormSharded node's attributes and
// returns the number of whole tensors and the whole tensor of each slice.
func ShardedClipLayout(n *Node) (whole int, sliceOf []int, err error) {
	k := int(n.AttrInt("tensors", -1))
	w := n.AttrInt("whole", -1)
	of := n.AttrInts("slice_of", nil)
	if w < 0 || len(of) != k {
		return 0, nil, n.Errorf("%s needs attributes whole (>= 0) and slice_of (%d ints), has whole=%d and %d ints", ClipGradNormShardedOp, k, w, len(of))
	}
	sliceOf = make([]int, k)
	for i, j := range of {
		if j < 0 || j >= w || (i > 0 && j < of[i-1]) {
			return 0, nil, n.Errorf("%s: slice_of[%d] = %d (want ascending whole-tensor indices in [0, %d))", ClipGradNormShardedOp, i, j, w)
		}
		sliceOf[i] = int(j)
	}
	return int(w), sliceOf, nil
}

// UnscaleGradsShardedOp is UnscaleGrads (optimizer_ops.go) for tensors
// sharded across the processes of a data-parallel group (ZeRO): every
// process multiplies its slices by inv_scale, and found_inf is true on
// every process when any process's slices held an inf or NaN before. Its
// layout is UnscaleGrads'.
//
//	UnscaleGradsSharded  inputs  inv_scale (float32 scalar), G_1..G_k (this process's slices)
//	                     outputs found_inf (bool scalar, over every process), G'_i = G_i*inv_scale
//	                     attrs   tensors (k)
//
// The processes add their flags (1 or 0, float32) with the communicator's
// AllReduceSum; without a communicator the flag is this process's. Every
// process of the group must run the node.
const UnscaleGradsShardedOp = "UnscaleGradsSharded"
