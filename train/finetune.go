package train

// Fine-tuning as users do it: what Run changes in an imported model before
// building the training program (a new classifier head, BatchNorm frozen in
// inference mode, a fixed-batch export opened to any batch size), what it
// tells the user about the model (an inference export), and which
// parameters train (--freeze on top of --train-only).

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
)

// fineTune is what PrepareFineTune decided; it is also registered for
// checkpointing (as "model"), so that `onnxtrain export CKPT` finds the
// model and its head.
type fineTune struct {
	// Notes are lines for people (what was changed and why).
	Notes []string
	// TrainOnly is the --train-only pattern for PrepareModel, with --freeze
	// folded in.
	TrainOnly string
	Info      FineTuneInfo
}

// FineTuneInfo is what a checkpoint records about the model it trains
// (state.json, extra "model").
type FineTuneInfo struct {
	// Model is the absolute path of the ONNX file the run started from.
	Model string `json:"model"`
	// NumClasses is --num-classes (0: the model's own head).
	NumClasses int `json:"num_classes,omitempty"`
	// Head names the node whose weights were replaced.
	Head string `json:"head,omitempty"`
	// Classes are the class names of image-folder data.
	Classes []string `json:"classes,omitempty"`
}

// FineTuneStateKey is the name under which Run registers FineTuneInfo for
// checkpointing.
const FineTuneStateKey = "model"

func (f *fineTune) StateDict() ([]byte, error)   { return json.Marshal(f.Info) }
func (f *fineTune) LoadStateDict(b []byte) error { return nil } // informational only

// setData records the class names of the training data, if it has them.
func (f *fineTune) setData(ds any) {
	if c, ok := ds.(interface{ Classes() []string }); ok {
		f.Info.Classes = c.Classes()
	}
}

// PrepareFineTune applies cfg's changes to the freshly imported m: the
// inference-export check, the fixed-batch check, --num-classes, --freeze-bn
// and --freeze.
func PrepareFineTune(m *graph.Model, cfg Config) (*fineTune, error) {
	ft := &fineTune{TrainOnly: cfg.TrainOnly}
	if abs, err := filepath.Abs(cfg.Model); err == nil {
		ft.Info.Model = abs
	}
	if note := inferenceExportNote(m, cfg.FreezeBN); note != "" {
		ft.Notes = append(ft.Notes, note)
	}
	note, err := RelaxFixedBatch(m, cfg.BatchSize)
	if err != nil {
		return nil, err
	}
	if note != "" {
		ft.Notes = append(ft.Notes, note)
	}
	if cfg.NumClasses < 0 {
		return nil, fmt.Errorf("--num-classes must be positive, got %d", cfg.NumClasses)
	}
	if cfg.NumClasses > 0 {
		loss, err := ParseLoss(cfg.Loss)
		if err != nil {
			return nil, err
		}
		if loss.Kind == "output" {
			return nil, fmt.Errorf("--num-classes: the loss is the graph's own output %q; a new head needs the logits as the model output (--loss cross_entropy)", loss.Output)
		}
		h, err := ReplaceHead(m, loss.Output, cfg.NumClasses, cfg.Seed)
		if err != nil {
			return nil, err
		}
		ft.Info.NumClasses, ft.Info.Head = cfg.NumClasses, h.Node
		ft.Notes = append(ft.Notes, fmt.Sprintf("--num-classes %d: replaced the classifier head %s (%s, %d -> %d classes; weights %q %v, bias %q) with a freshly initialised one (nn.Linear initialisation, seed %d)",
			cfg.NumClasses, h.Node, h.OpType, h.OldClasses, cfg.NumClasses, h.Weight, h.WeightShape, h.Bias, cfg.Seed))
	}
	if cfg.FreezeBN {
		if n := FreezeBatchNorm(m); n > 0 {
			ft.Notes = append(ft.Notes, fmt.Sprintf("--freeze-bn: %d BatchNormalization node(s) run in inference mode: they normalise with their running statistics, which stay as they are", n))
		} else {
			ft.Notes = append(ft.Notes, "--freeze-bn: the model has no BatchNormalization in training mode; nothing to freeze")
		}
	}
	if cfg.Freeze != "" {
		pat, n, err := freezePattern(m, cfg.TrainOnly, cfg.Freeze)
		if err != nil {
			return nil, err
		}
		ft.TrainOnly = pat
		ft.Notes = append(ft.Notes, fmt.Sprintf("--freeze %s: %d parameter tensor(s) frozen", cfg.Freeze, n))
	}
	return ft, nil
}

