package train

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Names of the values the training builder adds to the graph.
const (
	freshInput     = "onnxtrain/fresh_window"
	syncInput      = "onnxtrain/sync_gradients"
	labelsInput    = "onnxtrain/labels"
	lossScaleInput = "onnxtrain/loss_scale"
	lossValue      = "onnxtrain/loss"
	gradPrefix     = "onnxtrain/grad/"
)

// LossConfig says what is minimised.
type LossConfig struct {
	// Kind is cross_entropy, mse, l1, bce_with_logits, or output (the graph
	// computes its own loss; Output names it).
	Kind string
	// Output is the model output the loss applies to (default: the first
	// graph output), or for Kind "output" the loss value itself.
	Output string
	// LabelSmoothing for cross_entropy, as torch.nn.CrossEntropyLoss.
	LabelSmoothing float64
	// IgnoreIndex for cross_entropy (default -100, as PyTorch).
	IgnoreIndex int64
}

// ParseLoss reads a --loss flag value: cross_entropy, mse, l1,
// bce_with_logits or output:NAME.
func ParseLoss(s string) (LossConfig, error) {
	switch {
	case strings.HasPrefix(s, "output:"):
		name := strings.TrimPrefix(s, "output:")
		if name == "" {
			return LossConfig{}, fmt.Errorf("--loss output:NAME needs the name of a graph output")
		}
		return LossConfig{Kind: "output", Output: name, IgnoreIndex: -100}, nil
	case s == "cross_entropy", s == "mse", s == "l1", s == "bce_with_logits":
		return LossConfig{Kind: s, IgnoreIndex: -100}, nil
	}
	return LossConfig{}, fmt.Errorf("unknown loss %q (want cross_entropy, mse, l1, bce_with_logits or output:NAME)", s)
}

// ProgramConfig configures Build.
type ProgramConfig struct {
	Loss LossConfig
	// TrainOnly, when set, freezes every parameter whose name does not match.
	TrainOnly *regexp.Regexp
	// Backend name (default "cpu").
	Backend string
	// Seed for random ops (Dropout).
	Seed int64
	// SyncBatchNorm rewrites training-mode BatchNormalization so that its
	// batch statistics are summed across the processes of the collective
	// the Run's context carries (see SyncBatchNorm in syncbn.go).
	SyncBatchNorm bool
	// Recompute trades time for memory: cheap forward values the backward
	// pass reads are computed again just before their use instead of being
	// kept alive from forward to backward (graph.Recompute), and attention's
	// probabilities in its gradient at every sequence length
	// (backend.Tuning.RecomputeAttention).
	Recompute bool
	// MixedPrecision is "no" (or ""), "bf16" or "fp16": the forward pass
	// and loss run under graph.AutoCast with that low-precision type
	// (float32 parameters, float32 gradients; see amp.go).
	MixedPrecision string
	// GradSums makes the program keep each parameter's gradient summed over
	// the micro-batches of an accumulation window in a state buffer
	// (graph.AccumulateGradOp): Accumulate runs a micro-batch and adds its
	// gradients in place; ForwardBackward is not available.
	GradSums bool
	// PrimitivesOnly compiles with backend.CompileOptions.PrimitivesOnly.
	PrimitivesOnly bool
	// Tuning is passed to the backend with every compile of the program.
	Tuning backend.Tuning
	// DataParallel, with GradSums, adds the data-parallel gradient
	// all-reduce to the micro-batch step as collective ops (program_dp.go).
	DataParallel *DataParallelConfig
	// FusedUpdate defers the training step to BindUpdate, which compiles
	// it with the optimizer's update of every parameter inside
	// (program_step.go); Step then runs a whole optimizer step as one Run.
	// It excludes GradSums, DataParallel, Zero and fp16.
	FusedUpdate bool
	// Zero adds ZeRO's gradient reduce-scatter to the step and makes
	// AllGatherParams available (program_zero.go); stage 1 needs GradSums,
	// stage 2 refuses it.
	Zero *ZeroConfig
	// NoPushDownGather leaves out the pushdown-gather pass: the forward
	// pass computes every row of the values whose rows a Gather or Slice
	// selects (the results are the same; tests compare the two).
	NoPushDownGather bool
}

// Parameter is a trainable tensor of the model.
type Parameter struct {
	Name  string
	Value *graph.Tensor
}

