package train

import (
	"errors"
	"fmt"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
)

// ErrFixedBatch is wrapped by the error of a fixed-batch export whose graph
// depends on that batch size.
var ErrFixedBatch = errors.New("the graph depends on the batch size it was exported with")

// batchParam names the batch dimension RelaxFixedBatch opens.
const batchParam = "batch"

// RelaxFixedBatch opens a fixed-batch export (torch.onnx.export without
// dynamic_axes) to any batch size: when every data input of m has the same
// fixed first dimension B, that dimension (and the outputs' first dimension
// when it is B) becomes the symbolic "batch", and value infos, which would
// pin intermediate values to B, are dropped. Shape inference at another
// batch size then checks that nothing in the graph depends on B; when
// something does (a Reshape to a constant shape holding B, say), the error
// names the node and suggests re-exporting with dynamic_axes, and m is left
// as it was. The note says what was done ("" when m has a dynamic batch).
// batch is the batch size the caller will use (0: any).
func RelaxFixedBatch(m *graph.Model, batch int) (string, error) {
	g := m.Graph
	var data []*graph.ValueInfo
	for _, in := range g.Inputs {
		if _, ok := g.Initializers[in.Name]; !ok {
			data = append(data, in)
		}
	}
	fixed := int64(-1)
	for _, in := range data {
		ty := in.Type
		if ty == nil || !ty.HasShape || len(ty.Shape) == 0 || !ty.Shape[0].Known {
			return "", nil // dynamic (or unknown) batch somewhere: leave it
		}
		if fixed >= 0 && ty.Shape[0].Value != fixed {
			return "", nil // inputs disagree: not a batch dimension
		}
		fixed = ty.Shape[0].Value
	}
	if fixed <= 0 {
		return "", nil
	}
	trial := int64(batch)
	if trial <= 0 || trial == fixed {
		trial = fixed + 1
	}
	// Check at the trial batch size before changing anything.
	known := map[string]*graph.Type{}
	for _, in := range data {
		known[in.Name] = withFirstDim(in.Type, graph.Dim{Value: trial, Known: true})
	}
	noVI := *g
	noVI.ValueInfo = nil
	types, err := graph.InferShapes(&noVI, m.Opset(), known)
	var problem string
	culprit := "a node"
	if n := fixedBatchCulprit(&noVI, types, trial, fixed); n != nil {
		culprit = fmt.Sprintf("node %s (%s)", n.Label(), n.OpType)
	}
	if err != nil {
		problem = fmt.Sprintf("at batch size %d, %s depends on it (%v)", trial, culprit, err)
	} else {
		for _, o := range g.Outputs {
			ty := types[o.Name]
			if ty == nil || !ty.HasShape || len(ty.Shape) == 0 || !ty.Shape[0].Known || ty.Shape[0].Value == trial {
				continue
			}
			problem = fmt.Sprintf("at batch size %d, %s turns the batch back into %d (output %q comes out as %v)", trial, culprit, fixed, o.Name, ty)
			break
		}
	}
	if problem != "" {
		advice := fmt.Sprintf("re-export it with dynamic_axes={%s}", dynamicAxesHint(data, g.Outputs))
		if int64(batch) == fixed {
			// It still runs at its own batch size.
			return fmt.Sprintf("the model was exported with a fixed batch of %d (no dynamic_axes) and %s: it runs at --batch-size %d only (a last partial batch needs --drop-last); to use other sizes, %s",
				fixed, problem, fixed, advice), nil
		}
		return "", fmt.Errorf("%w: the model was exported with a fixed batch of %d (no dynamic_axes), and %s; use --batch-size %d, or %s",
			ErrFixedBatch, fixed, problem, fixed, advice)
	}
	var names []string
	for _, in := range data {
		in.Type = withFirstDim(in.Type, graph.Dim{Param: batchParam})
		names = append(names, in.Name)
	}
	for _, o := range g.Outputs {
		if ty := o.Type; ty != nil && ty.HasShape && len(ty.Shape) > 0 && ty.Shape[0].Known && ty.Shape[0].Value == fixed {
			o.Type = withFirstDim(ty, graph.Dim{Param: batchParam})
		}
	}
	g.ValueInfo = map[string]*graph.ValueInfo{}
	return fmt.Sprintf("the model was exported with a fixed batch of %d (no dynamic_axes): taking the first dimension of %s as the batch; nothing in the graph depends on it, so any batch size runs",
		fixed, strings.Join(names, ", ")), nil
}

func dynamicAxesHint(ins, outs []*graph.ValueInfo) string {
	var parts []string
	for _, v := range append(append([]*graph.ValueInfo(nil), ins...), outs...) {
		parts = append(parts, fmt.Sprintf("'%s': {0: 'batch'}", v.Name))
	}
	return strings.Join(parts, ", ")
}

func withFirstDim(t *graph.Type, d graph.Dim) *graph.Type {
	c := *t
	c.Shape = append([]graph.Dim{d}, t.Shape[1:]...)
	return &c
}

// fixedBatchCulprit finds the first node that reads a value whose first
// dimension is the trial batch and writes one whose first dimension is the
// exported batch again.
func fixedBatchCulprit(g *graph.Graph, types map[string]*graph.Type, trial, fixed int64) *graph.Node {
	first := func(name string) (int64, bool) {
		ty := types[name]
		if ty == nil || !ty.HasShape || len(ty.Shape) == 0 || !ty.Shape[0].Known {
			return 0, false
		}
		return ty.Shape[0].Value, true
	}
	for _, n := range g.Nodes {
		reads := false
		for _, in := range n.Inputs {
			if _, isInit := g.Initializers[in]; isInit {
				continue
			}
			if d, ok := first(in); ok && d == trial {
				reads = true
			}
		}
		if !reads {
			continue
		}
		for _, o := range n.Outputs {
			if d, ok := first(o); ok && d == fixed {
				return n
			}
		}
	}
	return nil
}
