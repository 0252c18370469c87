package pipeline

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
)

// ErrPartition is wrapped by errors about a model that cannot be cut as asked.
var ErrPartition = errors.New("cannot partition the model")

// PartitionOptions says how to cut a model.
type PartitionOptions struct {
	// Stages is the number of stages (at least 1). With SplitAt it may be
	// 0 (then len(SplitAt)+1) or must equal len(SplitAt)+1.
	Stages int
	// SplitAt names where stages begin: a node name (the stage starts with
	// that node) or an initializer name (the stage starts with the first
	// node that reads it). Empty means automatic cuts.
	SplitAt []string
	// InputShapes binds the graph inputs' shapes; a missing input or a
	// symbolic dimension takes BatchSize for its first axis and 1 after it.
	InputShapes map[string][]int
	// BatchSize is the micro-batch size (default 1).
	BatchSize int
	// StageMemory, when positive, bounds each stage's estimated memory in
	// bytes; the partitioner fails when no cut satisfies it.
	StageMemory int64
	// OptimizerSlots is the number of optimizer state tensors per
	// parameter (0 for SGD without momentum, 1 with, 2 for Adam/AdamW;
	// default 2).
	OptimizerSlots int
	// NodeSeconds, when set, replaces the cost model: the measured time
	// of one micro-batch's forward and backward through each node, by node
	// label (ProfilePartition measures it; missing nodes use the model).
	NodeSeconds map[string]float64
	// InFlight is the number of micro-batches whose activations stage s
	// holds at once, for the memory estimate; nil assumes 1F1B (S-s).
	InFlight func(stage, stages int) int
	// TrainOnly, when set, freezes every parameter whose name does not
	// match (--train-only; --freeze becomes such a pattern): a frozen
	// initializer is a constant of the stages that read it, with no
	// gradient and no optimizer state, as in train.ProgramConfig.
	TrainOnly *regexp.Regexp
}

// Cost model of the estimate (a 2-core AVX2 machine, fp32): a node takes
// max(FLOPs/flopRate, bytes moved/byteRate); training costs three forward
// passes' worth (forward, input gradient, weight gradient); a tensor that
// crosses a cut costs its bytes at crossRate plus crossLatency.
const (
	flopRate     = 40e9
	byteRate     = 8e9
	crossRate    = 4e9
	crossLatency = 20e-6
)

// CrossTensor is a tensor that crosses a cut.
type CrossTensor struct {
	Name  string      `json:"name"`
	DType graph.DType `json:"-"`
	Type  string      `json:"type"`
	Shape []int       `json:"shape"`
	Bytes int64       `json:"bytes"`
}

// Stage is one piece of the cut model.
type Stage struct {
	Index int `json:"stage"`
	// Nodes are the names of the stage's nodes in order (replicated
	// Constant nodes are not listed).
	Nodes []string `json:"nodes"`
	// Params are the trainable initializers the stage reads.
	Params []string `json:"params"`
	// DataInputs are the graph inputs (batch data) the stage reads.
	DataInputs []string `json:"data_inputs,omitempty"`
	// Inputs cross the cut before the stage, Outputs the cut after it.
	Inputs  []CrossTensor `json:"inputs"`
	Outputs []CrossTensor `json:"outputs"`
	// FLOPs of one micro-batch's forward pass.
	FLOPs int64 `json:"flops"`
	// EstSeconds is the estimated forward+backward time of one micro-batch.
	EstSeconds float64 `json:"est_seconds"`
	// ParamBytes, ActivationBytes (one micro-batch) and EstMemoryBytes
	// (parameters, gradients, optimizer state, the weights TrainOnly
	// freezes that the stage reads, the activations of the micro-batches
	// in flight, and one micro-batch's activations more for the transient
	// memory of the pass that runs beside them).
	ParamBytes      int64 `json:"param_bytes"`
	ActivationBytes int64 `json:"activation_bytes"`
	// PassBytes is the most one pass holds at once beside the kept
	// activations (its memory plan's peak), once Plan.RefineMemory has
	// sized it from the stage's training graph; 0 before.
	PassBytes      int64 `json:"pass_bytes,omitempty"`
	EstMemoryBytes int64 `json:"est_memory_bytes"`

	nodes []*graph.Node // with replicated constants, in graph order
}

