package passes

import (
	"github.com/onnxtrain/onnxtrain/graph"
)

// Names of the standard compile-time passes.
const (
	InlineFunctions    = "inline-functions"
	TopoSort           = "topo-sort"
	ExpandGradientOps  = "expand-gradient-ops"
	Lower              = "lower"
	FoldConstants      = "fold-constants"
	FuseAttention      = "fuse-attention-views"
	FuseWeight         = "fuse-weight-transpose"
	FuseTransposed     = "fuse-transposed-matmul"
	FuseReluGrad       = "fuse-relu-grad"
	FuseErfGrad        = "fuse-erf-grad"
	FuseGeluErf        = "fuse-gelu-erf"
	FuseGemmRelu       = "fuse-gemm-relu"
	FuseBatchNormRelu  = "fuse-batchnorm-relu"
	PruneFused         = "prune-fused"
	Specialize         = "specialize"
	DropIdentityArith  = "drop-identity-arithmetic"
	FuseMatMulBias     = "fuse-matmul-bias"
	FuseGeluErfGrad    = "fuse-gelu-erf-grad"
	FuseSliceGrad      = "fuse-slice-grad-concat"
	PruneDropoutMasks  = "prune-dropout-masks"
	DropSameShapeSum   = "drop-same-shape-sum-to-shape"
	FusePermutedTrans  = "fuse-permuted-matmul-transpose"
	FuseAttnSoftmax    = "fuse-attention-softmax"
	FuseAttnGradConcat = "fuse-attention-grad-concat"
	FuseAttnPackedQKV  = "fuse-attention-packed-qkv"
	RecomputeGeluGrad  = "recompute-gelu-grad"
	RecomputeGeluOut   = "recompute-gelu-output"
	FuseMatMulGelu     = "fuse-matmul-gelu"
	FuseMatMulGeluGrad = "fuse-matmul-gelu-grad"
	FuseLNGradAdd      = "fuse-layernorm-grad-add"
	FusePermutedBias   = "fuse-permuted-matmul-bias"
	FuseResidual       = "fuse-matmul-add-residual"
	FuseBatchNormAdd   = "fuse-batchnorm-add-relu"
	FuseAddReluGrad    = "fuse-add-relu-grad"
	FuseBatchNormGrad  = "fuse-batchnorm-add-relu-grad"
	FuseMaxPoolArgmax  = "fuse-maxpool-argmax"
	LowerSpecialised   = "lower-specialised"
	MarkCausal         = "mark-causal-attention"
	FusePatchEmbed     = "fuse-patch-embedding"
	FoldExpandReluGrad = "fold-expand-into-relu-grad"
	FuseUpdateGathered = "fuse-update-gathered"
	FuseUpdateProduct  = "fuse-update-product"
	RecomputeAttnProbs = "recompute-attention-probs"
)

// fusions are the compile-time fusion passes, in the order they run.
var fusions = []string{FuseAttention, FuseWeight, FuseTransposed, FuseReluGrad, FuseErfGrad, FuseGeluErf, FuseGemmRelu, FuseBatchNormRelu}