// Program is a model ready to train: a compiled training step (forward,
// loss, backward) and a compiled evaluation pass.
//
// The program owns its state in the backend's memory (backend.StateSpec):
// the parameters and BatchNorm buffers (state named as the initializers),
// with GradSums the gradient sums (GradStateName), and the optimizer slots
// of a bound optimizer ("<param>/<slot>", optim.Binder). Per step only the
// batch and scalars go in. Params[i].Value and Buffers are the host
// tensors the state started from: on a backend whose state is host memory
// (the CPU) they are the buffers themselves; elsewhere SyncToHost and
// SyncFromHost move them (checkpoints, exports).
type Program struct {
	Model *graph.Model
	// Params are the trainable tensors, in the file's initializer order.
	// Training updates Value in place.
	Params []*Parameter
	// Buffers are non-trainable state the forward pass updates
	// (BatchNormalization running statistics), by initializer name.
	Buffers map[string]*graph.Tensor
	// DataInputs are the graph inputs the data feeds (for Kind "output"
	// this includes the model's own label input).
	DataInputs []string
	// NeedsLabels is true when the loss takes the batch labels.
	NeedsLabels bool
	// Frozen lists parameters excluded by TrainOnly.
	Frozen []string

	cfg           ProgramConfig
	be            backend.Backend
	bufferUpdates map[string]string // graph output -> buffer name
	gradSums      []*graph.Tensor   // GradSums: the host tensors of the sums
	gradExes      map[string]backend.Executable
	trainExe      backend.Executable
	evalExe       backend.Executable
	evalOutput    string
	labelDType    graph.DType
	scratch       stepScratch
	freshNext     bool      // GradSums: the next step starts a window
	dp            *dpLayout // DataParallel: buckets (program_dp.go)
	syncNext      bool      // DataParallel, Zero: the next step reduces
	zeroPart      *graph.Tensor
	allGather     backend.Executable // Zero: AllGatherParams's program
	fused         *fusedStep         // FusedUpdate (program_step.go)
}

// ErrData is wrapped by errors about data that does not fit the model.
var ErrData = errors.New("data does not fit the model")

// Build prepares m for training with the given loss.
func Build(m *graph.Model, cfg ProgramConfig) (*Program, error) {
	if cfg.Backend == "" {
		cfg.Backend = "cpu"
	}
	if cfg.Recompute {
		cfg.Tuning.RecomputeAttention = true // attention's probabilities too, at every size
	}
	be, err := backend.Open(cfg.Backend)
	if err != nil {
		return nil, err
	}
	src := m.Graph
	if err := graph.TopoSort(src); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	p := &Program{Model: m, Buffers: map[string]*graph.Tensor{}, bufferUpdates: map[string]string{}, cfg: cfg, be: be, freshNext: true}
	outName, err := p.lossOutput(src)
	if err != nil {
		return nil, err
	}
	g := cloneGraph(src)
	if err := p.markBuffersAndParams(g); err != nil {
		return nil, err
	}
	if cfg.FusedUpdate {
		if err := fusedUpdateConflict(cfg); err != nil {
			return nil, fmt.Errorf("train: FusedUpdate: the program %w", err)
		}
		// BindUpdate compiles the step once the optimizer is known.
		p.fused = &fusedStep{model: m, graph: g, outName: outName}
	} else if err := p.compileTraining(m, g, outName); err != nil {
		return nil, err
	}
	if err := p.compileEvaluation(m, outName); err != nil {
		return nil, err
	}
	return p, nil
}

// lossOutput picks and checks the model output the loss applies to and records the data inputs.
func (p *Program) lossOutput(src *graph.Graph) (string, error) {
	// Which model output the loss applies to.
	outName := p.cfg.Loss.Output
	if outName == "" {
		if len(src.Outputs) == 0 {
			return "", fmt.Errorf("train: the model has no outputs")
		}
		outName = src.Outputs[0].Name
	}
	if !hasOutput(src, outName) {
		return "", fmt.Errorf("train: --loss: %q is not an output of the model (outputs: %v)", outName, src.OutputNames())
	}
	p.DataInputs = src.InputNames()
	if p.cfg.Loss.Kind == "output" {
		for _, o := range src.Outputs {
			if o.Name == outName && o.Type != nil && o.Type.HasShape && len(o.Type.Shape) > 0 {
				return "", fmt.Errorf("train: --loss output:%s: that output is %v, not a scalar; the loss a graph computes must be a single value", outName, o.Type)
			}
		}
	}
	return outName, nil
}