// Plan is a model cut into stages.
type Plan struct {
	Stages []*Stage `json:"stages"`
	// Shared lists parameters read by more than one stage (tied weights):
	// every such stage holds a copy, and their gradients are summed over
	// those stages before the optimizer steps.
	Shared map[string][]int `json:"shared,omitempty"`

	model *graph.Model
	g     *graph.Graph // topologically sorted copy
	types map[string]*graph.Type
	known map[string]*graph.Type // the data inputs' types, as partitioned
	opts  PartitionOptions
	cast  castTypes // autocast.go
}

// Model is the model the plan cuts.
func (p *Plan) Model() *graph.Model { return p.model }

// NodeSeconds is the measured per-node cost the plan was cut on (nil when
// it was cut on the cost model).
func (p *Plan) NodeSeconds() map[string]float64 { return p.opts.NodeSeconds }

// Partition cuts m into stages.
func Partition(m *graph.Model, opts PartitionOptions) (*Plan, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 1
	}
	if opts.OptimizerSlots == 0 {
		opts.OptimizerSlots = 2
	}
	if opts.OptimizerSlots < 0 {
		opts.OptimizerSlots = 0
	}
	if opts.Stages == 0 && len(opts.SplitAt) > 0 {
		opts.Stages = len(opts.SplitAt) + 1
	}
	if opts.Stages < 1 {
		return nil, fmt.Errorf("pipeline: %w: %d stages (want at least 1)", ErrPartition, opts.Stages)
	}
	if len(opts.SplitAt) > 0 && opts.Stages != len(opts.SplitAt)+1 {
		return nil, fmt.Errorf("pipeline: %w: --split-at names %d cuts, which make %d stages, not %d", ErrPartition, len(opts.SplitAt), len(opts.SplitAt)+1, opts.Stages)
	}
	g := cloneGraph(m.Graph)
	if err := graph.TopoSort(g); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	p := &Plan{model: m, g: g, opts: opts, Shared: map[string][]int{}}
	known := map[string]*graph.Type{}
	for _, in := range g.Inputs {
		if _, isInit := g.Initializers[in.Name]; isInit {
			continue
		}
		shape, ok := opts.InputShapes[in.Name]
		if !ok {
			if in.Type == nil || !in.Type.HasShape {
				return nil, fmt.Errorf("pipeline: %w: graph input %q has no shape; give it in InputShapes", ErrPartition, in.Name)
			}
			shape = boundShape(in.Type, opts.BatchSize)
		}
		dt := graph.Float32
		if in.Type != nil {
			dt = in.Type.DType
		}
		known[in.Name] = shapeType(dt, shape)
	}
	types, err := graph.InferShapes(g, m.Opset(), known)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	p.types, p.known = types, known

	// The nodes a cut may fall between: all but Constant nodes, which
	// every stage that reads them gets a copy of.
	var items []*graph.Node
	for _, n := range g.Nodes {
		if !isConstantNode(n) {
			items = append(items, n)
		}
	}
	if len(items) < opts.Stages {
		return nil, fmt.Errorf("pipeline: %w: %d stages for %d nodes", ErrPartition, opts.Stages, len(items))
	}
	constOut := map[string]bool{}
	for _, n := range g.Nodes {
		if isConstantNode(n) {
			for _, o := range n.Outputs {
				constOut[o] = true
			}
		}
	}
	params := trainableParams(g, opts.TrainOnly)
	// frozen: the weights TrainOnly leaves out, constants of their stages
	// that each stage still holds once (no gradient, no optimizer state)
	frozen := map[string]bool{}
	weights := params // trained or frozen: their transposes are no activations
	if opts.TrainOnly != nil {
		weights = trainableParams(g, nil)
		for name := range weights {
			if !params[name] {
				frozen[name] = true
			}
		}
	}
	// Per-item cost and the tensors crossing each cut position k (between
	// items[k-1] and items[k]).
	n := len(items)
	cost := make([]float64, n+1) // prefix sums of estimated seconds
	flops := make([]int64, n+1)
	act := make([]int64, n+1)
	pos := map[string]int{} // value -> producing item
	lastUse := map[string]int{}
	for i, nd := range items {
		f, bytes := p.nodeCost(nd)
		flops[i+1] = flops[i] + f
		c := 3 * math.Max(float64(f)/flopRate, float64(bytes)/byteRate)
		if t, ok := opts.NodeSeconds[nd.Label()]; ok {
			c = t
		}
		cost[i+1] = cost[i] + c
		var out int64
		for _, o := range nd.Outputs {
			if o != "" {
				pos[o] = i
				out += p.bytesOf(o)
			}
		}
		if isWeightTranspose(nd, weights) {
			out = 0 // fused away in the stage programs (fuseWeightTransposes), or a frozen weight's folded once: never kept per micro-batch
		}
		act[i+1] = act[i] + out
		for _, in := range nd.Inputs {
			lastUse[in] = i
		}
		for _, sg := range nd.Subgraphs() {
			for _, s := range sg.OuterScopeNames() {
				lastUse[s] = i
			}
		}
	}
	for _, o := range g.Outputs {
		lastUse[o.Name] = n // graph outputs live to the end
	}
	// crossing(k): values produced before k, used at k or later.
	crossing := func(k int) []string {
		var out []string
		for v, i := range pos {
			if i < k && lastUse[v] >= k && !constOut[v] {
				out = append(out, v)
			}
		}
		sort.Slice(out, func(a, b int) bool {
			if pos[out[a]] != pos[out[b]] {
				return pos[out[a]] < pos[out[b]]
			}
			return out[a] < out[b]
		})
		return out
	}
	crossCost := make([]float64, n+1)
	// A balanced cut never separates a weight's transpose from its
	// readers: the transposed copy would cross (as large as the weight,
	// each micro-batch, and its gradient back), where on one side the
	// stage program reads the weight itself.
	splitsTranspose := make([]bool, n+1)
	for k := 1; k < n; k++ {
		for _, v := range crossing(k) {
			crossCost[k] += crossLatency + float64(p.bytesOf(v))/crossRate
			if isWeightTranspose(items[pos[v]], weights) {
				splitsTranspose[k] = true
			}
		}
	}
	bytesRead := func(a, b int, set map[string]bool) int64 { // the initializers of set read by items[a:b]
		seen := map[string]bool{}
		var tot int64
		for _, nd := range items[a:b] {
			for _, in := range nodeReads(nd) {
				if set[in] && !seen[in] {
					seen[in] = true
					tot += int64(g.Initializers[in].Size()) * 4
				}
			}
		}
		return tot
	}
	paramBytes := func(a, b int) int64 { return bytesRead(a, b, params) }
	frozenBytes := func(a, b int) int64 { return bytesRead(a, b, frozen) }
	S := opts.Stages
	inflight := func(s int) int {
		if opts.InFlight != nil {
			return opts.InFlight(s, S)
		}
		return S - s
	}
	// first-reader prefix sums of parameter (and frozen weight) bytes, for
	// the search
	paramPrefix := make([]int64, n+1)
	frozenPrefix := make([]int64, n+1)
	seenParam := map[string]bool{}
	for i, nd := range items {
		paramPrefix[i+1], frozenPrefix[i+1] = paramPrefix[i], frozenPrefix[i]
		for _, in := range nodeReads(nd) {
			if (params[in] || frozen[in]) && !seenParam[in] {
				seenParam[in] = true
				if params[in] {
					paramPrefix[i+1] += int64(g.Initializers[in].Size()) * 4
				} else {
					frozenPrefix[i+1] += int64(g.Initializers[in].Size()) * 4
				}
			}
		}
	}
	memWith := func(s, a, b int, pb, fb int64) int64 {
		return pb*int64(2+opts.OptimizerSlots) + fb + (act[b]-act[a])*int64(inflight(s)+1)
	}
	memOf := func(s, a, b int) int64 { return memWith(s, a, b, paramBytes(a, b), frozenBytes(a, b)) }
	var cuts []int // cuts[s] = first item of stage s+1
	if len(opts.SplitAt) > 0 {
		cuts, err = p.manualCuts(items, opts.SplitAt)
		if err != nil {
			return nil, err
		}
	} else {
		balance := func(keepTransposes bool) ([]int, error) {
			return balancedCuts(n, S, func(s, a, b int) (float64, bool) {
				t := cost[b] - cost[a] + crossCost[a] + crossCost[b]
				if opts.StageMemory > 0 && memWith(s, a, b, paramPrefix[b]-paramPrefix[a], frozenPrefix[b]-frozenPrefix[a]) > opts.StageMemory {
					return t, false
				}
				if keepTransposes && (splitsTranspose[a] || splitsTranspose[b]) {
					return t, false
				}
				return t, true
			})
		}
		if cuts, err = balance(true); err != nil {
			cuts, err = balance(false) // a model too small to cut elsewhere
		}
		if err != nil {
			return nil, err
		}
	}
	bounds := append(append([]int{0}, cuts...), n)
	stageOf := map[*graph.Node]int{}
	for s := 0; s < S; s++ {
		a, b := bounds[s], bounds[s+1]
		st := &Stage{Index: s, FLOPs: flops[b] - flops[a], EstSeconds: cost[b] - cost[a] + crossCost[a] + crossCost[b],
			ActivationBytes: act[b] - act[a], ParamBytes: paramBytes(a, b)}
		st.EstMemoryBytes = memOf(s, a, b)
		if opts.StageMemory > 0 && st.EstMemoryBytes > opts.StageMemory {
			return nil, fmt.Errorf("pipeline: %w: stage %d needs about %d bytes, over --stage-memory %d", ErrPartition, s, st.EstMemoryBytes, opts.StageMemory)
		}
		for _, nd := range items[a:b] {
			stageOf[nd] = s
			st.Nodes = append(st.Nodes, nd.Label())
		}
		if a > 0 {
			st.Inputs = p.crossTensors(crossing(a))
		}
		if b < n {
			st.Outputs = p.crossTensors(crossing(b))
		}
		p.Stages = append(p.Stages, st)
	}
	// Node lists with the Constant nodes each stage reads, params, data.
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		if _, isInit := g.Initializers[in.Name]; !isInit {
			isInput[in.Name] = true
		}
	}
	constProducer := map[string]*graph.Node{}
	for _, nd := range g.Nodes {
		if isConstantNode(nd) {
			for _, o := range nd.Outputs {
				constProducer[o] = nd
			}
		}
	}
	for s, st := range p.Stages {
		readsSet := map[string]bool{}
		for _, nd := range items[bounds[s]:bounds[s+1]] {
			for _, in := range nodeReads(nd) {
				readsSet[in] = true
			}
		}
		for _, nd := range g.Nodes {
			if isConstantNode(nd) {
				if readsSet[nd.Outputs[0]] {
					st.nodes = append(st.nodes, nd)
				}
				continue
			}
			if stageOf[nd] == s {
				st.nodes = append(st.nodes, nd)
			}
		}
		for _, name := range g.SortedInitializerNames() {
			if params[name] && readsSet[name] {
				st.Params = append(st.Params, name)
				p.Shared[name] = append(p.Shared[name], s)
			}
		}
		for _, in := range g.Inputs {
			if isInput[in.Name] && readsSet[in.Name] {
				st.DataInputs = append(st.DataInputs, in.Name)
			}
		}
	}
	for name, ss := range p.Shared {
		if len(ss) < 2 {
			delete(p.Shared, name)
		}
	}
	return p, nil
}

