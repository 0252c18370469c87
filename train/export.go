package train

// Inference export: the graph a user deploys. A training export keeps
// BatchNormalization in training mode (batch statistics, running-statistics
// outputs) and Dropout active; the deployable model normalises with the
// trained running statistics and drops nothing, so that one sample's output
// does not depend on the batch it comes in.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// Files SaveModelFiles writes into the output folder.
const (
	// ModelFile is the inference graph with the trained weights.
	ModelFile = "model.onnx"
	// TrainingGraphFile is the training graph with the trained weights
	// (--save-training-graph): it can be trained further.
	TrainingGraphFile = "model.train.onnx"
	// WeightsFile holds the parameters and buffers by initializer name.
	WeightsFile = "model.safetensors"
	// ClassesFile maps class indices to names (image-folder data).
	ClassesFile = "classes.json"
)

// InferenceModel returns m as an inference graph: BatchNormalization nodes
// in inference mode (normalising with the running statistics, which the
// model's initializers hold) without their running-statistics outputs,
// Dropout nodes without their training_mode input (so they pass their input
// through), and the nodes, graph outputs and initializers that only served
// those removed outputs and inputs dropped. m itself is left alone; the
// result shares its initializer tensors. changed counts the nodes switched.
func InferenceModel(m *graph.Model) (out *graph.Model, changed int) {
	g := cloneGraph(m.Graph)
	for _, n := range g.Nodes {
		switch n.OpType {
		case "BatchNormalization":
			if trainingMode(n) || len(n.Outputs) > 1 {
				changed++
			}
		case "Dropout":
			if len(n.Inputs) > 2 && n.Inputs[2] != "" {
				changed++
			}
		}
	}
	toInference(g)
	for _, n := range g.Nodes {
		if n.OpType == "BatchNormalization" {
			// Opsets before 14 mark training mode by the extra outputs.
			n.Outputs = n.Outputs[:1]
			delete(n.Attrs, "training_mode")
			delete(n.Attrs, graph.UnbiasedVarAttr)
		}
	}
	// Graph outputs must still be produced.
	produced := map[string]bool{}
	for _, in := range g.Inputs {
		produced[in.Name] = true
	}
	for name := range g.Initializers {
		produced[name] = true
	}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			if o != "" {
				produced[o] = true
			}
		}
	}
	outs := g.Outputs[:0:0]
	for _, o := range g.Outputs {
		if produced[o.Name] {
			outs = append(outs, o)
		}
	}
	g.Outputs = outs
	pruneDead(g)
	// Value infos of removed values would describe nothing.
	if len(g.ValueInfo) > 0 {
		vi := make(map[string]*graph.ValueInfo, len(g.ValueInfo))
		for k, v := range g.ValueInfo {
			if produced[k] {
				vi[k] = v
			}
		}
		g.ValueInfo = vi
	}
	om := *m
	om.Graph = g
	return &om, changed
}

// pruneDead removes the nodes none of whose outputs reach a graph output,
// and the initializers no remaining node (or subgraph) reads.
func pruneDead(g *graph.Graph) {
	live := map[string]bool{}
	for _, o := range g.Outputs {
		live[o.Name] = true
	}
	keep := make([]bool, len(g.Nodes))
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		for _, o := range n.Outputs {
			if o != "" && live[o] {
				keep[i] = true
				break
			}
		}
		if !keep[i] {
			continue
		}
		for _, in := range n.Inputs {
			live[in] = true
		}
		for _, sg := range n.Subgraphs() {
			for _, s := range sg.OuterScopeNames() {
				live[s] = true
			}
		}
	}
	nodes := g.Nodes[:0:0]
	for i, n := range g.Nodes {
		if keep[i] {
			nodes = append(nodes, n)
		}
	}
	g.Nodes = nodes
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
	}
	inits := make(map[string]*graph.Tensor, len(g.Initializers))
	for k, v := range g.Initializers {
		if live[k] || isInput[k] {
			inits[k] = v
		}
	}
	g.Initializers = inits
	if len(g.InitOrder) > 0 {
		order := make([]string, 0, len(g.InitOrder))
		for _, k := range g.InitOrder {
			if _, ok := inits[k]; ok {
				order = append(order, k)
			}
		}
		g.InitOrder = order
	}
}

// SaveOptions tune SaveModelFiles.
type SaveOptions struct {
	// TrainingGraph also writes the training graph (TrainingGraphFile).
	TrainingGraph bool
	// Classes, when set, are written as ClassesFile (index -> name).
	Classes []string
}

// SaveModelFiles writes the trained model into dir: model.onnx (the
// inference graph, InferenceModel), model.safetensors (parameters and
// buffers by initializer name), and as asked the training graph and the
// class names. It returns the paths written.
func SaveModelFiles(dir string, prog *Program, opts SaveOptions) ([]string, error) {
	if err := prog.SyncToHost(); err != nil { // program_state.go
		return nil, err
	}
	weights := map[string]*graph.Tensor{}
	for _, p := range prog.Params {
		weights[p.Name] = p.Value
	}
	for name, t := range prog.Buffers {
		weights[name] = t
	}
	return saveModelFiles(dir, prog.Model, weights, opts)
}