// candidateParams lists the float initializers a training program would
// make parameters: read by a node, not BatchNorm running statistics.
func candidateParams(g *graph.Graph) []string {
	stats := map[string]bool{}
	for _, n := range g.Nodes {
		if n.OpType == "BatchNormalization" {
			stats[n.Input(3)], stats[n.Input(4)] = true, true
		}
	}
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
	}
	var out []string
	for _, name := range g.SortedInitializerNames() {
		t := g.Initializers[name]
		if isInput[name] || stats[name] || !t.DType.IsFloat() || t.Size() == 0 || !usedAsInput(g, name) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// freezePattern turns --freeze (with --train-only, when given) into one
// --train-only pattern naming the parameters that still train.
func freezePattern(m *graph.Model, trainOnly, freeze string) (string, int, error) {
	fr, err := regexp.Compile(freeze)
	if err != nil {
		return "", 0, fmt.Errorf("--freeze: %w", err)
	}
	only, err := TrainOnlyRegexp(trainOnly)
	if err != nil {
		return "", 0, err
	}
	var keep []string
	frozen := 0
	for _, name := range candidateParams(m.Graph) {
		if only != nil && !only.MatchString(name) {
			continue
		}
		if fr.MatchString(name) {
			frozen++
			continue
		}
		keep = append(keep, regexp.QuoteMeta(name))
	}
	if frozen == 0 {
		return "", 0, fmt.Errorf("--freeze %q matches no parameter of the model", freeze)
	}
	if len(keep) == 0 {
		return "", 0, fmt.Errorf("--freeze %q freezes every parameter; nothing would train", freeze)
	}
	return "^(?:" + strings.Join(keep, "|") + ")$", frozen, nil
}

// FreezeBatchNorm switches m's training-mode BatchNormalization nodes to
// inference mode (running statistics, which then stay unchanged) and
// returns how many it switched.
func FreezeBatchNorm(m *graph.Model) int {
	g := m.Graph
	n := 0
	dropped := map[string]bool{}
	for _, nd := range g.Nodes {
		if nd.OpType == "BatchNormalization" && trainingMode(nd) {
			nd.SetAttr(graph.IntAttr("training_mode", 0))
			for _, o := range nd.Outputs[1:] {
				dropped[o] = true
			}
			nd.Outputs = nd.Outputs[:1]
			n++
		}
	}
	if len(dropped) > 0 {
		outs := g.Outputs[:0:0]
		for _, o := range g.Outputs {
			if !dropped[o.Name] {
				outs = append(outs, o)
			}
		}
		g.Outputs = outs
	}
	return n
}

// inferenceExportNote explains, when m looks like an inference export,
// what that means for training and how to re-export it.
func inferenceExportNote(m *graph.Model, freezeBN bool) string {
	var trainBN, inferBN, activeDrop, inactiveDrop, folded int
	for _, n := range m.Graph.Nodes {
		switch n.OpType {
		case "BatchNormalization":
			if trainingMode(n) {
				trainBN++
			} else {
				inferBN++
			}
		case "Dropout":
			if len(n.Inputs) > 2 && n.Inputs[2] != "" {
				activeDrop++
			} else {
				inactiveDrop++
			}
		case "Conv", "Gemm", "MatMul", "ConvTranspose":
			for _, in := range n.Inputs[1:] {
				if _, ok := m.Graph.Initializers[in]; ok && strings.HasPrefix(in, "onnx::") {
					folded++
				}
			}
		}
	}
	if trainBN > 0 || activeDrop > 0 {
		return ""
	}
	var what []string
	if inferBN > 0 && !freezeBN {
		what = append(what, fmt.Sprintf("%d BatchNormalization node(s) in inference mode (they will not learn batch statistics)", inferBN))
	}
	if folded > 0 {
		what = append(what, fmt.Sprintf("%d weight(s) with generated names (onnx::*): constant folding merged BatchNorm into the convolutions, so there is no normalisation left to train", folded))
	}
	if inactiveDrop > 0 {
		what = append(what, fmt.Sprintf("%d Dropout node(s) inactive", inactiveDrop))
	}
	if len(what) == 0 {
		return ""
	}
	return "note: the model looks like an inference export: " + strings.Join(what, "; ") +
		". It trains, but not as the PyTorch module would (with folded BatchNorm, learning rates that suit the module can diverge). " +
		"Re-export it for training with torch.onnx.export(model, x, path, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, " +
		"dynamic_axes={'input': {0: 'batch'}, 'output': {0: 'batch'}}), or pass --freeze-bn to keep BatchNorm in inference mode on purpose"
}

// Head describes the classifier head ReplaceHead replaced.
type Head struct {
	Node, OpType string
	Weight, Bias string
	WeightShape  []int
	OldClasses   int
}

// ReplaceHead gives m a new classifier head of numClasses outputs: the
// node producing output (default: the first graph output) must be a Gemm,
// a MatMul, or an Add of a MatMul and a bias, with initializer weights.
// Its weight and bias are replaced by fresh tensors initialised as
// PyTorch's nn.Linear does (kaiming_uniform with a=sqrt(5) for the weight,
// which is uniform in ±1/sqrt(fan_in), and uniform in ±1/sqrt(fan_in) for
// the bias), drawn from a PCG stream seeded by seed. The tensors keep their
// names; the output's declared type gets the new class count.
func ReplaceHead(m *graph.Model, output string, numClasses int, seed int64) (*Head, error) {
	g := m.Graph
	if output == "" {
		if len(g.Outputs) == 0 {
			return nil, fmt.Errorf("--num-classes: the model has no outputs")
		}
		output = g.Outputs[0].Name
	}
	prod := g.Producers()
	n := prod[output]
	for n != nil && n.OpType == "Identity" {
		n = prod[n.Input(0)]
	}
	if n == nil {
		return nil, fmt.Errorf("--num-classes: output %q is not computed by a node", output)
	}
	h := &Head{Node: n.Label(), OpType: n.OpType}
	init := func(name string) *graph.Tensor { return g.Initializers[name] }
	// transposed: the weight is stored [classes, in] (Gemm transB=1, or a
	// Transpose feeding MatMul); otherwise [in, classes].
	var transposed bool
	switch n.OpType {
	case "Gemm":
		if n.AttrInt("transA", 0) != 0 {
			return nil, fmt.Errorf("--num-classes: head node %s is a Gemm with transA=1; only x·Wᵀ+b heads can be replaced", h.Node)
		}
		h.Weight, h.Bias = n.Input(1), n.Input(2)
		transposed = n.AttrInt("transB", 0) != 0
	case "MatMul", "Add":
		mm := n
		if n.OpType == "Add" {
			mm = nil
			for i, in := range n.Inputs[:2] {
				if p := prod[in]; p != nil && p.OpType == "MatMul" && init(n.Input(1-i)) != nil {
					mm, h.Bias = p, n.Input(1-i)
				}
			}
			if mm == nil {
				return nil, fmt.Errorf("--num-classes: head node %s is an Add, but not of a MatMul and a bias initializer", h.Node)
			}
			h.OpType = "MatMul+Add"
		}
		h.Weight = mm.Input(1)
		if p := prod[h.Weight]; p != nil && p.OpType == "Transpose" && init(p.Input(0)) != nil {
			h.Weight, transposed = p.Input(0), true
		}
	default:
		return nil, fmt.Errorf("--num-classes: output %q is computed by %s (%s), not by a Gemm or MatMul(+Add) classifier head", output, h.Node, n.OpType)
	}
	w := init(h.Weight)
	if w == nil || w.Rank() != 2 || w.DType != graph.Float32 {
		return nil, fmt.Errorf("--num-classes: the weight %q of head node %s is not a float32 matrix initializer", h.Weight, h.Node)
	}
	if users := countUses(g, h.Weight); users != 1 {
		return nil, fmt.Errorf("--num-classes: the head weight %q is read by %d nodes (tied weights); cannot replace it alone", h.Weight, users)
	}
	fanIn := w.Shape[0]
	h.OldClasses = w.Shape[1]
	shape := []int{fanIn, numClasses}
	if transposed {
		fanIn, h.OldClasses = w.Shape[1], w.Shape[0]
		shape = []int{numClasses, fanIn}
	}
	h.WeightShape = shape
	var b *graph.Tensor
	if h.Bias != "" {
		if b = init(h.Bias); b == nil || b.DType != graph.Float32 || b.Size() != h.OldClasses {
			return nil, fmt.Errorf("--num-classes: the bias %q of head node %s is not a float32 initializer of %d values", h.Bias, h.Node, h.OldClasses)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x68656164)) // "head"
	bound := 1 / math.Sqrt(float64(fanIn))
	uniform := func(dst []float32) {
		for i := range dst {
			dst[i] = float32((2*rng.Float64() - 1) * bound)
		}
	}
	nw, err := graph.NewTensor(graph.Float32, shape)
	if err != nil {
		return nil, err
	}
	uniform(nw.Float32s())
	g.Initializers[h.Weight] = nw
	if b != nil {
		bshape := append([]int(nil), b.Shape...)
		bshape[len(bshape)-1] = numClasses
		nb, err := graph.NewTensor(graph.Float32, bshape)
		if err != nil {
			return nil, err
		}
		uniform(nb.Float32s())
		g.Initializers[h.Bias] = nb
	}
	// The declared output type and any value info of the logits now have
	// numClasses in their last dimension.
	for _, o := range g.Outputs {
		if o.Name == output && o.Type != nil && o.Type.HasShape && len(o.Type.Shape) > 0 {
			ty := *o.Type
			ty.Shape = append([]graph.Dim(nil), o.Type.Shape...)
			ty.Shape[len(ty.Shape)-1] = graph.Dim{Value: int64(numClasses), Known: true}
			nv := *o
			nv.Type = &ty
			*o = nv
		}
	}
	for _, out := range n.Outputs {
		delete(g.ValueInfo, out)
	}
	delete(g.ValueInfo, output)
	return h, nil
}

func countUses(g *graph.Graph, name string) int {
	c := 0
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in == name {
				c++
			}
		}
	}
	return c
}