// balancedCuts chooses S-1 cuts of n items minimising the largest stage
// cost (dynamic programming over cut positions); cost(s, a, b) is stage s
// over items [a, b) and whether it is allowed.
func balancedCuts(n, S int, cost func(s, a, b int) (float64, bool)) ([]int, error) {
	inf := math.Inf(1)
	best := make([][]float64, S+1)
	from := make([][]int, S+1)
	for s := range best {
		best[s] = make([]float64, n+1)
		from[s] = make([]int, n+1)
		for j := range best[s] {
			best[s][j] = inf
		}
	}
	best[0][0] = 0
	for s := 1; s <= S; s++ {
		for b := s; b <= n-(S-s); b++ {
			for a := s - 1; a < b; a++ {
				if best[s-1][a] == inf {
					continue
				}
				c, ok := cost(s-1, a, b)
				if !ok {
					continue
				}
				v := math.Max(best[s-1][a], c)
				// ties: prefer the earlier-balanced (smaller sum) split
				if v < best[s][b] {
					best[s][b], from[s][b] = v, a
				}
			}
		}
	}
	if best[S][n] == inf {
		return nil, fmt.Errorf("pipeline: %w: no cut into %d stages fits the memory limit", ErrPartition, S)
	}
	cuts := make([]int, S-1)
	b := n
	for s := S; s > 1; s-- {
		a := from[s][b]
		cuts[s-2] = a
		b = a
	}
	return cuts, nil
}

