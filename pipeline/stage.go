package pipeline

import (
	"context"
	"fmt"
	"sort"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Names of the values a stage program adds.
const (
	lossScaleInput = "pipeline/loss_scale"
	gradOfPrefix   = "pipeline/grad_of/" // + output name: the gradient fed in
	inputGradPref  = "pipeline/dinput/"  // + input name: its gradient
	weightGradPref = "pipeline/dparam/"  // + param name: its gradient
	gradSumPref    = "pipeline/gradsum/" // + param name: the step's sum (state)
	freshInput     = "pipeline/fresh"    // bool scalar: the first micro-batch of a step
)

// LossFunc appends a loss to a stage graph: it reads the model output out
// (and usually a labels input it adds to g.Inputs) and returns the scalar
// loss value, the name of the labels input ("" if none) and its dtype.
type LossFunc func(g *graph.Graph, out string, opset int64) (loss, labels string, labelDType graph.DType, err error)

// StageConfig says how to build stage programs.
type StageConfig struct {
	// Backend compiles the programs ("cpu" by default).
	Backend string
	// Seed seeds random ops.
	Seed int64
	// LossOutput is the graph output the last stage minimises: a scalar
	// the graph computes (--loss output:NAME) when Loss is nil, else the
	// model output Loss applies to ("" = the first graph output).
	LossOutput string
	// Loss, when set, appends the loss (cross entropy, MSE, ...).
	Loss LossFunc
	// SplitBackward builds separate input-gradient and weight-gradient
	// programs (for the zero-bubble schedules); otherwise one backward.
	SplitBackward bool
	// Recompute makes the backward passes compute cheap activations again
	// instead of keeping them from the forward pass (--recompute): less
	// memory per micro-batch in flight, a little more time.
	Recompute bool
	// Tuning is passed to every compile of the stage programs
	// (backend.Tuning: the Winograd policy, the memory plan).
	Tuning backend.Tuning
	// AutoCast, when set, rewrites the stage's lowered forward graph (with
	// its loss) for mixed precision before autodiff, at the point where
	// train.Build applies it to the whole model.
	AutoCast func(g *graph.Graph, opset int64) error
	// Rewrite, when set, rewrites the stage graph (with its loss) before
	// autodiff: train.SyncBatchNorm for --sync-batchnorm (syncbn.go).
	Rewrite func(g *graph.Graph, opset int64) error
	// Eval also compiles each stage in inference mode, for
	// Runner.Evaluate (--val-data; eval.go).
	Eval bool
}

// Param is a trainable tensor a stage owns (its own copy).
type Param struct {
	Name  string
	Value *graph.Tensor
}

// StageProgram is one stage compiled: a forward program and a backward
// program (or an input-gradient and a weight-gradient program) fed by the
// gradient of the stage's outputs. Values pass between them through a
// per-micro-batch environment the runner keeps (see Env).
type StageProgram struct {
	// gradSums are the parameters' gradients summed over the micro-batches
	// since ResetGradSums, in Params order: state buffers of the pass that
	// computes them, added to in place by AccumulateGrad nodes placed right
	// after each gradient is final, so that no gradient of one micro-batch
	// outlives its node. On a backend whose state is not host memory,
	// sumsExe's state is read into them after each such pass.
	gradSums []*graph.Tensor
	sumsExe  backend.Stateful
	sumsHost bool
	// freshNext: the next weight-gradient pass starts the sums (sets
	// rather than adds); sumsValid: a pass has written them since.
	freshNext, sumsValid bool

	Index int
	Last  bool
	// Params are the stage's own copies of its parameters.
	Params []*Param
	// Buffers are BatchNormalization running statistics the stage owns.
	Buffers map[string]*graph.Tensor
	// Inputs are the activations received from the previous stage,
	// Outputs those sent to the next one.
	Inputs, Outputs []string
	// DataInputs are batch arrays the stage reads; Labels, on the last
	// stage, the labels input of an appended loss ("" if none).
	DataInputs []string
	Labels     string
	labelDType graph.DType
	// Loss is the last stage's loss value.
	Loss string

	fwd, bwd, bwdInput, bwdWeight *phase
	bufferUpdates                 map[string]string // forward output -> buffer
	// eval is the inference-mode program (StageConfig.Eval, eval.go).
	eval                             *phase
	evalLoss, evalOutput, evalLabels string
	evalLabelDType                   graph.DType
	// sizeOnly: built by keptBytes to be sized, never run (no data).
	sizeOnly bool
}

// phase is one compiled part of a stage program.
type phase struct {
	name    string
	exe     backend.Executable // nil: no nodes
	inputs  []string           // read from the environment (or params)
	outputs []string           // written to the environment
	nodes   int
	sums    bool // adds to the gradient sums (reads freshInput)
}

// Env holds one micro-batch's values of one stage between its passes:
// received activations, data, what the forward pass kept for backward,
// the gradients of the outputs and of the inputs.
type Env map[string]*graph.Tensor

// BuildStage compiles stage s of plan.
func BuildStage(plan *Plan, s int, cfg StageConfig) (*StageProgram, error) {
	if s < 0 || s >= len(plan.Stages) {
		return nil, fmt.Errorf("pipeline: stage %d of %d", s, len(plan.Stages))
	}
	if cfg.Backend == "" {
		cfg.Backend = "cpu"
	}
	be, err := backend.Open(cfg.Backend)
	if err != nil {
		return nil, err
	}
	sg, err := buildStageGraph(plan, s, cfg, be, false)
	if err != nil {
		return nil, err
	}
	sp, g, m := sg.sp, sg.g, plan.model
	fail := func(err error) (*StageProgram, error) {
		return nil, fmt.Errorf("pipeline: stage %d: %w", s, err)
	}
	built, err := compilePhases(be, m, g, sg.phases, sg.phaseOuts, sg.sumState, backend.CompileOptions{Seed: cfg.Seed + int64(s)*7919, Tuning: cfg.Tuning, Repeated: true})
	if err != nil {
		return fail(err)
	}
	for _, ph := range built {
		if ph.sums {
			st, ok := ph.exe.(backend.Stateful)
			if !ok {
				return fail(fmt.Errorf("the %s backend's programs keep no state (the gradient sums need it)", cfg.Backend))
			}
			sp.sumsExe, sp.sumsHost = st, true
			for i, p := range sp.Params {
				if h := st.HostState(gradSumPref + p.Name); h != nil {
					sp.gradSums[i] = h
				} else {
					sp.sumsHost = false
				}
			}
		}
	}
	sp.freshNext = true
	sp.fwd = built[0]
	sp.fwd.name = "forward"
	if cfg.SplitBackward {
		sp.bwdInput, sp.bwdWeight = built[1], built[2]
		sp.bwdInput.name, sp.bwdWeight.name = "input gradient", "weight gradient"
	} else {
		sp.bwd = built[1]
		sp.bwd.name = "backward"
	}
	return sp, nil
}

// stageGraph is a stage's whole training graph before compilation: the
// program it will be (parameters, inputs, outputs), the graph, its nodes
// by pass and each pass's outputs, and the gradient sums' state.
type stageGraph struct {
	sp        *StageProgram
	g         *graph.Graph
	phases    [][]int
	phaseOuts [][]string
	sumState  []backend.StateSpec
}

// buildStageGraph builds stage s's training graph: its forward nodes, the
// objective, the gradients, recomputation and the split into passes. be
// compiles the evaluation program when cfg.Eval is set (else it may be nil).
// With sizeOnly the graph is only for sizing (keptBytes): parameters,
// buffers and gradient sums are tensors of shape without data and the
// constant initializers the model's own, so that sizing every stage of a
// large model copies none of its weights.
func buildStageGraph(plan *Plan, s int, cfg StageConfig, be backend.Backend, sizeOnly bool) (*stageGraph, error) {
	var err error
	st := plan.Stages[s]
	m := plan.model
	opset := m.Opset()
	src := plan.g
	sp := &StageProgram{Index: s, Last: s == len(plan.Stages)-1, Buffers: map[string]*graph.Tensor{}, bufferUpdates: map[string]string{}, sizeOnly: sizeOnly}
	copyOf := func(t *graph.Tensor) *graph.Tensor {
		if sizeOnly {
			return &graph.Tensor{DType: t.DType, Shape: append([]int(nil), t.Shape...)}
		}
		return t.Clone()
	}
	fail := func(err error) (*stageGraph, error) {
		return nil, fmt.Errorf("pipeline: stage %d: %w", s, err)
	}

	g := graph.NewGraph(fmt.Sprintf("stage%d", s))
	for _, n := range st.nodes {
		cn := *n
		cn.Inputs = append([]string{}, n.Inputs...)
		cn.Outputs = append([]string{}, n.Outputs...)
		cn.Attrs = map[string]*graph.Attr{}
		for k, v := range n.Attrs {
			cn.Attrs[k] = detachAttr(v)
		}
		g.Nodes = append(g.Nodes, &cn)
	}
	types := plan.types
	if cfg.AutoCast != nil {
		if types, err = plan.castTypesFor(cfg.AutoCast); err != nil {
			return fail(err)
		}
	}
	dtypeOf := func(v string) graph.DType {
		if t := types[v]; t != nil {
			return t.DType
		}
		return graph.Undefined
	}
	addInput := func(name string, dt graph.DType) {
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: &graph.Type{Kind: graph.KindTensor, DType: dt}})
	}
	for _, ct := range st.Inputs {
		sp.Inputs = append(sp.Inputs, ct.Name)
		addInput(ct.Name, dtypeOf(ct.Name))
	}
	for _, ct := range st.Outputs {
		sp.Outputs = append(sp.Outputs, ct.Name)
	}
	sp.DataInputs = append(sp.DataInputs, st.DataInputs...)
	for _, name := range st.DataInputs {
		addInput(name, dtypeOf(name))
	}
	// Parameters (own copies), buffers and constant initializers.
	isParam := map[string]bool{}
	for _, name := range st.Params {
		isParam[name] = true
		v := copyOf(src.Initializers[name])
		sp.Params = append(sp.Params, &Param{Name: name, Value: v})
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: typeOf(v)})
	}
	reads := map[string]bool{}
	for _, n := range g.Nodes {
		for _, in := range nodeReads(n) {
			reads[in] = true
		}
	}
	for _, n := range g.Nodes {
		if n.OpType != "BatchNormalization" {
			continue
		}
		for i, in := range []int{3, 4} {
			name := n.Input(in)
			t, ok := src.Initializers[name]
			if !ok {
				continue
			}
			if _, dup := sp.Buffers[name]; !dup {
				sp.Buffers[name] = copyOf(t)
				g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: typeOf(t)})
			}
			n.SetAttr(graph.IntAttr(graph.UnbiasedVarAttr, 1))
			if n.AttrInt("training_mode", 0) == 1 && len(n.Outputs) > i+1 && n.Outputs[i+1] != "" {
				sp.bufferUpdates[n.Outputs[i+1]] = name
			}
		}
	}
	for name := range reads {
		if t, ok := src.Initializers[name]; ok && !isParam[name] {
			if _, isBuf := sp.Buffers[name]; !isBuf {
				if sizeOnly {
					g.Initializers[name] = t // read, never kept
				} else {
					g.Initializers[name] = t.Clone() // not a view of the model file's bytes
				}
			}
		}
	}
	for _, n := range g.Nodes { // Dropout masks, reused by backward
		if n.OpType == "Dropout" {
			if len(n.Outputs) < 2 {
				n.Outputs = append(n.Outputs, "")
			}
			if n.Outputs[1] == "" {
				n.Outputs[1] = n.Label() + "/pipeline_mask"
			}
		}
	}

	if cfg.Eval && be != nil {
		if err := sp.buildEval(be, m, g, cfg, opset, cfg.Seed+int64(s)*7919+7); err != nil { // eval.go
			return fail(err)
		}
	}
	// The objective: the loss on the last stage, else the sum over the
	// outputs of <output, gradient fed in>, whose gradient with respect to
	// each output is exactly the gradient fed in.
	var y, seed string
	var fwdOut []string // forward outputs besides the activations sent on
	if sp.Last {
		out := cfg.LossOutput
		if out == "" {
			if len(src.Outputs) == 0 {
				return fail(fmt.Errorf("the model has no outputs"))
			}
			out = src.Outputs[0].Name
		}
		if !producesOrReceives(g, out) {
			return fail(fmt.Errorf("the loss output %q is not computed by the last stage", out))
		}
		if cfg.Loss != nil {
			loss, labels, ldt, err := cfg.Loss(g, out, opset)
			if err != nil {
				return fail(err)
			}
			y, sp.Labels, sp.labelDType = loss, labels, ldt
		} else {
			y = out
		}
		sp.Loss = y
		fwdOut = append(fwdOut, y)
		addInput(lossScaleInput, graph.Float32)
		seed = lossScaleInput
	}
	if cfg.Rewrite != nil {
		if err := cfg.Rewrite(g, opset); err != nil {
			return fail(err)
		}
	}
	if err := graph.LowerForAutodiff(g, opset); err != nil {
		return fail(err)
	}
	if cfg.AutoCast != nil {
		if err := cfg.AutoCast(g, opset); err != nil {
			return fail(err)
		}
	}
	forwardNodes := len(g.Nodes)
	if !sp.Last {
		b := graph.NewBuilder("pipeline/objective", opset)
		var terms []string
		for _, o := range sp.Outputs {
			if !dtypeOf(o).IsFloat() {
				continue
			}
			gin := gradOfPrefix + o
			addInput(gin, dtypeOf(o))
			terms = append(terms, b.Op("ReduceSum", []string{b.Op("Mul", []string{o, gin})}, graph.IntAttr("keepdims", 0)))
		}
		if len(terms) == 0 {
			return fail(fmt.Errorf("no floating-point tensor crosses to the next stage, so no gradient can flow back"))
		}
		y = terms[0]
		for _, t := range terms[1:] {
			y = b.Op("Add", []string{y, t})
		}
		g.Nodes = append(g.Nodes, b.Nodes...)
		for k, v := range b.Consts {
			g.Initializers[k] = v
		}
	}
	var floatIns []string
	for _, in := range sp.Inputs {
		if dtypeOf(in).IsFloat() {
			floatIns = append(floatIns, in)
		}
	}
	xs := append(append([]string{}, floatIns...), st.Params...)
	grads, err := graph.Gradients(g, y, xs, seed, opset)
	if err != nil {
		return fail(err)
	}
	var inGrads, wGrads []string
	for i, gname := range grads {
		var out string
		if i < len(floatIns) {
			out = inputGradPref + xs[i]
			inGrads = append(inGrads, out)
		} else {
			out = weightGradPref + xs[i]
			wGrads = append(wGrads, out)
		}
		n := &graph.Node{Name: out, OpType: "Identity", Inputs: []string{gname}, Outputs: []string{out}}
		if cfg.AutoCast != nil && i < len(floatIns) {
			// Under mixed precision a gradient's runtime type can differ
			// from its inferred one (a float32 tensor added to a bfloat16
			// product as a bias gets a bfloat16 gradient); what crosses
			// back has the type of the tensor it belongs to.
			n.OpType, n.Attrs = "Cast", map[string]*graph.Attr{"to": graph.IntAttr("to", int64(dtypeOf(xs[i])))}
		}
		g.Nodes = append(g.Nodes, n)
	}
	upd := make([]string, 0, len(sp.bufferUpdates))
	for o := range sp.bufferUpdates {
		upd = append(upd, o)
	}
	sort.Strings(upd)
	fwdOut = append(fwdOut, upd...)

	// Backward reads of a value's shape or dtype only stop keeping it; with
	// Recompute, cheap activations are computed again in the backward
	// passes instead of being kept from the forward pass (graph.Recompute
	// leaves the forward nodes first and puts each copy before its reader).
	g.Outputs = nil
	for _, v := range append(append(append(append([]string{}, sp.Outputs...), fwdOut...), inGrads...), wGrads...) {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: v})
	}
	rs, err := graph.Recompute(g, forwardNodes, opset, graph.RecomputeOptions{ReadsOnly: !cfg.Recompute})
	if err != nil {
		return fail(err)
	}
	forwardNodes += rs.Hoisted // CastLikes of constants move into the forward pass
	forwardNodes = fuseWeightTransposes(g, forwardNodes)
	sumState := sp.addGradSums(g, forwardNodes)

	// Which nodes are needed, and in which pass.
	producer := map[string]int{}
	for i, n := range g.Nodes {
		for _, o := range n.Outputs {
			if o != "" {
				producer[o] = i
			}
		}
	}
	ancestors := func(targets []string, limit func(int) bool) map[int]bool {
		seen := map[int]bool{}
		stack := append([]string{}, targets...)
		visited := map[string]bool{}
		for len(stack) > 0 {
			v := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if visited[v] {
				continue
			}
			visited[v] = true
			i, ok := producer[v]
			if !ok || !limit(i) || seen[i] {
				continue
			}
			seen[i] = true
			stack = append(stack, nodeReads(g.Nodes[i])...)
		}
		return seen
	}
	all := func(int) bool { return true }
	isFwd := func(i int) bool { return i < forwardNodes }
	isBwd := func(i int) bool { return i >= forwardNodes }
	fwdTargets := append(append([]string{}, sp.Outputs...), fwdOut...)
	fwdSet := ancestors(fwdTargets, isFwd)
	for i := range ancestors(append(append([]string{}, inGrads...), wGrads...), all) {
		if i < forwardNodes {
			fwdSet[i] = true
		}
	}
	var phases [][]int
	var phaseOuts [][]string
	pick := func(set map[int]bool) []int {
		var out []int
		for i := range g.Nodes {
			if set[i] {
				out = append(out, i)
			}
		}
		return out
	}
	phases = append(phases, pick(fwdSet))
	phaseOuts = append(phaseOuts, fwdTargets)
	if cfg.SplitBackward {
		bi := ancestors(inGrads, isBwd)
		bw := ancestors(wGrads, isBwd)
		for i := range bi {
			delete(bw, i)
		}
		phases = append(phases, pick(bi), pick(bw))
		phaseOuts = append(phaseOuts, inGrads, wGrads)
	} else {
		phases = append(phases, pick(ancestors(append(append([]string{}, inGrads...), wGrads...), isBwd)))
		phaseOuts = append(phaseOuts, append(append([]string{}, inGrads...), wGrads...))
	}
	return &stageGraph{sp: sp, g: g, phases: phases, phaseOuts: phaseOuts, sumState: sumState}, nil
}

