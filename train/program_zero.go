package train

// ZeRO's collectives as ops of the program (zero.go has the layout).
//
// With ProgramConfig.Zero the micro-batch step ends in a ReduceScatter
// node (graph.ReduceScatterOp) that leaves this rank's partition of the
// averaged gradients in a state buffer of P elements, ZeroPartitionState:
//
//   - stage 1: the step sums the window's gradients in full gradient-sum
//     state (as without ZeRO) and, on the window's last micro-batch, reduce-
//     scatters the sums into the partition (sync = fresh = that flag);
//   - stage 2: every micro-batch reduce-scatters its own gradients (which
//     stay intermediates of the step: no full-size gradient buffer lives
//     from one step to the next) and adds them into the partition, the
//     window's first micro-batch replacing it.
//
// After the optimizer has stepped this rank's slices, AllGatherParams runs
// an AllGather node (graph.AllGatherOp) over the parameters' state, which
// gives every rank the slices the others updated.

import (
	"context"
	"fmt"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// ZeroPartitionState is the state buffer of a ZeRO program that holds this
// rank's partition of the reduced gradients.
const ZeroPartitionState = "onnxtrain/zero/grad_partition"

// ZeroConfig is the ZeRO layout a program's collectives use.
type ZeroConfig struct {
	Stage       int // 1 or 2
	World, Rank int
	// BucketBytes bounds one collective's message (0: 25 MB); Chunk, the
	// elements per partition and round, follows from it (set by Build).
	BucketBytes int
	Chunk       int
	// Compress is "" or "bf16" (the gradients' reduce-scatter).
	Compress string
}

// zeroAttrs are the layout attributes of the ZeRO ops.
func (z *ZeroConfig) attrs(n int) map[string]*graph.Attr {
	return map[string]*graph.Attr{
		"tensors": graph.IntAttr("tensors", int64(n)),
		"world":   graph.IntAttr("world", int64(z.World)),
		"rank":    graph.IntAttr("rank", int64(z.Rank)),
		"chunk":   graph.IntAttr("chunk", int64(z.Chunk)),
	}
}

// addZeroReduceScatter makes the partition's state and the ReduceScatter
// node over values (the gradient sums' updates at stage 1, the gradients
// at stage 2). It returns the node and the state.
func (p *Program) addZeroReduceScatter(g *graph.Graph, values []string) (*graph.Node, backend.StateSpec, error) {
	z := p.cfg.Zero
	if z.Stage != 1 && z.Stage != 2 {
		return nil, backend.StateSpec{}, fmt.Errorf("train: ZeRO stage %d (want 1 or 2)", z.Stage)
	}
	total := 0
	for _, prm := range p.Params {
		total += prm.Value.Size()
	}
	part := (total + z.World - 1) / z.World
	limit := z.BucketBytes
	if limit <= 0 {
		limit = 25 << 20
	}
	z.Chunk = max(1, min(limit/(4*z.World), part))
	p.zeroPart = graph.Zeros(graph.Float32, part)
	scalarBool := &graph.Type{Kind: graph.KindTensor, DType: graph.Bool, HasShape: true, Shape: []graph.Dim{}}
	g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: syncInput, Type: scalarBool}, &graph.ValueInfo{Name: ZeroPartitionState, Type: typeOf(p.zeroPart)})
	fresh := syncInput // stage 1: the window's reduction replaces the partition
	if z.Stage == 2 {
		fresh = freshInput
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: freshInput, Type: scalarBool})
	}
	attrs := z.attrs(len(values))
	attrs["reduction"] = graph.StringAttr("reduction", "mean")
	attrs["compress"] = graph.StringAttr("compress", z.Compress)
	n := &graph.Node{Name: "onnxtrain/zero/reduce_scatter", OpType: graph.ReduceScatterOp, Domain: graph.InternalDomain,
		Inputs: append([]string{syncInput, fresh, ZeroPartitionState}, values...), Outputs: []string{ZeroPartitionState + "/new"}, Attrs: attrs}
	g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: ZeroPartitionState + "/new"})
	return n, backend.StateSpec{Name: ZeroPartitionState, Init: p.zeroPart, UpdatedBy: ZeroPartitionState + "/new"}, nil
}