// markBuffersAndParams sorts g's float initializers into BatchNorm buffers, parameters and frozen ones.
func (p *Program) markBuffersAndParams(g *graph.Graph) error {
	// BatchNormalization running statistics are buffers; the training-mode
	// node's extra outputs are their new values.
	isBuffer := map[string]bool{}
	for _, n := range g.Nodes {
		if n.OpType != "BatchNormalization" {
			continue
		}
		for i, in := range []int{3, 4} {
			name := n.Input(in)
			if _, ok := g.Initializers[name]; !ok {
				continue
			}
			isBuffer[name] = true
			n.SetAttr(graph.IntAttr(graph.UnbiasedVarAttr, 1))
			if trainingMode(n) && len(n.Outputs) > i+1 && n.Outputs[i+1] != "" {
				p.bufferUpdates[n.Outputs[i+1]] = name
			}
		}
	}
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
	}
	for _, name := range g.SortedInitializerNames() {
		t := g.Initializers[name]
		if isInput[name] || !t.DType.IsFloat() || t.Size() == 0 {
			continue
		}
		if isBuffer[name] {
			p.Buffers[name] = t
			continue
		}
		if !usedAsInput(g, name) || !t.AllFinite() { // a -inf mask is a constant (graph.Tensor.AllFinite)
			continue
		}
		if p.cfg.TrainOnly != nil && !p.cfg.TrainOnly.MatchString(name) {
			p.Frozen = append(p.Frozen, name)
			continue
		}
		if t.DType != graph.Float32 {
			return fmt.Errorf("train: parameter %q is %v; training needs float32 parameters", name, t.DType)
		}
		p.Params = append(p.Params, &Parameter{Name: name, Value: t})
	}
	if len(p.Params) == 0 {
		return fmt.Errorf("train: the model has no trainable parameters (float initializers)")
	}
	return nil
}

// compileTraining turns g into the training step (loss, gradients, state)
// through the training passes (passes.go) and compiles it.
func (p *Program) compileTraining(m *graph.Model, g *graph.Graph, outName string) error {
	b, err := p.buildTrainingGraph(g, outName, m.Opset())
	if err != nil {
		return err
	}
	tm := &graph.Model{IRVersion: m.IRVersion, Opsets: m.Opsets, Graph: g, Functions: m.Functions}
	var share backend.Executable // FusedUpdate: the evaluation program holds the state already
	if p.evalExe != nil {
		share = p.evalExe
	}
	p.trainExe, err = p.be.Compile(tm, backend.CompileOptions{Seed: p.cfg.Seed, State: b.state, ShareState: share, PrimitivesOnly: p.cfg.PrimitivesOnly, Tuning: p.cfg.Tuning, Repeated: true})
	if err != nil {
		return fmt.Errorf("train: compiling the training step: %w", err)
	}
	return nil
}

// promoteToInputs turns the parameters and buffers from initializers of g into its inputs.
func (p *Program) promoteToInputs(g *graph.Graph) {
	promote := func(name string, t *graph.Tensor) {
		delete(g.Initializers, name)
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: typeOf(t)})
	}
	for _, prm := range p.Params {
		promote(prm.Name, prm.Value)
	}
	for name, t := range p.Buffers {
		promote(name, t)
	}
}

// addGradients appends the backward pass to g and makes the loss its first output; it returns the forward node count and the gradient names.
func (p *Program) addGradients(g *graph.Graph, lossName string, opset int64) (int, []string, error) {
	xs := make([]string, len(p.Params))
	for i, prm := range p.Params {
		xs[i] = prm.Name
	}
	seed := lossScaleInput
	forwardNodes := len(g.Nodes)
	grads, err := graph.Gradients(g, lossName, xs, seed, opset)
	if err != nil {
		return 0, nil, fmt.Errorf("train: %w", err)
	}
	g.Outputs = []*graph.ValueInfo{{Name: lossValue}}
	g.Nodes = append(g.Nodes, &graph.Node{Name: lossValue, OpType: "Identity", Inputs: []string{lossName}, Outputs: []string{lossValue}})
	return forwardNodes, grads, nil
}