// addGradSums turns the Identity node naming each parameter's gradient
// (weightGradPref + name) into an AccumulateGrad over the parameter's
// gradient-sum state, moved right after the node that makes the
// gradient, so that the gradient's buffer is free for the rest of the
// pass (as train's GradSums does). It returns the sums' state specs.
func (sp *StageProgram) addGradSums(g *graph.Graph, forwardNodes int) []backend.StateSpec {
	byOut := map[string]int{}
	for i, n := range g.Nodes {
		if len(n.Outputs) == 1 {
			byOut[n.Outputs[0]] = i
		}
	}
	sp.gradSums = make([]*graph.Tensor, len(sp.Params))
	acc := map[int]bool{}
	var state []backend.StateSpec
	g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: freshInput, Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Bool, HasShape: true, Shape: []graph.Dim{}}})
	for i, p := range sp.Params {
		out := weightGradPref + p.Name
		j, ok := byOut[out]
		if !ok || g.Nodes[j].OpType != "Identity" {
			continue
		}
		sum := gradSumPref + p.Name
		if sp.sizeOnly {
			sp.gradSums[i] = &graph.Tensor{DType: graph.Float32, Shape: append([]int(nil), p.Value.Shape...)}
		} else {
			sp.gradSums[i] = graph.Zeros(graph.Float32, p.Value.Shape...)
		}
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: sum, Type: typeOf(sp.gradSums[i])})
		n := g.Nodes[j]
		g.Nodes[j] = &graph.Node{Name: "pipeline/accumulate/" + p.Name, OpType: graph.AccumulateGradOp, Domain: graph.InternalDomain,
			Inputs:  []string{freshInput, sum, n.Inputs[0]},
			Outputs: []string{out},
			Attrs:   map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}}
		acc[j] = true
		state = append(state, backend.StateSpec{Name: sum, Init: sp.gradSums[i], UpdatedBy: out})
	}
	// Move each AccumulateGrad right after its gradient's producer (never
	// into the forward nodes).
	producer := map[string]int{}
	for i, n := range g.Nodes {
		if acc[i] {
			continue
		}
		for _, o := range n.Outputs {
			if o != "" {
				producer[o] = i
			}
		}
	}
	after := map[int][]*graph.Node{}
	var late []*graph.Node
	for i, n := range g.Nodes {
		if !acc[i] {
			continue
		}
		if j, ok := producer[n.Inputs[2]]; ok && max(j, forwardNodes-1) >= 0 {
			pos := max(j, forwardNodes-1)
			after[pos] = append(after[pos], n)
		} else {
			late = append(late, n)
		}
	}
	nodes := make([]*graph.Node, 0, len(g.Nodes))
	for i, n := range g.Nodes {
		if !acc[i] {
			nodes = append(nodes, n)
		}
		nodes = append(nodes, after[i]...)
	}
	g.Nodes = append(nodes, late...)
	return state
}