// ZeroPartition is this rank's partition of the reduced gradients in a
// ZeRO program, as a host tensor (the state buffer itself on a backend
// whose state is host memory, otherwise a copy).
func (p *Program) ZeroPartition() (*graph.Tensor, error) {
	if p.cfg.Zero == nil {
		return nil, fmt.Errorf("train: the program was built without ZeRO")
	}
	st, err := p.stateful()
	if err != nil {
		return nil, err
	}
	if h := st.HostState(ZeroPartitionState); h != nil {
		p.zeroPart = h
		return h, nil
	}
	if err := st.ReadState(ZeroPartitionState, p.zeroPart); err != nil {
		return nil, err
	}
	return p.zeroPart, nil
}

// AllGatherParams gives every rank the parameter slices the other ranks'
// optimizers updated (a ZeRO program), in the program's state, through
// the communicator in ctx. Its one-node program is compiled on first use.
func (p *Program) AllGatherParams(ctx context.Context) error {
	if p.cfg.Zero == nil {
		return fmt.Errorf("train: the program was built without ZeRO")
	}
	if p.allGather == nil {
		g := &graph.Graph{Name: "onnxtrain/zero/all_gather", Initializers: map[string]*graph.Tensor{}}
		g.Inputs = []*graph.ValueInfo{{Name: syncInput, Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Bool, HasShape: true, Shape: []graph.Dim{}}}}
		n := &graph.Node{Name: "onnxtrain/zero/all_gather", OpType: graph.AllGatherOp, Domain: graph.InternalDomain,
			Inputs: []string{syncInput}, Attrs: p.cfg.Zero.attrs(len(p.Params))}
		var state []backend.StateSpec
		for _, prm := range p.Params {
			g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: prm.Name, Type: typeOf(prm.Value)})
			n.Inputs = append(n.Inputs, prm.Name)
			n.Outputs = append(n.Outputs, prm.Name+"/gathered")
			g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: prm.Name + "/gathered"})
			state = append(state, backend.StateSpec{Name: prm.Name, Init: prm.Value, UpdatedBy: prm.Name + "/gathered"})
		}
		g.Nodes = []*graph.Node{n}
		m := &graph.Model{IRVersion: p.Model.IRVersion, Opsets: map[string]int64{"": p.Model.Opset(), graph.InternalDomain: 1}, Graph: g}
		exe, err := p.be.Compile(m, backend.CompileOptions{State: state, ShareState: p.trainExe, StaticShapes: true})
		if err != nil {
			return fmt.Errorf("train: compiling the ZeRO all-gather: %w", err)
		}
		p.allGather = exe
	}
	if _, err := p.allGather.Run(ctx, map[string]*graph.Tensor{syncInput: {DType: graph.Bool, Data: []bool{true}}}); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// The optimizer step under ZeRO is a program over views
// (backend.StateViewer): ZeroParamView(p) is this rank's slice of
// parameter p's buffer and ZeroGradView(p) the matching range of the
// reduced-gradient partition, both rank-1; the optimizer's slots are
// buffers of the slices' size named "<p>/<slot>" (zeroLayout, bound with
// optim.LayoutBinder). The step's SGDUpdate or AdamUpdate node updates
// the parameter slices in place, in the parameters' own buffers, and
// AllGatherParams then sends them to the other ranks.

// ZeroParamView names the state buffer that is this rank's slice of a
// parameter under ZeRO (a view of the parameter's buffer).
func ZeroParamView(param string) string { return "onnxtrain/zero/param/" + param }

// ZeroGradView names the state buffer that is the reduced gradient of
// this rank's slice of a parameter under ZeRO (a view of
// ZeroPartitionState).
func ZeroGradView(param string) string { return "onnxtrain/zero/grad/" + param }

// zeroLayout names the ZeRO optimizer step's buffers (optim.StateLayout).
type zeroLayout struct{}

func (zeroLayout) ValueState(param string) string      { return ZeroParamView(param) }
func (zeroLayout) GradState(param string) string       { return ZeroGradView(param) }
func (zeroLayout) SlotState(param, slot string) string { return param + "/" + slot }