// placeGradients adds each gradient's output node right after the node that finishes it (and with GradSums the accumulate node); it returns the gradient sums' state.
func (p *Program) placeGradients(g *graph.Graph, grads []string, forwardNodes int) ([]backend.StateSpec, error) {
	// Each gradient output's Identity goes right after the backward node
	// that finishes the gradient, so that the executor reports it as soon
	// as it is final (overlap.go reduces it while backward goes on); at the
	// end of the graph, every gradient would be reported together.
	after := map[int][]*graph.Node{}
	producer := map[string]int{}
	for j := forwardNodes; j < len(g.Nodes); j++ {
		for _, o := range g.Nodes[j].Outputs {
			producer[o] = j
		}
	}
	var late []*graph.Node
	p.scratch.gradNames = make([]string, len(grads))
	for i, gname := range grads {
		out := gradPrefix + p.Params[i].Name
		p.scratch.gradNames[i] = out
		id := &graph.Node{Name: out, OpType: "Identity", Inputs: []string{gname}, Outputs: []string{out}}
		if j, ok := producer[gname]; ok {
			after[j] = append(after[j], id)
		} else {
			late = append(late, id)
		}
		if !p.cfg.GradSums && p.cfg.Zero == nil && p.fused == nil {
			g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: out})
		}
	}
	var state []backend.StateSpec
	// placeSums puts each gradient's AccumulateGrad node right after its
	// output node, so that its buffer is free for the rest of backward (one
	// node after the backward pass kept every gradient alive to the end:
	// the memory plan's peak held all of them); it returns the sums.
	placeSums := func() []string {
		var accs []*graph.Node
		accs, state = p.addGradSums(g)
		var sums []string
		for i, gname := range grads {
			if j, ok := producer[gname]; ok {
				after[j] = append(after[j], accs[i])
			} else {
				late = append(late, accs[i])
			}
			sums = append(sums, accs[i].Outputs...)
		}
		return sums
	}
	if z := p.cfg.Zero; z != nil {
		values := p.scratch.gradNames // stage 2: the gradients themselves
		if z.Stage == 1 {
			values = placeSums()
		}
		rs, st, err := p.addZeroReduceScatter(g, values) // program_zero.go
		if err != nil {
			return nil, err
		}
		late = append(late, rs)
		state = append(state, st)
	} else if p.cfg.GradSums && p.cfg.DataParallel != nil {
		var bucketed []*graph.Node
		bucketed, state = p.addBucketedSums(g, grads, producer, after, len(g.Nodes)-1) // program_dp.go
		late = append(late, bucketed...)
	} else if p.cfg.GradSums {
		placeSums()
	} else if p.fused != nil {
		var err error
		if state, err = p.addFusedUpdates(g, grads, producer, after, &late); err != nil { // program_step.go
			return nil, err
		}
	}
	nodes := make([]*graph.Node, 0, len(g.Nodes)+len(grads))
	for j, n := range g.Nodes {
		nodes = append(nodes, n)
		nodes = append(nodes, after[j]...)
	}
	g.Nodes = append(nodes, late...)
	return state, nil
}

// addGradSums makes the AccumulateGrad nodes, one per gradient, and the gradient sums' inputs, outputs and state.
func (p *Program) addGradSums(g *graph.Graph) ([]*graph.Node, []backend.StateSpec) {
	var state []backend.StateSpec
	g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: freshInput, Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Bool, HasShape: true, Shape: []graph.Dim{}}})
	p.gradSums = make([]*graph.Tensor, len(p.Params))
	accs := make([]*graph.Node, len(p.Params))
	for i, prm := range p.Params {
		sum := GradStateName(prm.Name)
		p.gradSums[i] = graph.Zeros(graph.Float32, prm.Value.Shape...)
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: sum, Type: typeOf(prm.Value)})
		// The sum is added to in place (graph.UpdatedInput).
		accs[i] = &graph.Node{Name: "onnxtrain/accumulate_grads/" + prm.Name, OpType: graph.AccumulateGradOp, Domain: graph.InternalDomain,
			Inputs:  []string{freshInput, sum, p.scratch.gradNames[i]},
			Outputs: []string{sum + "/new"},
			Attrs:   map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}}
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: sum + "/new"})
		state = append(state, backend.StateSpec{Name: sum, Init: p.gradSums[i], UpdatedBy: sum + "/new"})
	}
	return accs, state
}