// fuseWeightTransposes runs graph.FuseWeightTranspose on the whole stage
// graph before it is split into passes, and returns the new number of
// forward nodes. Compiled pass by pass, a Linear layer's transposed weight
// that the forward pass makes and a backward pass reads would be an output
// of the forward pass, kept per micro-batch in flight (as large as the
// weight itself), and no pass could fuse it away; on the whole graph every
// reader reads the weight untransposed, as in one process.
func fuseWeightTransposes(g *graph.Graph, forwardNodes int) int {
	sentinel := &graph.Node{Name: "pipeline/backward_starts", OpType: "Identity"}
	g.Nodes = append(g.Nodes[:forwardNodes], append([]*graph.Node{sentinel}, g.Nodes[forwardNodes:]...)...)
	graph.FuseWeightTranspose(g)
	for i, n := range g.Nodes {
		if n == sentinel {
			g.Nodes = append(g.Nodes[:i], g.Nodes[i+1:]...)
			return i
		}
	}
	return forwardNodes // not reached: the fusion keeps unrelated nodes
}

func producesOrReceives(g *graph.Graph, v string) bool {
	for _, in := range g.Inputs {
		if in.Name == v {
			return true
		}
	}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			if o == v {
				return true
			}
		}
	}
	return false
}

// handedOn is, per pass, the values it makes that a later pass reads:
// what it must hand on (for the forward pass, what a micro-batch keeps
// until its backward).
func handedOn(g *graph.Graph, phases [][]int) []map[string]bool {
	phaseOf := map[string]int{}
	for k, idx := range phases {
		for _, i := range idx {
			for _, o := range g.Nodes[i].Outputs {
				if o != "" {
					phaseOf[o] = k
				}
			}
		}
	}
	later := make([]map[string]bool, len(phases))
	for k := range phases {
		later[k] = map[string]bool{}
	}
	for k, idx := range phases {
		for _, i := range idx {
			for _, in := range nodeReads(g.Nodes[i]) {
				if p, ok := phaseOf[in]; ok && p < k {
					later[p][in] = true
				}
			}
		}
	}
	return later
}