// zeroSlice is the part of one parameter this rank owns under ZeRO:
// elements [Start, Start+Len) of the parameter, which are elements
// [PartStart, PartStart+Len) of the reduced-gradient partition.
type zeroSlice struct {
	Param           string
	Start, Len      int
	PartStart       int
	value, gradient *graph.Tensor // the views as host tensors (HostState), or nil
}

// declareZeroViews adds the views of this rank's slices to the program's
// state (ZeroParamView, ZeroGradView) and returns them as host tensors
// where the backend keeps state in host memory (nil otherwise).
func (p *Program) declareZeroViews(slices []zeroSlice) error {
	if p.cfg.Zero == nil {
		return fmt.Errorf("train: the program was built without ZeRO")
	}
	v, ok := p.trainExe.(backend.StateViewer)
	if !ok {
		return fmt.Errorf("train: ZeRO's optimizer step needs state views, which the %s backend's executables do not have", p.cfg.Backend)
	}
	st, err := p.stateful()
	if err != nil {
		return err
	}
	for i := range slices {
		s := &slices[i]
		if err := v.ViewState(ZeroParamView(s.Param), s.Param, s.Start, []int{s.Len}); err != nil {
			return fmt.Errorf("train: ZeRO slice of %q: %w", s.Param, err)
		}
		if err := v.ViewState(ZeroGradView(s.Param), ZeroPartitionState, s.PartStart, []int{s.Len}); err != nil {
			return fmt.Errorf("train: ZeRO gradient slice of %q: %w", s.Param, err)
		}
		s.value, s.gradient = st.HostState(ZeroParamView(s.Param)), st.HostState(ZeroGradView(s.Param))
	}
	return nil
}

// compileZeroGradOp compiles a one-node program of op (graph.ClipGradValueOp,
// ClipGradNormShardedOp) over the gradient views of params (ZeroGradView;
// sizes their elements), updated in place in the partition, with a
// float32 scalar input "onnxtrain/scalar", the node's leading scalar
// output (if result) "onnxtrain/result", and attrs besides "tensors".
func (p *Program) compileZeroGradOp(op string, params []string, sizes []int, result bool, attrs ...*graph.Attr) (backend.Executable, error) {
	if p.cfg.Zero == nil {
		return nil, fmt.Errorf("train: the program was built without ZeRO")
	}
	g := &graph.Graph{Name: "onnxtrain/zero/" + op, Initializers: map[string]*graph.Tensor{}}
	g.Inputs = []*graph.ValueInfo{{Name: "onnxtrain/scalar", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{}}}}
	n := &graph.Node{Name: "onnxtrain/zero/" + op, OpType: op, Domain: graph.InternalDomain, Inputs: []string{"onnxtrain/scalar"},
		Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", int64(len(params)))}}
	for _, a := range attrs {
		n.Attrs[a.Name] = a
	}
	if result {
		n.Outputs = append(n.Outputs, "onnxtrain/result")
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: "onnxtrain/result"})
	}
	var state []backend.StateSpec
	for i, prm := range params {
		name := ZeroGradView(prm)
		// Dtype and shape only: the view is bound by name (a missing one
		// fails the compile instead of becoming a buffer of its own).
		init := &graph.Tensor{DType: graph.Float32, Shape: []int{sizes[i]}}
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: typeOf(init)})
		n.Inputs = append(n.Inputs, name)
		n.Outputs = append(n.Outputs, name+"/new")
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: name + "/new"})
		state = append(state, backend.StateSpec{Name: name, Init: init, UpdatedBy: name + "/new"})
	}
	g.Nodes = []*graph.Node{n}
	m := &graph.Model{IRVersion: p.Model.IRVersion, Opsets: map[string]int64{"": p.Model.Opset(), graph.InternalDomain: 1}, Graph: g}
	exe, err := p.be.Compile(m, backend.CompileOptions{State: state, ShareState: p.trainExe, StaticShapes: true, Tuning: p.cfg.Tuning})
	if err != nil {
		return nil, fmt.Errorf("train: compiling ZeRO's %s: %w", op, err)
	}
	return exe, nil
}
