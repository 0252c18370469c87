package train

// `onnxtrain eval` and `onnxtrain predict`: a deployed (or training) model
// over a dataset, without building a training program.

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train/data"
)

// EvalReport is what `onnxtrain eval` reports. Accuracy, Top5Accuracy and
// the per-class table are set for classification (cross_entropy) only.
type EvalReport struct {
	Model   string  `json:"model"`
	Data    string  `json:"data"`
	Loss    string  `json:"loss_kind"`
	Value   float64 `json:"loss"`
	Samples int     `json:"samples"`
	// Counted is the number of labels the loss counted (cross_entropy
	// leaves out --ignore-index).
	Counted      int        `json:"counted,omitempty"`
	Accuracy     *float64   `json:"accuracy,omitempty"`
	Top5Accuracy *float64   `json:"top5_accuracy,omitempty"`
	Classes      []string   `json:"classes,omitempty"`
	PerClass     []ClassRow `json:"per_class,omitempty"`
	// Confusion[i][j] counts samples of true class i predicted as j.
	Confusion [][]int  `json:"confusion_matrix,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// ClassRow is one line of the per-class table.
type ClassRow struct {
	Class     string  `json:"class"`
	Support   int     `json:"support"`
	Correct   int     `json:"correct"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
}

// evalSession is a compiled inference model and its data.
type evalSession struct {
	exe     backend.Executable
	outName string
	loss    LossConfig
	loader  *data.Loader
	ds      data.Dataset
	classes []string
	// remap maps the dataset's label indices to the model's (image folders
	// whose classes the model knows by name, from classes.json).
	remap []int64
	notes []string
}

// openEval loads cfg.Model as an inference graph and cfg.Data for it.
// labels says whether the data must have labels.
func openEval(cfg Config, labels bool) (*evalSession, error) {
	if cfg.Model == "" {
		return nil, fmt.Errorf("--model is required")
	}
	if cfg.Data == "" {
		return nil, fmt.Errorf("--data is required")
	}
	if cfg.BatchSize <= 0 {
		return nil, fmt.Errorf("--batch-size must be positive, got %d", cfg.BatchSize)
	}
	loss, err := ParseLoss(cfg.Loss)
	if err != nil {
		return nil, err
	}
	loss.IgnoreIndex = cfg.IgnoreIndex
	m, err := importer.Load(cfg.Model)
	if err != nil {
		return nil, err
	}
	s := &evalSession{loss: loss}
	note, err := RelaxFixedBatch(m, cfg.BatchSize)
	if err != nil {
		return nil, err
	}
	if note != "" {
		s.notes = append(s.notes, note)
	}
	inf, changed := InferenceModel(m)
	if changed > 0 {
		s.notes = append(s.notes, fmt.Sprintf("%s is a training graph: evaluating it in inference mode (%d BatchNormalization/Dropout node(s) switched)", cfg.Model, changed))
	}
	g := inf.Graph
	s.outName = loss.Output
	if s.outName == "" {
		if len(g.Outputs) == 0 {
			return nil, fmt.Errorf("%s has no outputs", cfg.Model)
		}
		s.outName = g.Outputs[0].Name
	}
	if !hasOutput(g, s.outName) {
		return nil, fmt.Errorf("--loss: %q is not an output of %s (outputs: %v)", s.outName, cfg.Model, g.OutputNames())
	}
	g.Outputs = []*graph.ValueInfo{outputInfo(g, s.outName)}
	pruneDead(g)
	var inputs []string
	for _, in := range g.Inputs {
		if _, ok := g.Initializers[in.Name]; !ok {
			inputs = append(inputs, in.Name)
		}
	}
	prog := &Program{DataInputs: inputs, NeedsLabels: labels && loss.Kind != "output"}
	ds, err := OpenData(cfg, cfg.Data, false, prog)
	if err != nil {
		return nil, err
	}
	s.ds = ds
	if err := s.setClasses(cfg, ds); err != nil {
		return nil, err
	}
	if s.loader, err = data.NewLoader(ds, data.LoaderConfig{BatchSize: cfg.BatchSize, Prefetch: 2}); err != nil {
		return nil, fmt.Errorf("data: %s: %w", cfg.Data, err)
	}
	be, err := backend.Open(cfg.Backend)
	if err != nil {
		return nil, err
	}
	if s.exe, err = be.Compile(inf, backend.CompileOptions{Tuning: cfg.Tuning}); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	return s, nil
}

func outputInfo(g *graph.Graph, name string) *graph.ValueInfo {
	for _, o := range g.Outputs {
		if o.Name == name {
			return o
		}
	}
	return &graph.ValueInfo{Name: name}
}