func (p *Plan) manualCuts(items []*graph.Node, names []string) ([]int, error) {
	var cuts []int
	for _, name := range names {
		k := -1
		for i, nd := range items {
			if nd.Name == name || nd.Label() == name {
				k = i
				break
			}
		}
		if k < 0 {
			if _, isInit := p.g.Initializers[name]; isInit {
				for i, nd := range items {
					for _, in := range nodeReads(nd) {
						if in == name && k < 0 {
							k = i
						}
					}
				}
			}
		}
		if k < 0 {
			return nil, fmt.Errorf("pipeline: %w: --split-at %q names no node (other than a Constant) and no initializer a node reads", ErrPartition, name)
		}
		if k == 0 {
			return nil, fmt.Errorf("pipeline: %w: --split-at %q is the model's first node; a stage before it would be empty", ErrPartition, name)
		}
		cuts = append(cuts, k)
	}
	sort.Ints(cuts)
	for i := 1; i < len(cuts); i++ {
		if cuts[i] == cuts[i-1] {
			return nil, fmt.Errorf("pipeline: %w: two --split-at names cut at the same place (node %q)", ErrPartition, items[cuts[i]].Label())
		}
	}
	return cuts, nil
}

func (p *Plan) crossTensors(names []string) []CrossTensor {
	out := make([]CrossTensor, 0, len(names))
	for _, v := range names {
		ct := CrossTensor{Name: v, Bytes: p.bytesOf(v)}
		if t := p.types[v]; t != nil {
			ct.DType = t.DType
			ct.Type = t.String()
			ct.Shape = knownShape(t)
		}
		out = append(out, ct)
	}
	return out
}