// CompilePasses are the passes a backend runs on the graph it compiles,
// in their order: functions inlined, nodes sorted, Gradient ops expanded,
// ops without a kernel lowered to primitives, constants folded, then the
// fusions the backend declares, and the nodes only fused chains read
// removed.
func CompilePasses() []Pass {
	fused := func(name, doc string, fuses []string, after []string, before []string, run func(*graph.Graph) int) Pass {
		return Pass{Name: name, Doc: doc, Fuses: fuses, After: append([]string{FoldConstants}, after...),
			Before: append([]string{PruneFused}, before...),
			Run:    func(g *graph.Graph, _ *Env) (int, error) { return run(g), nil }}
	}
	return []Pass{
		{Name: InlineFunctions, Doc: "calls of model-local functions replaced by their bodies", Before: []string{TopoSort},
			Run: func(g *graph.Graph, env *Env) (int, error) {
				return 0, graph.InlineFunctions(g, env.Functions)
			}},
		{Name: TopoSort, Doc: "nodes sorted so that every value is made before it is read",
			Run: func(g *graph.Graph, _ *Env) (int, error) { return 0, graph.TopoSort(g) }},
		{Name: ExpandGradientOps, Doc: "ai.onnx.preview.training Gradient nodes replaced by autodiff's backward nodes",
			Requires: []string{TopoSort}, After: []string{InlineFunctions},
			Run: func(g *graph.Graph, env *Env) (int, error) { return 0, graph.ExpandGradientOps(g, env.Opset) }},
		{Name: Lower, Doc: "ops the backend has no kernel for (or, restricted, every op outside the primitive and extended sets) lowered to primitives",
			After: []string{ExpandGradientOps, InlineFunctions},
			Run:   runLower},
		{Name: FoldConstants, Doc: "nodes whose inputs are all constant computed once, and the nodes nothing reads removed (off without an evaluator: NoFold)",
			After: []string{Lower},
			Run: func(g *graph.Graph, env *Env) (int, error) {
				if env.Evaluate == nil {
					return 0, nil
				}
				n := graph.FoldConstants(g, env.Evaluate)
				graph.RemoveDeadNodes(g)
				return n, nil
			}},
		fused(FuseAttention, "attention's products read their permuted and gathered operands in place (PermutedMatMul, GatherGradSum)",
			[]string{graph.PermutedMatMul, graph.GatherGradSum}, nil, []string{FuseTransposed}, graph.FuseAttentionViews),
		fused(FuseWeight, "a Linear layer's weight read untransposed by its products and gradients (TransposedMatMul)",
			[]string{graph.TransposedMatMul}, nil, nil, graph.FuseWeightTranspose),
		fused(FuseTransposed, "transposes that only feed matrix products become transposed GEMM operands (TransposedMatMul)",
			[]string{graph.TransposedMatMul}, nil, nil, graph.FuseTransposedMatMul),
		fused(FuseReluGrad, "Relu's gradient Where(Greater(X, 0), dY, 0) in one pass (ReluGrad)",
			[]string{graph.ReluGrad}, nil, nil, graph.FuseReluGrad),
		fused(FuseErfGrad, "Erf's gradient chain in one pass (ErfGrad)",
			[]string{graph.ErfGrad}, nil, nil, graph.FuseErfGrad),
		fused(FuseGeluErf, "the exact GELU's forward chain in one pass (GeluErf)",
			[]string{graph.GeluErf}, nil, nil, graph.FuseGeluErf),
		fused(FuseGemmRelu, "a Relu after a Gemm as its epilogue, the gradient reading the Relu's output (GemmRelu); after fuse-relu-grad, whose nodes it rewires",
			[]string{graph.GemmRelu}, []string{FuseReluGrad}, nil, graph.FuseGemmRelu),
		fused(FuseBatchNormRelu, "training BatchNormalization then Relu, and its gradient pair, each in one pass (BatchNormRelu, BatchNormReluGrad); after fuse-relu-grad, whose ReluGrad it reads",
			[]string{graph.BatchNormRelu, graph.BatchNormReluGrad}, []string{FuseReluGrad}, nil, graph.FuseBatchNormRelu),
		{Name: PruneFused, Doc: "constants and nodes that only the fused chains read removed",
			After: []string{FoldConstants},
			Run: func(g *graph.Graph, env *Env) (int, error) {
				n := 0
				for _, f := range fusions {
					n += env.Count(f)
				}
				if n == 0 || env.Evaluate == nil {
					return 0, nil
				}
				return graph.RemoveDeadNodes(g), nil
			}},
	}
}