// addStateOutputs adds the buffer updates to g's outputs and appends the parameters' and buffers' state to state.
func (p *Program) addStateOutputs(g *graph.Graph, state []backend.StateSpec) []backend.StateSpec {
	upd := make([]string, 0, len(p.bufferUpdates))
	for o := range p.bufferUpdates {
		upd = append(upd, o)
	}
	sort.Strings(upd)
	for _, o := range upd {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: o})
	}
	// Parameters and buffers are state the program reads; a buffer is
	// replaced by its BatchNormalization's running statistic.
	bufferUpdate := map[string]string{}
	for o, name := range p.bufferUpdates {
		bufferUpdate[name] = o
	}
	for _, prm := range p.Params {
		sp := backend.StateSpec{Name: prm.Name, Init: prm.Value}
		if p.fused != nil {
			sp.UpdatedBy = prm.Name + "/new" // its update node (program_step.go)
		}
		state = append(state, sp)
	}
	for _, name := range sortedNames(p.Buffers) {
		state = append(state, backend.StateSpec{Name: name, Init: p.Buffers[name], UpdatedBy: bufferUpdate[name]})
	}
	return state
}

// compileEvaluation builds the evaluation graph (inference mode, with the loss) and compiles it, sharing the training step's state.
func (p *Program) compileEvaluation(m *graph.Model, outName string) error {
	// Evaluation graph: the model in inference mode, with the loss, its
	// parameters and buffers as state (the evaluation passes, passes.go).
	eg := cloneGraph(m.Graph)
	if err := p.buildEvaluationGraph(eg, outName, m.Opset()); err != nil {
		return err
	}
	p.evalOutput = outName
	em := &graph.Model{IRVersion: m.IRVersion, Opsets: m.Opsets, Graph: eg, Functions: m.Functions}
	var err error
	var evalState []backend.StateSpec
	for _, prm := range p.Params {
		evalState = append(evalState, backend.StateSpec{Name: prm.Name, Init: prm.Value})
	}
	for _, name := range sortedNames(p.Buffers) {
		evalState = append(evalState, backend.StateSpec{Name: name, Init: p.Buffers[name]})
	}
	p.evalExe, err = p.be.Compile(em, backend.CompileOptions{Seed: p.cfg.Seed, State: evalState, ShareState: p.trainExe, PrimitivesOnly: p.cfg.PrimitivesOnly, Tuning: p.cfg.Tuning})
	if err != nil {
		return fmt.Errorf("train: compiling evaluation: %w", err)
	}
	return nil
}

func hasOutput(g *graph.Graph, name string) bool {
	for _, o := range g.Outputs {
		if o.Name == name {
			return true
		}
	}
	return false
}

func usedAsInput(g *graph.Graph, name string) bool {
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in == name {
				return true
			}
		}
		for _, sg := range n.Subgraphs() {
			for _, s := range sg.OuterScopeNames() {
				if s == name {
					return true
				}
			}
		}
	}
	return false
}

func typeOf(t *graph.Tensor) *graph.Type {
	ty := &graph.Type{Kind: graph.KindTensor, DType: t.DType, HasShape: true, Shape: []graph.Dim{}}
	for _, d := range t.Shape {
		ty.Shape = append(ty.Shape, graph.Dim{Value: int64(d), Known: true})
	}
	return ty
}

// cloneGraph copies g's node list (nodes themselves are copied, attributes
// shared) and initializer map, so passes on the copy leave g alone.
func cloneGraph(g *graph.Graph) *graph.Graph {
	c := *g
	c.Nodes = make([]*graph.Node, len(g.Nodes))
	for i, n := range g.Nodes {
		cn := *n
		cn.Inputs = append([]string{}, n.Inputs...)
		cn.Outputs = append([]string{}, n.Outputs...)
		cn.Attrs = map[string]*graph.Attr{}
		for k, v := range n.Attrs {
			cn.Attrs[k] = v
		}
		c.Nodes[i] = &cn
	}
	c.Inputs = append([]*graph.ValueInfo{}, g.Inputs...)
	c.Outputs = append([]*graph.ValueInfo{}, g.Outputs...)
	c.Initializers = make(map[string]*graph.Tensor, len(g.Initializers))
	for k, v := range g.Initializers {
		c.Initializers[k] = v
	}
	return &c
}

func trainingMode(n *graph.Node) bool {
	return n.AttrInt("training_mode", 0) == 1
}