func knownShape(t *graph.Type) []int {
	if t == nil || !t.HasShape {
		return nil
	}
	s := make([]int, len(t.Shape))
	for i, d := range t.Shape {
		if !d.Known {
			return nil
		}
		s[i] = int(d.Value)
	}
	return s
}

// bytesOf is a value's size from the inferred shapes: 0 if a dimension is
// unknown, one element if the rank is.
func (p *Plan) bytesOf(v string) int64 {
	t := p.types[v]
	if t != nil && t.Kind == graph.KindTensor && !t.HasShape {
		return int64(max(t.DType.Size(), 1))
	}
	n, _ := typeBytes(t)
	return n
}

// boundShape is a declared tensor shape with its symbolic dimensions bound:
// the micro-batch size on the first axis, 1 after it.
func boundShape(t *graph.Type, batch int) []int {
	shape := make([]int, len(t.Shape))
	for i, d := range t.Shape {
		switch {
		case d.Known:
			shape[i] = int(d.Value)
		case i == 0:
			shape[i] = batch
		default:
			shape[i] = 1
		}
	}
	return shape
}

func (p *Plan) elems(v string) int64 {
	t := p.types[v]
	if t == nil {
		return 0
	}
	s := knownShape(t)
	n := int64(1)
	for _, d := range s {
		n *= int64(d)
	}
	return n
}

// nodeCost estimates one forward pass of nd: FLOPs and bytes read and
// written.
func (p *Plan) nodeCost(nd *graph.Node) (flops, bytes int64) {
	var out int64
	for _, o := range nd.Outputs {
		if o != "" {
			out += p.elems(o)
			bytes += p.bytesOf(o)
		}
	}
	for _, in := range nd.Inputs {
		if in != "" {
			bytes += p.bytesOf(in)
		}
	}
	lastDim := func(v string, fromEnd int) int64 {
		s := knownShape(p.types[v])
		if len(s) < fromEnd {
			return 1
		}
		return int64(s[len(s)-fromEnd])
	}
	switch nd.OpType {
	case "MatMul", "FusedMatMul":
		return 2 * out * lastDim(nd.Input(0), 1), bytes
	case "Gemm":
		k := lastDim(nd.Input(0), 1)
		if nd.AttrInt("transA", 0) == 1 {
			k = lastDim(nd.Input(0), 2)
		}
		return 2 * out * k, bytes
	case "Conv", "ConvTranspose":
		w := knownShape(p.types[nd.Input(1)])
		k := int64(1)
		for _, d := range w[min(1, len(w)):] {
			k *= int64(d)
		}
		return 2 * out * k, bytes
	case "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization", "Erf", "Exp", "Tanh", "Sigmoid", "SoftmaxCrossEntropyLoss", "Gelu":
		return 8 * out, bytes
	case "Shape", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Constant", "ConstantOfShape":
		return 0, 0
	}
	return out, bytes
}

func shapeType(dt graph.DType, shape []int) *graph.Type {
	t := &graph.Type{Kind: graph.KindTensor, DType: dt, HasShape: true, Shape: []graph.Dim{}}
	for _, d := range shape {
		t.Shape = append(t.Shape, graph.Dim{Value: int64(d), Known: true})
	}
	return t
}