// setClasses finds the class names: classes.json next to the model (what
// training on an image folder saved), else the data's own. When both are
// known, the data's labels are mapped to the model's indices by name.
func (s *evalSession) setClasses(cfg Config, ds data.Dataset) error {
	var dataClasses []string
	if c, ok := ds.(interface{ Classes() []string }); ok {
		dataClasses = c.Classes()
	}
	p := filepath.Join(filepath.Dir(cfg.Model), ClassesFile)
	model, err := ReadClasses(p)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if model == nil {
		s.classes = dataClasses
		return nil
	}
	s.classes = model
	s.notes = append(s.notes, fmt.Sprintf("class names from %s", p))
	if dataClasses == nil {
		return nil
	}
	index := map[string]int64{}
	for i, c := range model {
		index[c] = int64(i)
	}
	s.remap = make([]int64, len(dataClasses))
	for i, c := range dataClasses {
		j, ok := index[c]
		if !ok {
			return fmt.Errorf("data: %s: class folder %q is not one of the model's classes (%s lists %v)", cfg.Data, c, p, model)
		}
		s.remap[i] = j
	}
	return nil
}

// EvaluateModel runs cfg.Model (in inference mode) over cfg.Data and
// reports the loss (cfg.Loss) and, for cross_entropy, accuracy, top-5
// accuracy and the confusion matrix.
func EvaluateModel(ctx context.Context, cfg Config) (*EvalReport, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	s, err := openEval(cfg, true)
	if err != nil {
		return nil, err
	}
	rep := &EvalReport{Model: cfg.Model, Data: cfg.Data, Loss: cfg.Loss, Notes: s.notes, Classes: s.classes}
	var lossSum float64
	var correct, top5 int
	for b, err := range s.loader.Epoch(ctx, 0, 0) {
		if err != nil {
			return nil, err
		}
		out, err := s.exe.Run(ctx, b.Inputs)
		if err != nil {
			return nil, fmt.Errorf("%s: batch %d: %w", cfg.Model, b.Index, err)
		}
		y := out[s.outName]
		if y == nil {
			return nil, fmt.Errorf("%s: output %q missing", cfg.Model, s.outName)
		}
		n := b.Size - b.Padding
		rep.Samples += n
		switch s.loss.Kind {
		case "output":
			if y.Size() != 1 {
				return nil, fmt.Errorf("--loss output:%s: that output has shape %v, not a scalar", s.outName, y.Shape)
			}
			lossSum += y.Float(0) * float64(n)
			rep.Counted += n
		case "cross_entropy":
			if err := s.classify(rep, y, b.Labels, n, &lossSum, &correct, &top5); err != nil {
				return nil, fmt.Errorf("data: %s: batch %d: %w", cfg.Data, b.Index, err)
			}
		default:
			sum, cnt, err := elementwiseLoss(s.loss.Kind, y, b.Labels)
			if err != nil {
				return nil, fmt.Errorf("data: %s: batch %d: %w", cfg.Data, b.Index, err)
			}
			lossSum += sum
			rep.Counted += cnt
		}
	}
	if rep.Counted > 0 {
		rep.Value = lossSum / float64(rep.Counted)
	}
	if s.loss.Kind == "cross_entropy" && rep.Counted > 0 {
		a := float64(correct) / float64(rep.Counted)
		rep.Accuracy = &a
		if len(rep.Confusion) > 5 {
			t5 := float64(top5) / float64(rep.Counted)
			rep.Top5Accuracy = &t5
		}
		rep.PerClass = perClass(rep.Confusion, rep.Classes)
	}
	return rep, nil
}

// classify adds one batch of logits [n, C, d...] and labels [n, d...] to
// the cross-entropy sum, the accuracy counts and the confusion matrix.
func (s *evalSession) classify(rep *EvalReport, y, labels *graph.Tensor, n int, lossSum *float64, correct, top5 *int) error {
	if labels == nil {
		return fmt.Errorf("cross_entropy needs labels and the data has none")
	}
	if y.Rank() < 2 {
		return fmt.Errorf("the model output %v is not [batch, classes, ...] logits", y.Shape)
	}
	c := y.Shape[1]
	inner := 1
	for _, d := range y.Shape[2:] {
		inner *= d
	}
	if labels.Size() != y.Shape[0]*inner {
		return fmt.Errorf("labels of shape %v do not fit logits of shape %v", labels.Shape, y.Shape)
	}
	if rep.Confusion == nil {
		rep.Confusion = make([][]int, c)
		for i := range rep.Confusion {
			rep.Confusion[i] = make([]int, c)
		}
	} else if len(rep.Confusion) != c {
		return fmt.Errorf("the model output has %d classes here and %d before", c, len(rep.Confusion))
	}
	logits := make([]float64, c)
	for i := 0; i < n; i++ {
		for p := 0; p < inner; p++ {
			label := labels.Int(i*inner + p)
			if label == s.loss.IgnoreIndex {
				continue
			}
			if s.remap != nil && label >= 0 && label < int64(len(s.remap)) {
				label = s.remap[label]
			}
			if label < 0 || label >= int64(c) {
				return fmt.Errorf("label %d of sample %d is out of range [0, %d)", label, i, c)
			}
			for k := 0; k < c; k++ {
				logits[k] = y.Float((i*c+k)*inner + p)
			}
			mx := math.Inf(-1)
			best := 0
			for k, v := range logits {
				if v > mx {
					mx, best = v, k
				}
			}
			var z float64
			higher := 0
			for _, v := range logits {
				z += math.Exp(v - mx)
				if v > logits[label] {
					higher++
				}
			}
			*lossSum += mx + math.Log(z) - logits[label]
			rep.Counted++
			if best == int(label) {
				*correct++
			}
			if higher < 5 {
				*top5++
			}
			rep.Confusion[label][best]++
		}
	}
	return nil
}

