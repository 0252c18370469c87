package train

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/graph/passes"
)

// Names of the training builder's passes (docs/architecture.md lists them
// with the backend's).
const (
	passPromoteState     = "promote-state"
	passAddLoss          = "add-loss"
	passSyncBatchNorm    = "sync-batchnorm"
	passPushDownGather   = "pushdown-gather"
	passLowerAutodiff    = "lower-for-autodiff"
	passDropoutMasks     = "dropout-masks"
	passAutoCast         = "autocast"
	passAutodiff         = "autodiff"
	passPlaceGradients   = "place-gradients"
	passStateOutputs     = "state-outputs"
	passRecompute        = "recompute"
	passTopoSort         = "topo-sort"
	passCheckCollectives = "check-collectives"
)

// trainBuild is what the training passes hand on to each other.
type trainBuild struct {
	outName      string
	lossName     string
	forwardNodes int
	grads        []string
	state        []backend.StateSpec
}

// trainingPasses are the passes that turn the model's graph into the
// training step's, in order, with their constraints (checked by
// passes.New): parameters and buffers become state inputs, the loss and
// its scale are added, BatchNorm is synchronised across processes, rows
// the outputs never read are left out of the forward pass, ops
// without gradient rules are lowered, Dropout gets its mask, the forward
// pass is autocast, autodiff appends the backward pass, each gradient is
// reported where it is final (and summed in place), the state updates
// become outputs, forward values are recomputed or freed, and the nodes
// are sorted.
func (p *Program) trainingPasses(b *trainBuild) []passes.Pass {
	return []passes.Pass{
		{Name: passPromoteState, Doc: "parameters and BatchNorm buffers turn from initializers into the program's state inputs",
			Run: func(g *graph.Graph, _ *passes.Env) (int, error) { p.promoteToInputs(g); return len(p.Params), nil }},
		{Name: passAddLoss, Doc: "the loss of the chosen output and the loss-scale input",
			Run: func(g *graph.Graph, _ *passes.Env) (int, error) {
				var err error
				if b.lossName, err = p.addLoss(g, b.outName); err != nil {
					return 0, err
				}
				g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: lossScaleInput, Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{}}})
				return 1, nil
			}},
		{Name: passSyncBatchNorm, Doc: "training BatchNormalization sums its batch statistics across processes (with SyncBatchNorm)",
			Before: []string{passLowerAutodiff, passAutodiff},
			Run: func(g *graph.Graph, env *passes.Env) (int, error) {
				if !p.cfg.SyncBatchNorm {
					return 0, nil
				}
				return SyncBatchNorm(g, env.Opset)
			}},
		{Name: passPushDownGather, Doc: "a Gather or Slice of constant rows moves above the row-by-row ops that make its input, so that they compute those rows only (graph.PushDownGather)",
			After: []string{passPromoteState, passAddLoss}, Before: []string{passLowerAutodiff, passDropoutMasks, passAutoCast, passAutodiff},
			Run: func(g *graph.Graph, env *passes.Env) (int, error) {
				if p.cfg.NoPushDownGather {
					return 0, nil
				}
				return graph.PushDownGather(g, env.Opset)
			}},
		{Name: passLowerAutodiff, Doc: "ops with no gradient rule but a lowering lowered, so that autodiff needs rules for primitives only",
			Run: func(g *graph.Graph, env *passes.Env) (int, error) { return 0, graph.LowerForAutodiff(g, env.Opset) }},
		{Name: passDropoutMasks, Doc: "training Dropout nodes output their mask, which their gradient reads",
			After: []string{passLowerAutodiff}, Before: []string{passAutodiff},
			Run: func(g *graph.Graph, _ *passes.Env) (int, error) { return 0, ensureDropoutMasks(g) }},
		{Name: passAutoCast, Doc: "the forward pass and loss in bf16 or fp16 under autocast's rules (with MixedPrecision)",
			After: []string{passAddLoss, passLowerAutodiff, passDropoutMasks, passSyncBatchNorm}, Before: []string{passAutodiff},
			Run: func(g *graph.Graph, env *passes.Env) (int, error) {
				return 0, autoCast(g, env.Opset, p.cfg.MixedPrecision) // amp.go
			}},
		{Name: passAutodiff, Doc: "the backward pass appended: every parameter's gradient, seeded with the loss scale",
			Requires: []string{passPromoteState, passAddLoss, passLowerAutodiff},
			Run: func(g *graph.Graph, env *passes.Env) (int, error) {
				var err error
				b.forwardNodes, b.grads, err = p.addGradients(g, b.lossName, env.Opset)
				return len(b.grads), err
			}},
		{Name: passPlaceGradients, Doc: "each gradient output placed right after the node that finishes it (and with GradSums added into its sum in place)",
			Requires: []string{passAutodiff},
			Run: func(g *graph.Graph, _ *passes.Env) (int, error) {
				if z := p.cfg.Zero; z != nil && (z.Stage == 1) != p.cfg.GradSums {
					return 0, fmt.Errorf("train: ZeRO stage %d with GradSums=%v (stage 1 keeps gradient sums, stage 2 does not)", z.Stage, p.cfg.GradSums)
				}
				var err error
				b.state, err = p.placeGradients(g, b.grads, b.forwardNodes)
				return len(b.grads), err
			}},
		{Name: passStateOutputs, Doc: "the BatchNorm buffers' updates become outputs that replace their state",
			Requires: []string{passPromoteState}, After: []string{passPlaceGradients},
			Run: func(g *graph.Graph, _ *passes.Env) (int, error) {
				b.state = p.addStateOutputs(g, b.state)
				return len(b.state), nil
			}},
		{Name: passRecompute, Doc: "backward reads of only a value's shape stop keeping it alive; with Recompute, cheap activations are computed again",
			Requires: []string{passAutodiff}, After: []string{passPlaceGradients, passStateOutputs},
			Run: func(g *graph.Graph, env *passes.Env) (int, error) {
				st, err := graph.Recompute(g, b.forwardNodes, env.Opset, graph.RecomputeOptions{ReadsOnly: !p.cfg.Recompute})
				return st.Recomputed, err
			}},
		{Name: passTopoSort, Doc: "nodes sorted so that every value is made before it is read",
			After: []string{passRecompute, passPlaceGradients, passStateOutputs},
			Run:   func(g *graph.Graph, _ *passes.Env) (int, error) { return 0, graph.TopoSort(g) }},
		{Name: passCheckCollectives, Doc: "the collective ops (data-parallel all-reduce, ZeRO's reduce-scatter) are paired and ordered as every rank must issue them",
			After: []string{passTopoSort, passPlaceGradients},
			Run:   func(g *graph.Graph, _ *passes.Env) (int, error) { return 0, graph.CheckCollectives(g) }},
	}
}