func isConstantNode(n *graph.Node) bool {
	return n.OpType == "Constant" && n.Domain == "" && len(n.Inputs) == 0
}

// nodeReads lists the values nd reads, its subgraphs' outer-scope names
// included.
func nodeReads(nd *graph.Node) []string {
	out := append([]string(nil), nd.Inputs...)
	for _, sg := range nd.Subgraphs() {
		out = append(out, sg.OuterScopeNames()...)
	}
	return out
}

// isWeightTranspose reports whether nd transposes a trainable matrix
// (PyTorch's Linear on inputs of rank 3 or more: MatMul(X, Transpose(W))).
func isWeightTranspose(nd *graph.Node, params map[string]bool) bool {
	if nd.OpType != "Transpose" || len(nd.Inputs) != 1 || !params[nd.Inputs[0]] {
		return false
	}
	perm := nd.AttrInts("perm", nil)
	return len(perm) == 2 && perm[0] == 1 && perm[1] == 0
}

// trainableParams are the float initializers nodes read that are not
// graph inputs or BatchNormalization running statistics, nor frozen (their
// name does not match trainOnly, when set).
func trainableParams(g *graph.Graph, trainOnly *regexp.Regexp) map[string]bool {
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
	}
	buffers := map[string]bool{}
	for _, n := range g.Nodes {
		if n.OpType == "BatchNormalization" {
			buffers[n.Input(3)], buffers[n.Input(4)] = true, true
		}
	}
	read := map[string]bool{}
	for _, n := range g.Nodes {
		for _, in := range nodeReads(n) {
			read[in] = true
		}
	}
	out := map[string]bool{}
	for name, t := range g.Initializers {
		if isInput[name] || buffers[name] || !read[name] || !t.DType.IsFloat() || t.Size() == 0 || !t.AllFinite() {
			continue
		}
		if trainOnly != nil && !trainOnly.MatchString(name) {
			continue
		}
		out[name] = true
	}
	return out
}

// String prints the plan for people.
func (p *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline plan: %d stages (micro-batch %d)\n", len(p.Stages), p.opts.BatchSize)
	var mean, worst float64
	for _, st := range p.Stages {
		mean += st.EstSeconds / float64(len(p.Stages))
		worst = max(worst, st.EstSeconds)
	}
	for _, st := range p.Stages {
		first, last := "", ""
		if len(st.Nodes) > 0 {
			first, last = st.Nodes[0], st.Nodes[len(st.Nodes)-1]
		}
		pass := ""
		if st.PassBytes > 0 {
			pass = ", a pass " + humanBytes(st.PassBytes)
		}
		fmt.Fprintf(&b, "stage %d: %d nodes (%s .. %s), %d params (%s), %.3g GFLOP, est %.3g ms fwd+bwd, activations %s%s, est memory %s\n",
			st.Index, len(st.Nodes), first, last, len(st.Params), humanBytes(st.ParamBytes), float64(st.FLOPs)/1e9, st.EstSeconds*1e3, humanBytes(st.ActivationBytes), pass, humanBytes(st.EstMemoryBytes))
		if len(st.DataInputs) > 0 {
			fmt.Fprintf(&b, "  data: %s\n", strings.Join(st.DataInputs, ", "))
		}
		for _, t := range st.Outputs {
			fmt.Fprintf(&b, "  -> %s %s (%s)\n", t.Name, t.Type, humanBytes(t.Bytes))
		}
	}
	if len(p.Shared) > 0 {
		names := make([]string, 0, len(p.Shared))
		for k := range p.Shared {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			fmt.Fprintf(&b, "shared parameter %s: stages %v (gradients summed)\n", k, p.Shared[k])
		}
	}
	if mean > 0 {
		fmt.Fprintf(&b, "slowest stage %.1f%% above the mean\n", (worst/mean-1)*100)
	}
	return b.String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// cloneGraph copies g's node list, nodes, inputs, outputs and initializer
// map, so passes on the copy leave g alone (tensors are shared).
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

// ParseBytes reads sizes such as 4GiB, 512MB, 1.5G or 1000 (bytes), as
// --stage-memory takes them.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%q is not a size (want e.g. 4GiB, 512MB or a number of bytes)", s)
	}
	return int64(v * mult), nil
}