// SpecialisedPasses run, after CompilePasses, on a copy of the compiled
// graph once the input shapes are known: shapes specialised (shape
// computations folded), then the fusions that need every shape, then the
// ops whose lowering needed static shapes lowered.
func SpecialisedPasses() []Pass {
	return []Pass{
		{Name: Specialize, Doc: "the graph specialised to the fed input shapes: shapes inferred, shape subgraphs folded to constants",
			Requires: []string{Lower},
			Run: func(g *graph.Graph, env *Env) (int, error) {
				sg, err := graph.Specialize(g, env.Opset, env.Shapes, env.Evaluate)
				if err != nil {
					return 0, err
				}
				*g = *sg
				return 1, nil
			}},
		{Name: DropIdentityArith, Doc: "Mul or Div by a constant of exact ones, Add of exact −0s and Sub of exact +0s that leave the other operand's shape removed, their readers reading that operand (baddbmm's Mul(scores, 1) and its gradient's); the values do not change; before the fusions and marks that look for a product's direct reader",
			Requires: []string{Specialize}, Before: []string{FuseMatMulBias, FuseGeluErfGrad, FuseSliceGrad, FuseResidual, FusePermutedBias, FuseLNGradAdd, DropSameShapeSum, MarkCausal},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.DropIdentityArithmetic(g), nil }},
		{Name: FuseMatMulBias, Doc: "biases added to a product become its GEMM's epilogue (MatMulAdd); needs every shape",
			Fuses: []string{graph.MatMulAdd}, Requires: []string{Specialize},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseMatMulBias(g), nil }},
		{Name: FuseGeluErfGrad, Doc: "the exact GELU's gradient chain in one pass (GeluErfGrad); needs its same-shape SumToShapes known, and ErfGrad fused",
			Fuses: []string{graph.GeluErfGrad}, Requires: []string{Specialize, FuseErfGrad},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseGeluErfGrad(g), nil }},
		{Name: RecomputeGeluGrad, Doc: "GeluErfGrad recomputes D and A from X (GeluErfGradX), so the forward GeluErf writes Y alone and backward keeps X, as PyTorch's GELU saves its input only",
			Fuses: []string{graph.GeluErfGradX}, Requires: []string{Specialize, FuseGeluErfGrad},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.RecomputeGeluErfGrad(g), nil }},
		{Name: FuseSliceGrad, Doc: "the summed SliceGrads of a value cut into slices along one axis (attention's packed q, k, v) become one Concat; needs every shape",
			Requires: []string{Specialize},
			Run:      func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseSliceGradConcat(g), nil }},
		{Name: PruneDropoutMasks, Doc: "Dropout masks that nothing reads (a constant ratio of 0 passes the gradient through) not written",
			After: []string{Specialize},
			Run:   func(g *graph.Graph, _ *Env) (int, error) { return graph.PruneUnreadDropoutMasks(g), nil }},
		{Name: RecomputeGeluOut, Doc: "backward's reads of a GeluErf's Y (the next product's weight gradient) read a copy computed just before them, so Y dies after forward; X lives that long anyway",
			Fuses: []string{graph.GeluErf, graph.GeluErfGradX}, Requires: []string{Specialize, RecomputeGeluGrad}, After: []string{PruneDropoutMasks},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.RecomputeGeluErfOutput(g), nil }},
		{Name: FuseMatMulGelu, Doc: "the GELU after a Linear layer (writing Y alone) computed in the GEMM's epilogue (MatMulAddGeluErf), so Y is not a second pass over the product",
			Fuses: []string{graph.MatMulAddGeluErf}, Requires: []string{Specialize, FuseMatMulBias, RecomputeGeluGrad}, After: []string{RecomputeGeluOut},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseMatMulAddGeluErf(g), nil }},
		{Name: FuseMatMulGeluGrad, Doc: "the GELU's gradient (GeluErfGradX) and the recomputed GELU output before the weight gradient applied in the epilogue of the product that makes dY (MatMulGeluErfGrad): X read once, dY never read back",
			Fuses: []string{graph.MatMulGeluErfGrad}, Requires: []string{Specialize, RecomputeGeluGrad}, After: []string{RecomputeGeluOut, FuseMatMulGelu},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseMatMulGeluErfGrad(g), nil }},
		{Name: FuseResidual, Doc: "a Linear layer's output added to the residual stream: the residual added in the GEMM's epilogue after the bias (MatMulAddAdd); needs every shape",
			Fuses: []string{graph.MatMulAddAdd}, Requires: []string{Specialize, FuseMatMulBias}, After: []string{PruneDropoutMasks, FuseMatMulGelu},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseMatMulAddResidual(g), nil }},
		{Name: FusePermutedBias, Doc: "a bias added to a PermutedMatMul product of a weight matrix becomes its GEMM's epilogue (PermutedMatMulAdd: attention's in-projection); needs every shape",
			Fuses: []string{graph.PermutedMatMulAdd}, Requires: []string{Specialize},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FusePermutedMatMulBias(g), nil }},
		{Name: FuseLNGradAdd, Doc: "a residual gradient added to a LayerNormalizationGrad's dX as each row is written (LayerNormGradAdd), so dX is not read back; needs every shape",
			Fuses: []string{graph.LayerNormGradAdd}, Requires: []string{Specialize},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseLayerNormGradAdd(g), nil }},
		{Name: FuseBatchNormAdd, Doc: "a residual block's end, BatchNormalization then Add(residual) then Relu, in one pass that writes the Relu's output alone (BatchNormAddRelu), the Relu's gradient reading that output; needs every shape (a broadcast residual is left alone)",
			Fuses: []string{graph.BatchNormAddRelu}, Requires: []string{Specialize},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseBatchNormAddRelu(g), nil }},
		{Name: FuseAddReluGrad, Doc: "the sum of a Relu output's two gradients masked by the Relu in one pass (AddReluGrad: a residual block's output gradient); needs every shape",
			Fuses: []string{graph.AddReluGrad}, Requires: []string{Specialize},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseAddReluGrad(g), nil }},
		{Name: DropSameShapeSum, Doc: "SumToShape(G, Like) of one known shape becomes Identity(G), so that Like (read for its shape only) is not kept alive for it; after the fusions that look through such SumToShapes",
			After: []string{Specialize, FuseGeluErfGrad, FuseSliceGrad},
			Run:   func(g *graph.Graph, _ *Env) (int, error) { return graph.DropSameShapeSumToShape(g), nil }},
		{Name: FusePermutedTrans, Doc: "a Transpose that is the only reader of a PermutedMatMul's result (through Identities) becomes its permY, the product writing where the Transpose did (the queries' gradient, behind the scale's same-shape SumToShape at compile time); after drop-same-shape-sum-to-shape",
			Requires: []string{Specialize}, After: []string{DropSameShapeSum}, Before: []string{MarkCausal},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FusePermutedTranspose(g), nil }},
		{Name: FuseAttnSoftmax, Doc: "attention's scores, Softmax and product with the values in one node (AttentionSoftmax), and their gradients in another (AttentionSoftmaxGrad), one head at a time (a decoder's constant causal mask on the scores taken in): each head's T×T scores, dP and dS stay in the core's cache instead of going through memory; after fuse-permuted-matmul-transpose, whose products it takes in",
			Fuses: []string{graph.AttentionSoftmax, graph.AttentionSoftmaxGrad}, Requires: []string{Specialize}, After: []string{DropIdentityArith, DropSameShapeSum, FusePermutedTrans}, Before: []string{MarkCausal},
			Run: func(g *graph.Graph, env *Env) (int, error) { return graph.FuseAttentionSoftmax(g, env.Opset), nil }},
		{Name: FuseAttnGradConcat, Doc: "attention's three gradients written side by side into the Concat that joins them for the packed in-projection (AttentionSoftmaxGradConcat: nn.MultiheadAttention's q, k and v gradients), so the Concat does not copy them; after fuse-slice-grad-concat, which makes the Concat, and fuse-attention-softmax",
			Fuses: []string{graph.AttentionSoftmaxGradConcat}, Requires: []string{Specialize, FuseAttnSoftmax, FuseSliceGrad}, Before: []string{MarkCausal},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseAttentionGradConcat(g), nil }},
		{Name: FuseAttnPackedQKV, Doc: "attention's q, k and v read where the packed in-projection wrote them (AttentionSoftmax and its gradient with packed_qkv: nn.MultiheadAttention's three Slices and their Reshapes gone), so that they are not copied out; after fuse-attention-softmax and fuse-attention-grad-concat, whose nodes it rewrites",
			Requires: []string{Specialize, FuseAttnSoftmax}, After: []string{FuseAttnGradConcat}, Before: []string{MarkCausal},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseAttentionPackedQKV(g), nil }},
		{Name: RecomputeAttnProbs, Doc: "attention's gradient computes each head's probabilities P again from q and k (recompute_p) where P is at least graph.RecomputeMinRatio times attention's output (keys over the head's depth: a GPT-2's 1024 tokens, not ViT-B/16's 197), or everywhere with Env.RecomputeAttention (train's Recompute), so the forward keeps no T×T tensor per layer for the backward; after the attention fusions, whose nodes it rewrites",
			Fuses: []string{graph.AttnRecomputePMode}, Requires: []string{Specialize, FuseAttnSoftmax}, After: []string{FuseAttnGradConcat, FuseAttnPackedQKV}, Before: []string{MarkCausal},
			Run: func(g *graph.Graph, env *Env) (int, error) {
				ratio := graph.RecomputeMinRatio
				if env.RecomputeAttention {
					ratio = 0
				}
				return graph.RecomputeAttentionProbs(g, ratio), nil
			}},
		{Name: FuseBatchNormGrad, Doc: "an AddReluGrad and the gradient of the BatchNormalization that reads it in one node (BatchNormAddReluGrad): each channel's dS computed as the sums read it, not read back; needs every shape",
			Fuses: []string{graph.BatchNormAddReluGrad}, Requires: []string{Specialize, FuseAddReluGrad}, After: []string{DropSameShapeSum},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseBatchNormAddReluGrad(g), nil }},
		{Name: FoldExpandReluGrad, Doc: "an Expand read only as a ReluGrad's dY dropped, the ReluGrad broadcasting it as its Where does (a global average pool's gradient spread over the planes of the Relu before the pool: not written and read back); needs every shape; after the fusions that read ReluGrads",
			Fuses: []string{graph.ReluGrad}, Requires: []string{Specialize}, After: []string{FuseAddReluGrad, FuseBatchNormGrad, FuseBatchNormAdd},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FoldExpandIntoReluGrad(g), nil }},
		{Name: FusePatchEmbed, Doc: "a vision transformer's patch embedding, a Conv whose windows tile the image then its output flattened and transposed to [N, patches, channels], becomes one GEMM of the batch's patches (Patchify) by the filters, written in that layout (MatMulAdd), and the filters' gradient one GEMM of the output's gradient by the kept patches (MatMulGradB), the bias's a SumToShape of it; needs every shape",
			Fuses: []string{graph.Patchify, graph.MatMulAdd, graph.TransposedMatMul}, Requires: []string{Specialize},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FusePatchEmbedding(g), nil }},
		{Name: FuseMaxPoolArgmax, Doc: "a 2-D float32 MaxPool writes each window's argmax tap as a byte (MaxPoolArgmax) and its gradient routes dY through those codes (MaxPoolArgmaxGrad), so the backward does not read X; needs every shape",
			Fuses: []string{graph.MaxPoolArgmax, graph.MaxPoolArgmaxGrad}, Requires: []string{Specialize},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseMaxPoolArgmax(g), nil }},
		{Name: FuseUpdateGathered, Doc: "an SGD or Adam update of an embedding table whose gradient is a GatherGrad read by nothing else reads the gathered rows of dY instead (SGDUpdateGathered, AdamUpdateGathered), so the table-sized gradient, mostly zeros, is not written and read back; needs the table's shape",
			Fuses: []string{graph.SGDUpdateGatheredOp, graph.AdamUpdateGatheredOp}, Requires: []string{Specialize},
			Run: func(g *graph.Graph, _ *Env) (int, error) { return graph.FuseUpdateGathered(g), nil }},
		{Name: FuseUpdateProduct, Doc: "an SGD or Adam update of a large weight (graph.UpdateProductMinBytes) whose gradient is a MatMulGradB over every row of the batch read by nothing else makes that gradient a block of rows at a time and updates those rows before the next (SGDUpdateProduct, AdamUpdateProduct), so the weight-sized gradient is never held whole (the GPT's head: 147 MiB off the step's peak); needs every shape",
			Fuses: []string{graph.SGDUpdateProductOp, graph.AdamUpdateProductOp}, Requires: []string{Specialize},
			Run: func(g *graph.Graph, _ *Env) (int, error) {
				return graph.FuseUpdateProduct(g, graph.UpdateProductMinBytes), nil
			}},
		{Name: LowerSpecialised, Doc: "ops whose lowering needs static shapes lowered",
			After: []string{Specialize, FuseMaxPoolArgmax, FuseMatMulBias, FuseGeluErfGrad, RecomputeGeluGrad, RecomputeGeluOut, FuseMatMulGelu, FuseMatMulGeluGrad, FuseResidual, FusePermutedBias, FuseLNGradAdd, FuseBatchNormAdd, FuseAddReluGrad, FuseBatchNormGrad, FuseSliceGrad, PruneDropoutMasks, DropSameShapeSum},
			Run:   runLower},
		{Name: MarkCausal, Doc: "the products of attention with a constant causal mask told which half of each T×T matrix is exact zeros or unread (PermutedMatMul's lower, lowerY and fillY hints), so that they skip it; after every pass that rewrites those products",
			Requires: []string{Specialize}, After: []string{LowerSpecialised},
			Run: func(g *graph.Graph, env *Env) (int, error) { return graph.MarkCausalAttention(g, env.Opset), nil }},
	}
}

// SubgraphPasses run on the bodies of control-flow ops (If, Loop, Scan):
// lowering only, as their inputs are not known to be fed.
func SubgraphPasses() []Pass {
	return []Pass{{Name: Lower, Doc: "ops without a kernel lowered to primitives", Run: runLower}}
}

func runLower(g *graph.Graph, env *Env) (int, error) {
	if env.Lower == nil {
		return 0, nil
	}
	return 0, env.Lower(g)
}