// compilePhases compiles each node set of g as its own program. A phase
// reads what earlier phases (or the stage's inputs) made and writes its
// own targets and whatever later phases read.
func compilePhases(be backend.Backend, m *graph.Model, g *graph.Graph, phases [][]int, targets [][]string, state []backend.StateSpec, opts backend.CompileOptions) ([]*phase, error) {
	seed := opts.Seed
	stateOf, updates := map[string]backend.StateSpec{}, map[string]bool{}
	for _, st := range state {
		stateOf[st.Name] = st
		updates[st.UpdatedBy] = true
	}
	readLater := handedOn(g, phases)
	types := map[string]*graph.Type{}
	for _, in := range g.Inputs {
		types[in.Name] = in.Type
	}
	out := make([]*phase, len(phases))
	for k, idx := range phases {
		ph := &phase{nodes: len(idx)}
		out[k] = ph
		if len(idx) == 0 {
			continue
		}
		pg := graph.NewGraph(g.Name)
		produced := map[string]bool{}
		for _, i := range idx {
			pg.Nodes = append(pg.Nodes, g.Nodes[i])
			for _, o := range g.Nodes[i].Outputs {
				produced[o] = true
			}
		}
		seen := map[string]bool{}
		var phState []backend.StateSpec
		for _, i := range idx {
			for _, in := range nodeReads(g.Nodes[i]) {
				if in == "" || produced[in] || seen[in] {
					continue
				}
				seen[in] = true
				if t, ok := g.Initializers[in]; ok {
					pg.Initializers[in] = t
					continue
				}
				if st, ok := stateOf[in]; ok {
					phState = append(phState, st)
					pg.Inputs = append(pg.Inputs, &graph.ValueInfo{Name: in, Type: types[in]})
					continue
				}
				if in == freshInput {
					ph.sums = true
				}
				pg.Inputs = append(pg.Inputs, &graph.ValueInfo{Name: in, Type: types[in]})
				ph.inputs = append(ph.inputs, in)
			}
		}
		outSeen := map[string]bool{}
		addOut := func(v string) {
			if produced[v] && !outSeen[v] {
				outSeen[v] = true
				pg.Outputs = append(pg.Outputs, &graph.ValueInfo{Name: v})
				if !updates[v] { // a state update stays in its buffer
					ph.outputs = append(ph.outputs, v)
				}
			}
		}
		for _, v := range targets[k] {
			addOut(v)
		}
		later := make([]string, 0, len(readLater[k]))
		for v := range readLater[k] {
			later = append(later, v)
		}
		sort.Strings(later)
		for _, v := range later {
			addOut(v)
		}
		if len(pg.Outputs) == 0 {
			out[k] = &phase{}
			continue
		}
		ph.name = fmt.Sprintf("pass %d", k)
		pm := &graph.Model{IRVersion: m.IRVersion, Opsets: m.Opsets, Graph: pg, Functions: m.Functions}
		popts := opts
		popts.Seed = seed + int64(k)
		popts.State = phState
		exe, err := be.Compile(pm, popts)
		if err != nil {
			return nil, fmt.Errorf("compiling pass %d: %w", k, err)
		}
		ph.exe = exe
	}
	return out, nil
}