// toInference switches BatchNormalization to running statistics and
// Dropout off.
func toInference(g *graph.Graph) {
	for _, n := range g.Nodes {
		switch n.OpType {
		case "BatchNormalization":
			if trainingMode(n) {
				n.SetAttr(graph.IntAttr("training_mode", 0))
				n.Outputs = n.Outputs[:1]
			}
		case "Dropout":
			if len(n.Inputs) > 2 {
				n.Inputs = n.Inputs[:2]
			}
		}
	}
}

// ensureDropoutMasks names the mask output of training-mode Dropout nodes,
// so the backward pass reuses the forward pass's mask.
func ensureDropoutMasks(g *graph.Graph) error {
	for _, n := range g.Nodes {
		if n.OpType != "Dropout" {
			continue
		}
		if len(n.Outputs) < 2 {
			n.Outputs = append(n.Outputs, "")
		}
		if n.Outputs[1] == "" {
			n.Outputs[1] = n.Label() + "/onnxtrain_mask"
		}
	}
	return nil
}

// addLoss appends the loss to g and returns the name of the scalar loss.
func (p *Program) addLoss(g *graph.Graph, out string) (string, error) {
	lc := p.cfg.Loss
	if lc.Kind == "output" {
		return out, nil
	}
	p.NeedsLabels = true
	b := graph.NewBuilder("onnxtrain/loss", 0)
	var loss string
	switch lc.Kind {
	case "cross_entropy":
		p.labelDType = graph.Int64
		attrs := []*graph.Attr{graph.StringAttr("reduction", "mean"), graph.IntAttr("ignore_index", lc.IgnoreIndex)}
		nll := b.Op("SoftmaxCrossEntropyLoss", []string{out, labelsInput}, attrs...)
		loss = nll
		if lc.LabelSmoothing > 0 {
			// PyTorch: (1-e)*nll + e*smooth, where smooth is the mean over
			// the samples whose label is not ignored of -mean_c log p.
			logp := b.Op("LogSoftmax", []string{out}, graph.IntAttr("axis", 1))
			var perSample string
			if p.Model.Opset() >= 18 { // axes became an input
				perSample = b.Op("ReduceMean", []string{logp, b.Const(graph.FromInt64([]int64{1}, 1))}, graph.IntAttr("keepdims", 0))
			} else {
				perSample = b.Op("ReduceMean", []string{logp}, graph.IntsAttr("axes", 1), graph.IntAttr("keepdims", 0))
			}
			ignore := b.Const(graph.FromInt64([]int64{lc.IgnoreIndex}))
			keep := b.Op("Cast", []string{b.Op("Not", []string{b.Op("Equal", []string{labelsInput, ignore})})}, graph.IntAttr("to", int64(graph.Float32)))
			total := b.Op("ReduceSum", []string{b.Op("Mul", []string{perSample, keep})}, graph.IntAttr("keepdims", 0))
			smooth := b.Op("Neg", []string{b.Op("Div", []string{total, b.Op("ReduceSum", []string{keep}, graph.IntAttr("keepdims", 0))})})
			e := b.Const(graph.Scalar(graph.Float32, lc.LabelSmoothing))
			one := b.Const(graph.Scalar(graph.Float32, 1-lc.LabelSmoothing))
			loss = b.Op("Add", []string{b.Op("Mul", []string{one, nll}), b.Op("Mul", []string{e, smooth})})
		}
	case "mse", "l1":
		p.labelDType = graph.Float32
		d := b.Op("Sub", []string{out, labelsInput})
		var e string
		if lc.Kind == "mse" {
			e = b.Op("Mul", []string{d, d})
		} else {
			e = b.Op("Abs", []string{d})
		}
		loss = b.Op("ReduceMean", []string{e}, graph.IntAttr("keepdims", 0))
	case "bce_with_logits":
		p.labelDType = graph.Float32
		// max(x,0) - x*t + log(1 + exp(-|x|))
		zero := b.Const(graph.Scalar(graph.Float32, 0))
		one := b.Const(graph.Scalar(graph.Float32, 1))
		relu := b.Op("Max", []string{out, zero})
		xt := b.Op("Mul", []string{out, labelsInput})
		sp := b.Op("Log", []string{b.Op("Add", []string{one, b.Op("Exp", []string{b.Op("Neg", []string{b.Op("Abs", []string{out})})})})})
		loss = b.Op("ReduceMean", []string{b.Op("Add", []string{b.Op("Sub", []string{relu, xt}), sp})}, graph.IntAttr("keepdims", 0))
	default:
		return "", fmt.Errorf("train: unknown loss %q", lc.Kind)
	}
	g.Nodes = append(g.Nodes, b.Nodes...)
	for k, v := range b.Consts {
		g.Initializers[k] = v
	}
	found := false
	for _, in := range g.Inputs {
		found = found || in.Name == labelsInput
	}
	if !found {
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: labelsInput, Type: &graph.Type{Kind: graph.KindTensor, DType: p.labelDType}})
	}
	return loss, nil
}

