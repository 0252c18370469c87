package cpu

import (
	"github.com/onnxtrain/onnxtrain/graph"
)

// fusedOps are the fused ops the CPU backend has kernels for (of
// graph.FusedDomain, but the optimizer updates SGDUpdateGathered, AdamUpdateGathered,
// SGDUpdateProduct and AdamUpdateProduct of
// graph.InternalDomain): every fusion of the pass pipeline (graph/passes).
var fusedOps = []string{
	graph.TransposedMatMul, graph.PermutedMatMul, graph.GatherGradSum,
	graph.ReluGrad, graph.ErfGrad, graph.GeluErf, graph.GeluErfGrad, graph.GeluErfGradX,
	graph.GemmRelu, graph.BatchNormRelu, graph.BatchNormReluGrad, graph.MatMulAdd,
	graph.MatMulAddGeluErf, graph.MatMulGeluErfGrad, graph.LayerNormGradAdd,
	graph.PermutedMatMulAdd, graph.MatMulAddAdd, graph.BatchNormAddRelu, graph.AddReluGrad,
	graph.BatchNormAddReluGrad, graph.MaxPoolArgmax, graph.MaxPoolArgmaxGrad,
	graph.AttentionSoftmax, graph.AttentionSoftmaxGrad, graph.AttentionSoftmaxGradConcat, graph.AttnRecomputePMode,
	graph.Patchify, graph.SGDUpdateGatheredOp, graph.AdamUpdateGatheredOp,
	graph.SGDUpdateProductOp, graph.AdamUpdateProductOp,
}

// FusedOps implements backend.FusedOpsDeclarer: every fused kernel, or
// FusedOnly.
func (b *Backend) FusedOps() []string {
	if b.FusedOnly != nil {
		return append([]string(nil), b.FusedOnly...)
	}
	return append([]string(nil), fusedOps...)
}

// CompiledNodes implements backend.PlanInspector.
func (e *Executable) CompiledNodes() []*graph.Node { return planNodes(e.main) }

// LastRunNodes implements backend.PlanInspector.
func (e *Executable) LastRunNodes() []*graph.Node { return planNodes(e.last.Load()) }

func planNodes(p *plan) []*graph.Node {
	if p == nil {
		return nil
	}
	out := make([]*graph.Node, len(p.steps))
	for i := range p.steps {
		out[i] = p.steps[i].node
	}
	return out
}

// MemoryPlanned implements backend.MemoryPlanReporter.
func (e *Executable) MemoryPlanned() bool { return e.MemoryStats().Planned }