func typeOf(t *graph.Tensor) *graph.Type {
	return shapeType(t.DType, t.Shape)
}

// run feeds a phase from env and the stage's params and buffers, and
// copies its outputs into env (the backend reuses its buffers between
// runs).
func (sp *StageProgram) run(ctx context.Context, ph *phase, env Env) error {
	if ph == nil || ph.exe == nil {
		return nil
	}
	feeds := make(map[string]*graph.Tensor, len(ph.inputs))
	for _, in := range ph.inputs {
		if in == freshInput {
			continue // below
		}
		t, ok := env[in]
		if !ok {
			if p := sp.param(in); p != nil {
				t = p.Value
			} else if b, ok := sp.Buffers[in]; ok {
				t = b
			} else {
				return fmt.Errorf("pipeline: stage %d: %s pass: no value for %q", sp.Index, ph.name, in)
			}
		}
		feeds[in] = t
	}
	if ph.sums {
		feeds[freshInput] = graph.FromBool([]bool{sp.freshNext})
	}
	out, err := ph.exe.Run(ctx, feeds)
	if err != nil {
		return fmt.Errorf("pipeline: stage %d: %s pass: %w", sp.Index, ph.name, err)
	}
	if ph.sums {
		sp.freshNext, sp.sumsValid = false, true
		if !sp.sumsHost {
			for i, p := range sp.Params {
				if sp.gradSums[i] != nil {
					if err := sp.sumsExe.ReadState(gradSumPref+p.Name, sp.gradSums[i]); err != nil {
						return fmt.Errorf("pipeline: stage %d: reading the gradient sum of %s: %w", sp.Index, p.Name, err)
					}
				}
			}
		}
	}
	for _, o := range ph.outputs {
		t := out[o]
		if t == nil {
			return fmt.Errorf("pipeline: stage %d: %s pass produced no %q", sp.Index, ph.name, o)
		}
		env[o] = t.Clone()
	}
	return nil
}