// StepResult is the outcome of one forward and backward pass.
type StepResult struct {
	Loss  float64
	Grads []*graph.Tensor // one per Params entry, same order
}

// stepScratch is what ForwardBackward reuses from one call to the next,
// so that a steady-state step allocates nothing: the feed map, the loss
// scale's tensor, the result and the names of the gradient outputs.
type stepScratch struct {
	mu        sync.Mutex
	feeds     map[string]*graph.Tensor
	scale     []float32
	scaleData any // scale, as a Tensor's Data
	scaleT    graph.Tensor
	res       StepResult
	gradNames []string
	// GradSums: the fresh flag's two values; gradOp's scalar and feeds.
	fresh, notFresh *graph.Tensor
	opScalar        *graph.Tensor
	opFeeds         map[string]*graph.Tensor
}

// ForwardBackward runs one micro-batch: the loss (before any update) and
// the gradients of loss*lossScale. Buffers (BatchNorm running statistics)
// are updated in place. With GradSums the gradients are added to the
// program's gradient sums (the first micro-batch of the program, and the
// first after StartWindow, replaces them) and Grads are the sums.
//
// The result and its gradients stay valid until the next ForwardBackward
// of the Program (from any goroutine): the gradients live in the backend's
// memory plan and the result itself is reused. A caller that keeps either
// longer copies what it needs.
func (p *Program) ForwardBackward(ctx context.Context, inputs map[string]*graph.Tensor, labels *graph.Tensor, lossScale float32) (*StepResult, error) {
	if p.fused != nil {
		return nil, fmt.Errorf("train: the program was built with FusedUpdate: its training step is Step")
	}
	sc := &p.scratch
	var (
		feeds map[string]*graph.Tensor
		scale *graph.Tensor
		res   *StepResult
	)
	if sc.mu.TryLock() {
		// The common case: no other ForwardBackward of p in flight.
		defer sc.mu.Unlock()
		if sc.feeds == nil {
			sc.feeds = make(map[string]*graph.Tensor, len(inputs)+len(p.Params)+len(p.Buffers)+4)
		}
		feeds = sc.feeds
		clear(feeds)
		if sc.scale == nil {
			sc.scale = make([]float32, 1)
			sc.scaleData = sc.scale // boxed once
		}
		sc.scale[0] = lossScale
		sc.scaleT = graph.Tensor{DType: graph.Float32, Data: sc.scaleData}
		scale = &sc.scaleT
		res = &sc.res
	} else {
		feeds = make(map[string]*graph.Tensor, len(inputs)+len(p.Params)+len(p.Buffers)+4)
		scale = graph.FromFloat32([]float32{lossScale})
		res = &StepResult{}
	}
	if err := p.feeds(feeds, inputs, labels); err != nil {
		return nil, err
	}
	feeds[lossScaleInput] = scale
	if p.cfg.GradSums || p.cfg.Zero != nil {
		if sc.fresh == nil {
			sc.fresh = &graph.Tensor{DType: graph.Bool, Data: []bool{false}}
			sc.notFresh = &graph.Tensor{DType: graph.Bool, Data: []bool{false}}
			sc.fresh.Data.([]bool)[0] = true
		}
		if p.freshNext {
			feeds[freshInput] = sc.fresh
		} else {
			feeds[freshInput] = sc.notFresh
		}
		if p.dp != nil || p.cfg.Zero != nil {
			// The flags are read-only inputs: the same two tensors serve.
			if p.syncNext {
				feeds[syncInput] = sc.fresh
			} else {
				feeds[syncInput] = sc.notFresh
			}
		}
	}
	out, err := p.trainExe.Run(ctx, feeds)
	if res == &sc.res {
		clear(feeds) // keeps no batch alive until the next step
	}
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	lt := out[lossValue]
	if lt == nil || lt.Size() != 1 {
		shape := []int(nil)
		if lt != nil {
			shape = lt.Shape
		}
		return nil, fmt.Errorf("train: %w: the loss has shape %v, not a scalar", ErrData, shape)
	}
	res.Loss = lt.Float(0)
	res.Grads = res.Grads[:0]
	if p.cfg.Zero != nil && !p.cfg.GradSums {
		p.freshNext = false
		return res, nil // stage 2: the gradients went into the partition
	}
	if p.cfg.GradSums {
		p.freshNext = false
		sums, err := p.GradSums()
		if err != nil {
			return nil, err
		}
		res.Grads = append(res.Grads, sums...)
		return res, nil
	}
	for i, prm := range p.Params {
		g := out[sc.gradNames[i]]
		if g == nil || !graph.SameShape(g.Shape, prm.Value.Shape) {
			return nil, fmt.Errorf("train: gradient of %q is missing or misshaped", prm.Name)
		}
		res.Grads = append(res.Grads, g)
	}
	return res, nil
}