func saveModelFiles(dir string, m *graph.Model, weights map[string]*graph.Tensor, opts SaveOptions) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("train: --output: %w", err)
	}
	// Parameters and buffers are the model's own initializer tensors,
	// updated in place, so the model as loaded now holds the trained values.
	inf, _ := InferenceModel(m)
	onnxPath := filepath.Join(dir, ModelFile)
	if err := importer.Save(onnxPath, inf); err != nil {
		return nil, err
	}
	paths := []string{onnxPath}
	if opts.TrainingGraph {
		p := filepath.Join(dir, TrainingGraphFile)
		if err := importer.Save(p, m); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	stPath := filepath.Join(dir, WeightsFile)
	if err := tensorio.WriteSafetensors(stPath, weights, map[string]string{"format": "pt", "producer": "onnxtrain"}); err != nil {
		return nil, err
	}
	paths = append(paths, stPath)
	if len(opts.Classes) > 0 {
		p := filepath.Join(dir, ClassesFile)
		if err := WriteClasses(p, opts.Classes); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// WriteClasses writes class names as a JSON array (index -> name).
func WriteClasses(path string, classes []string) error {
	b, err := json.MarshalIndent(classes, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// ReadClasses reads what WriteClasses wrote.
func ReadClasses(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var classes []string
	if err := json.Unmarshal(b, &classes); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of class names: %w", path, err)
	}
	return classes, nil
}

// saveOutputs writes --output at the end of Run (main process only): the
// model files, the training graph with --save-training-graph, and the class
// names when the training data has them.
func saveOutputs(acc *Accelerator, model *Model, cfg Config, trainDS any) ([]string, error) {
	if !acc.IsMainProcess() {
		return nil, nil
	}
	opts := SaveOptions{TrainingGraph: cfg.SaveTrainingGraph}
	if c, ok := trainDS.(interface{ Classes() []string }); ok {
		opts.Classes = c.Classes()
	}
	return SaveModelFiles(cfg.Output, model.Prog, opts)
}

// ExportOptions tune ExportCheckpoint.
type ExportOptions struct {
	// Model is the ONNX file the checkpoint's run trained (default: the
	// path the checkpoint records).
	Model string
	// TrainingGraph also writes the training graph.
	TrainingGraph bool
}

// ExportCheckpoint writes the model of a checkpoint for deployment. ckpt is
// a checkpoint folder, or a run's --output folder (its newest complete
// checkpoint is used). The model is the ONNX file the run started from
// (recorded in the checkpoint, or opts.Model), with the head the run gave
// it (--num-classes) and the checkpoint's parameters and buffers. out is
// either a .onnx file (the inference graph; with TrainingGraph also
// NAME.train.onnx) or a folder (what --output of a run holds: model.onnx,
// model.safetensors, classes.json when known). It returns the files written
// and the checkpoint used.
func ExportCheckpoint(ckpt, out string, opts ExportOptions) (paths []string, used string, err error) {
	used = ckpt
	if _, err := ReadManifest(ckpt); err != nil {
		latest, lerr := Latest(ckpt)
		if lerr != nil {
			return nil, "", fmt.Errorf("export: %s is not a checkpoint (%v), nor a folder holding one (%v)", ckpt, err, lerr)
		}
		used = latest
	}
	st, err := LoadState(used)
	if err != nil {
		return nil, used, fmt.Errorf("export: %w", err)
	}
	var info FineTuneInfo
	if b, ok := st.Extra[FineTuneStateKey]; ok {
		if err := json.Unmarshal(b, &info); err != nil {
			return nil, used, fmt.Errorf("export: %s: the model record in state.json: %w", used, err)
		}
	}
	modelPath := opts.Model
	if modelPath == "" {
		modelPath = info.Model
	}
	if modelPath == "" {
		return nil, used, fmt.Errorf("export: checkpoint %s does not record the model it trains; pass --model MODEL.onnx", used)
	}
	m, err := importer.Load(modelPath)
	if err != nil {
		if opts.Model == "" {
			return nil, used, fmt.Errorf("export: the model checkpoint %s records: %w (pass --model to use another path)", used, err)
		}
		return nil, used, fmt.Errorf("export: %w", err)
	}
	// As in training: a fixed-batch export opens to any batch size (one
	// that depends on its batch size keeps it).
	_, _ = RelaxFixedBatch(m, 0)
	if info.NumClasses > 0 {
		if _, err := ReplaceHead(m, "", info.NumClasses, 0); err != nil {
			return nil, used, fmt.Errorf("export: %w", err)
		}
	}
	weights := map[string]*graph.Tensor{}
	for _, src := range []map[string]*graph.Tensor{st.Params, st.Buffers} {
		for name, t := range src {
			init, ok := m.Graph.Initializers[name]
			if !ok {
				return nil, used, fmt.Errorf("export: checkpoint %s holds %q, which is not a weight of %s (is it the model this run trained?)", used, name, modelPath)
			}
			if init.DType != t.DType || !graph.SameShape(init.Shape, t.Shape) {
				return nil, used, fmt.Errorf("export: checkpoint %s holds %q as %v%v, but %s has %v%v", used, name, t.DType, t.Shape, modelPath, init.DType, init.Shape)
			}
			m.Graph.Initializers[name] = t
			weights[name] = t
		}
	}
	if strings.HasSuffix(strings.ToLower(out), ".onnx") {
		if dir := filepath.Dir(out); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, used, fmt.Errorf("export: --output: %w", err)
			}
		}
		inf, _ := InferenceModel(m)
		if err := importer.Save(out, inf); err != nil {
			return nil, used, err
		}
		paths = []string{out}
		if opts.TrainingGraph {
			p := strings.TrimSuffix(out, filepath.Ext(out)) + ".train.onnx"
			if err := importer.Save(p, m); err != nil {
				return nil, used, err
			}
			paths = append(paths, p)
		}
		if len(info.Classes) > 0 {
			p := filepath.Join(filepath.Dir(out), ClassesFile)
			if err := WriteClasses(p, info.Classes); err != nil {
				return nil, used, err
			}
			paths = append(paths, p)
		}
		return paths, used, nil
	}
	paths, err = saveModelFiles(out, m, weights, SaveOptions{TrainingGraph: opts.TrainingGraph, Classes: info.Classes})
	return paths, used, err
}