// ResetGradSums makes the next weight-gradient pass start the parameters'
// gradient sums afresh (the first micro-batch of a step).
func (sp *StageProgram) ResetGradSums() { sp.freshNext, sp.sumsValid = true, false }

func (sp *StageProgram) param(name string) *Param {
	for _, p := range sp.Params {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Forward runs the forward pass of one micro-batch: env holds the
// received activations and the batch arrays the stage reads (and, on the
// last stage, the labels under Labels); afterwards it also holds what the
// backward passes need, the outputs to send, and the loss.
func (sp *StageProgram) Forward(ctx context.Context, env Env, lossScale float32) error {
	if sp.Last {
		env[lossScaleInput] = graph.FromFloat32([]float32{lossScale})
		if sp.Labels != "" {
			if l, ok := env[sp.Labels]; ok && l.DType != sp.labelDType {
				c, err := castTensor(l, sp.labelDType)
				if err != nil {
					return fmt.Errorf("pipeline: stage %d: labels: %w", sp.Index, err)
				}
				env[sp.Labels] = c
			}
		}
	}
	if err := sp.run(ctx, sp.fwd, env); err != nil {
		return err
	}
	for o, name := range sp.bufferUpdates {
		if t := env[o]; t != nil {
			copy(sp.Buffers[name].Float32s(), t.Float32s())
		}
	}
	return nil
}

// SetOutputGrad stores the gradient of output o received from the next
// stage.
func (sp *StageProgram) SetOutputGrad(env Env, o string, g *graph.Tensor) {
	env[gradOfPrefix+o] = g
}

// OutputGrad is the gradient of output o the stage expects (its env key).
func OutputGradKey(o string) string { return gradOfPrefix + o }

// InputGrad is the computed gradient of input in (nil if not computed).
func (sp *StageProgram) InputGrad(env Env, in string) *graph.Tensor { return env[inputGradPref+in] }

// ParamGrad is parameter name's gradient summed over the micro-batches
// whose weight-gradient pass ran since ResetGradSums (nil before the
// first). The tensor is the sum's buffer itself: the next pass adds to it.
func (sp *StageProgram) ParamGrad(name string) *graph.Tensor {
	if !sp.sumsValid {
		return nil
	}
	for i, p := range sp.Params {
		if p.Name == name {
			return sp.gradSums[i]
		}
	}
	return nil
}

// GradSums are the buffers ParamGrad returns, in Params order (nil for a
// parameter without a gradient).
func (sp *StageProgram) GradSums() []*graph.Tensor { return sp.gradSums }

// Backward runs the whole backward pass (input and weight gradients).
func (sp *StageProgram) Backward(ctx context.Context, env Env) error {
	if sp.bwd == nil {
		if err := sp.BackwardInput(ctx, env); err != nil {
			return err
		}
		return sp.BackwardWeight(ctx, env)
	}
	return sp.run(ctx, sp.bwd, env)
}

// BackwardInput runs the input-gradient pass (split programs only; with
// one backward program it runs it whole).
func (sp *StageProgram) BackwardInput(ctx context.Context, env Env) error {
	if sp.bwdInput == nil {
		return sp.run(ctx, sp.bwd, env)
	}
	return sp.run(ctx, sp.bwdInput, env)
}

// BackwardWeight runs the weight-gradient pass (a no-op with one backward
// program, which computed them in BackwardInput).
func (sp *StageProgram) BackwardWeight(ctx context.Context, env Env) error {
	if sp.bwdWeight == nil {
		return nil
	}
	return sp.run(ctx, sp.bwdWeight, env)
}

func castTensor(t *graph.Tensor, d graph.DType) (*graph.Tensor, error) {
	if d == graph.Undefined {
		return t, nil
	}
	out, err := graph.NewTensor(d, t.Shape)
	if err != nil {
		return nil, err
	}
	for i := 0; i < t.Size(); i++ {
		if d.IsInt() {
			switch s := out.Data.(type) {
			case []int64:
				s[i] = t.Int(i)
			case []int32:
				s[i] = int32(t.Int(i))
			default:
				return nil, fmt.Errorf("cannot convert %v labels to %v", t.DType, d)
			}
		} else {
			out.SetFloat(i, t.Float(i))
		}
	}
	return out, nil
}

// PassInfo describes one compiled pass of a stage program.
type PassInfo struct {
	Name string
	// Nodes is the number of graph nodes the pass runs (after lowering).
	Nodes int
	// Inputs and Outputs are the values it reads and writes.
	Inputs, Outputs []string
}

// Passes lists the stage's passes: forward, then backward or input
// gradient and weight gradient.
func (sp *StageProgram) Passes() []PassInfo {
	var out []PassInfo
	for _, ph := range []*phase{sp.fwd, sp.bwd, sp.bwdInput, sp.bwdWeight} {
		if ph == nil {
			continue
		}
		out = append(out, PassInfo{Name: ph.name, Nodes: ph.nodes, Inputs: ph.inputs, Outputs: ph.outputs})
	}
	return out
}

// detachAttr copies an attribute whose tensor may be a view of the model
// file's bytes (the importer does not copy), so that a stage keeps only
// what it uses alive.
func detachAttr(a *graph.Attr) *graph.Attr {
	if a == nil || a.T == nil {
		return a
	}
	c := *a
	c.T = a.T.Clone()
	return &c
}