// elementwiseLoss is the sum and count of mse, l1 or bce_with_logits terms.
func elementwiseLoss(kind string, y, t *graph.Tensor) (float64, int, error) {
	if t == nil {
		return 0, 0, fmt.Errorf("%s needs targets and the data has none", kind)
	}
	if t.Size() != y.Size() {
		return 0, 0, fmt.Errorf("targets of shape %v do not fit the model output %v", t.Shape, y.Shape)
	}
	var sum float64
	for i := 0; i < y.Size(); i++ {
		x, v := y.Float(i), t.Float(i)
		switch kind {
		case "mse":
			sum += (x - v) * (x - v)
		case "l1":
			sum += math.Abs(x - v)
		case "bce_with_logits":
			sum += math.Max(x, 0) - x*v + math.Log1p(math.Exp(-math.Abs(x)))
		default:
			return 0, 0, fmt.Errorf("unknown loss %q", kind)
		}
	}
	return sum, y.Size(), nil
}

func perClass(conf [][]int, names []string) []ClassRow {
	rows := make([]ClassRow, len(conf))
	for i := range conf {
		r := ClassRow{Class: fmt.Sprint(i)}
		if i < len(names) {
			r.Class = names[i]
		}
		predicted := 0
		for j := range conf {
			r.Support += conf[i][j]
			predicted += conf[j][i]
		}
		r.Correct = conf[i][i]
		if r.Support > 0 {
			r.Recall = float64(r.Correct) / float64(r.Support)
		}
		if predicted > 0 {
			r.Precision = float64(r.Correct) / float64(predicted)
		}
		rows[i] = r
	}
	return rows
}

// Predictions is what `onnxtrain predict` computes: the model output of
// every sample, in data order, and for classification the predicted class,
// its softmax probability and name.
type Predictions struct {
	Output      *graph.Tensor
	Classes     []int64
	Probability []float32
	// Names are the predicted classes' names (nil when unknown).
	Names []string
	// Sources name the samples (image files) when the data has them.
	Sources []string
	Notes   []string
}

// Predict runs cfg.Model (in inference mode) over cfg.Data in order.
func Predict(ctx context.Context, cfg Config) (*Predictions, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	cfg.Loss = "cross_entropy"
	s, err := openEval(cfg, false)
	if err != nil {
		return nil, err
	}
	var parts []*graph.Tensor
	for b, err := range s.loader.Epoch(ctx, 0, 0) {
		if err != nil {
			return nil, err
		}
		out, err := s.exe.Run(ctx, b.Inputs)
		if err != nil {
			return nil, fmt.Errorf("%s: batch %d: %w", cfg.Model, b.Index, err)
		}
		y := out[s.outName]
		if y == nil {
			return nil, fmt.Errorf("%s: output %q missing", cfg.Model, s.outName)
		}
		parts = append(parts, y.Clone())
	}
	all, err := concatRows(parts)
	if err != nil {
		return nil, err
	}
	p := &Predictions{Output: all, Notes: s.notes}
	if src, ok := s.ds.(interface{ Path(int) string }); ok {
		for i := 0; i < s.ds.Len(); i++ {
			p.Sources = append(p.Sources, src.Path(i))
		}
	}
	if all.Rank() != 2 || all.DType != graph.Float32 {
		return p, nil // not [batch, classes] logits: the raw output only
	}
	n, c := all.Shape[0], all.Shape[1]
	if len(s.classes) > 0 && len(s.classes) != c {
		return nil, fmt.Errorf("the model has %d outputs per sample but %d class names are known (%v)", c, len(s.classes), s.classes)
	}
	for i := 0; i < n; i++ {
		row := all.Float32s()[i*c : (i+1)*c]
		best := 0
		for k, v := range row {
			if v > row[best] {
				best = k
			}
		}
		var z float64
		for _, v := range row {
			z += math.Exp(float64(v - row[best]))
		}
		p.Classes = append(p.Classes, int64(best))
		p.Probability = append(p.Probability, float32(1/z))
		if len(s.classes) > 0 {
			p.Names = append(p.Names, s.classes[best])
		}
	}
	return p, nil
}