// buildTrainingGraph runs the training passes on g.
func (p *Program) buildTrainingGraph(g *graph.Graph, outName string, opset int64) (*trainBuild, error) {
	b := &trainBuild{outName: outName}
	pl, err := passes.New("training step", p.trainingPasses(b)...)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if _, err := pl.Run(g, &passes.Env{Opset: opset}); err != nil {
		return nil, err
	}
	return b, nil
}

// Names of the evaluation builder's passes.
const (
	passToInference  = "to-inference"
	passEvalLoss     = "add-loss"
	passEvalState    = "promote-state"
	passEvalAutoCast = "autocast"
)

// evaluationPasses turn the model's graph into the evaluation program's:
// inference mode (BatchNorm on running statistics, Dropout off), the loss
// and the model output as outputs, parameters and buffers as state inputs
// (they change between evaluations, so they stay out of folding), autocast.
func (p *Program) evaluationPasses(outName string) []passes.Pass {
	return []passes.Pass{
		{Name: passToInference, Doc: "BatchNormalization on running statistics, Dropout off",
			Before: []string{passEvalLoss},
			Run:    func(g *graph.Graph, _ *passes.Env) (int, error) { toInference(g); return 0, nil }},
		{Name: passEvalLoss, Doc: "the loss of the chosen output; the loss and the model output become the graph's outputs",
			Run: func(g *graph.Graph, _ *passes.Env) (int, error) {
				evalLoss, err := p.addLoss(g, outName)
				if err != nil {
					return 0, err
				}
				g.Outputs = []*graph.ValueInfo{{Name: evalLoss}}
				if p.cfg.Loss.Kind != "output" {
					g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: outName})
				}
				return 1, nil
			}},
		{Name: passEvalState, Doc: "parameters and buffers become the inputs the shared state binds",
			Run: func(g *graph.Graph, _ *passes.Env) (int, error) {
				for _, prm := range p.Params {
					delete(g.Initializers, prm.Name)
					g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: prm.Name, Type: typeOf(prm.Value)})
				}
				for name, t := range p.Buffers {
					delete(g.Initializers, name)
					g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: typeOf(t)})
				}
				return len(p.Params) + len(p.Buffers), nil
			}},
		{Name: passEvalAutoCast, Doc: "the forward pass and loss in bf16 or fp16 (with MixedPrecision)",
			Requires: []string{passToInference}, After: []string{passEvalLoss, passEvalState},
			Run: func(g *graph.Graph, env *passes.Env) (int, error) {
				return 0, autoCast(g, env.Opset, p.cfg.MixedPrecision) // amp.go
			}},
	}
}

// buildEvaluationGraph runs the evaluation passes on g.
func (p *Program) buildEvaluationGraph(g *graph.Graph, outName string, opset int64) error {
	pl, err := passes.New("evaluation", p.evaluationPasses(outName)...)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	_, err = pl.Run(g, &passes.Env{Opset: opset})
	return err
}