// Evaluate runs the model in inference mode: the loss and, for losses
// outside the graph, the model output (logits).
func (p *Program) Evaluate(ctx context.Context, inputs map[string]*graph.Tensor, labels *graph.Tensor) (float64, *graph.Tensor, error) {
	feeds := make(map[string]*graph.Tensor, len(inputs)+4)
	if err := p.feeds(feeds, inputs, labels); err != nil {
		return 0, nil, err
	}
	out, err := p.evalExe.Run(ctx, feeds)
	if err != nil {
		return 0, nil, fmt.Errorf("train: evaluation: %w", err)
	}
	var loss float64
	var logits *graph.Tensor
	for name, t := range out {
		if name == p.evalOutput && p.cfg.Loss.Kind != "output" {
			logits = t
		} else {
			loss = t.Float(0)
		}
	}
	return loss, logits, nil
}

// feeds puts the batch's data inputs and labels into feeds.
func (p *Program) feeds(feeds, inputs map[string]*graph.Tensor, labels *graph.Tensor) error {
	for _, name := range p.DataInputs {
		t, ok := inputs[name]
		if !ok {
			return fmt.Errorf("train: %w: the batch has no array for graph input %q (it has %v)", ErrData, name, mapKeys(inputs))
		}
		feeds[name] = t
	}
	if p.NeedsLabels {
		if labels == nil {
			return fmt.Errorf("train: %w: the loss needs labels and the batch has none", ErrData)
		}
		if labels.DType != p.labelDType {
			l, err := castLabels(labels, p.labelDType)
			if err != nil {
				return err
			}
			labels = l
		}
		feeds[labelsInput] = labels
	}
	return nil
}

func castLabels(t *graph.Tensor, d graph.DType) (*graph.Tensor, error) {
	if d == graph.Int64 && !t.DType.IsInt() {
		return nil, fmt.Errorf("train: %w: cross_entropy needs integer class labels, got %v", ErrData, t.DType)
	}
	out, err := graph.NewTensor(d, t.Shape)
	if err != nil {
		return nil, err
	}
	for i := 0; i < t.Size(); i++ {
		if d == graph.Int64 {
			out.Data.([]int64)[i] = t.Int(i)
		} else {
			out.SetFloat(i, t.Float(i))
		}
	}
	return out, nil
}

func mapKeys(m map[string]*graph.Tensor) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// copyInto overwrites dst's elements with src's (same dtype and size).
func copyInto(dst, src *graph.Tensor) {
	switch d := dst.Data.(type) {
	case []float32:
		if s, ok := src.Data.([]float32); ok && len(s) == len(d) {
			copy(d, s)
			return
		}
	case []float64:
		if s, ok := src.Data.([]float64); ok && len(s) == len(d) {
			copy(d, s)
			return
		}
	}
	for i := 0; i < dst.Size() && i < src.Size(); i++ {
		dst.SetFloat(i, src.Float(i))
	}
}

// PlannedBytes is what one training step holds at its peak besides its
// inputs and parameters (activations, gradients, workspace), as the
// backend's memory plan measured it on the latest step; 0 before the first
// step or on backends that do not plan memory.
func (p *Program) PlannedBytes() int64 {
	if s, ok := p.trainExe.(backend.PeakReporter); ok {
		return s.PeakBytes()
	}
	return 0
}
