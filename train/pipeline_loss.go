package train

import "github.com/onnxtrain/onnxtrain/graph"

// LossAppender returns a function that appends the loss lc describes to a
// graph g over its output out, as Build does for the whole model, and
// returns the scalar loss, the labels input it added ("" when the loss is
// in the graph) and that input's dtype. The pipeline package uses it to put
// the loss on the last stage (its pipeline.LossFunc).
func LossAppender(m *graph.Model, lc LossConfig) func(g *graph.Graph, out string, opset int64) (string, string, graph.DType, error) {
	return func(g *graph.Graph, out string, _ int64) (string, string, graph.DType, error) {
		p := &Program{Model: m, cfg: ProgramConfig{Loss: lc}}
		loss, err := p.addLoss(g, out)
		if err != nil {
			return "", "", graph.Undefined, err
		}
		if !p.NeedsLabels {
			return loss, "", graph.Undefined, nil
		}
		return loss, labelsInput, p.labelDType, nil
	}
}
