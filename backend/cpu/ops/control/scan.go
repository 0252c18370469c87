package control

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// scanSpec is what one run of a Scan body sequence needs: how to cut the
// scan inputs and how to stack the scan outputs.
type scanSpec struct {
	body    *graph.Graph
	nStates int
	nScanIn int
	nOut    int // scan outputs
	inAxes  []int
	inRev   []bool
	outAxes []int64 // as given; normalised once the element rank is known
	outRev  []bool
}

// scanKernel implements Scan. From opset 9 the inputs are (initial
// states..., scan inputs...) and every scan input is cut along its
// scan_input_axes entry; opset 8 has a leading sequence_lens input, a batch
// axis 0 and the scan axis 1.
func scanKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	body, err := bodyAttr(n, "body")
	if err != nil {
		return nil, err
	}
	m := int(n.AttrInt("num_scan_inputs", -1))
	if !n.HasAttr("num_scan_inputs") || m < 1 {
		return nil, n.Errorf("attribute num_scan_inputs must be at least 1, is %d", m)
	}
	if ctx != nil && ctx.Opset > 0 && ctx.Opset < 9 {
		return scan8(ctx, n, body, m, in)
	}
	if len(in) < m {
		return nil, n.Errorf("has %d inputs, fewer than num_scan_inputs=%d", len(in), m)
	}
	for i, t := range in {
		if t == nil {
			return nil, n.Errorf("input %d is missing", i)
		}
	}
	sp, err := newScanSpec(n, body, len(in)-m, m)
	if err != nil {
		return nil, err
	}
	sp.inAxes = make([]int, m)
	axes := n.AttrInts("scan_input_axes", nil)
	if axes != nil && len(axes) != m {
		return nil, n.Errorf("scan_input_axes has %d entries, want num_scan_inputs=%d", len(axes), m)
	}
	for i := range sp.inAxes {
		if axes != nil {
			x := in[sp.nStates+i]
			a, err := kern.NormAxis(n, int(axes[i]), x.Rank())
			if err != nil {
				return nil, err
			}
			sp.inAxes[i] = a
		}
	}
	if sp.inRev, err = scanDirections(n, "scan_input_directions", m); err != nil {
		return nil, err
	}
	if sp.outRev, err = scanDirections(n, "scan_output_directions", sp.nOut); err != nil {
		return nil, err
	}
	sp.outAxes = n.AttrInts("scan_output_axes", nil)
	if sp.outAxes != nil && len(sp.outAxes) != sp.nOut {
		return nil, n.Errorf("scan_output_axes has %d entries, want %d (one per scan output)", len(sp.outAxes), sp.nOut)
	}
	return sp.run(ctx, n, in[:sp.nStates], in[sp.nStates:], -1)
}

// newScanSpec checks the body's arity against the node's.
func newScanSpec(n *graph.Node, body *graph.Graph, nStates, m int) (*scanSpec, error) {
	if len(body.Inputs) != nStates+m {
		return nil, n.Errorf("body takes %d inputs, want %d (%d states and %d scan inputs)", len(body.Inputs), nStates+m, nStates, m)
	}
	nOut := len(body.Outputs) - nStates
	if nOut < 0 {
		return nil, n.Errorf("body returns %d outputs, fewer than the %d states", len(body.Outputs), nStates)
	}
	if len(n.Outputs) > nStates+nOut {
		return nil, n.Errorf("has %d outputs, but the body yields only %d states and %d scan outputs", len(n.Outputs), nStates, nOut)
	}
	return &scanSpec{body: body, nStates: nStates, nScanIn: m, nOut: nOut}, nil
}

// scanDirections reads a directions attribute: count flags of 0 (forward)
// or 1 (reverse), all forward when absent.
func scanDirections(n *graph.Node, name string, count int) ([]bool, error) {
	rev := make([]bool, count)
	d := n.AttrInts(name, nil)
	if d == nil {
		return rev, nil
	}
	if len(d) != count {
		return nil, n.Errorf("%s has %d entries, want %d", name, len(d), count)
	}
	for i, v := range d {
		switch v {
		case 0:
		case 1:
			rev[i] = true
		default:
			return nil, n.Errorf("%s[%d] is %d, want 0 or 1", name, i, v)
		}
	}
	return rev, nil
}

// run iterates the body over the scan inputs and returns the final states
// followed by the scan outputs. seqLen < 0 means the full length of the
// scan axis; otherwise only the first seqLen positions are scanned.
func (sp *scanSpec) run(ctx *kern.Context, n *graph.Node, states, scanIn []*graph.Tensor, seqLen int) ([]*graph.Tensor, error) {
	length := -1
	for i, x := range scanIn {
		if x.Rank() == 0 {
			return nil, n.Errorf("scan input %d is a scalar: it has no axis to scan", i)
		}
		d := x.Shape[sp.inAxes[i]]
		if length >= 0 && d != length {
			return nil, n.Errorf("scan input %d has %d positions along its scan axis, scan input 0 has %d", i, d, length)
		}
		length = d
	}
	if seqLen >= 0 {
		if seqLen > length {
			return nil, n.Errorf("sequence length %d exceeds the scan axis length %d", seqLen, length)
		}
		length = seqLen
	}
	cur := append([]*graph.Tensor{}, states...)
	scans := make([][]*graph.Tensor, sp.nOut)
	args := make([]*graph.Tensor, sp.nStates+sp.nScanIn)
	for t := 0; t < length; t++ {
		copy(args, cur)
		for i, x := range scanIn {
			pos := t
			if sp.inRev[i] {
				pos = length - 1 - t
			}
			s, err := takeAxis(x, sp.inAxes[i], pos)
			if err != nil {
				return nil, n.Errorf("scan input %d: %v", i, err)
			}
			args[sp.nStates+i] = s
		}
		out, err := runBody(ctx, n, "body", sp.body, args, len(sp.body.Outputs))
		if err != nil {
			return nil, err
		}
		for i := range cur {
			if cur[i].DType != out[i].DType {
				return nil, n.Errorf("state %d entered the body as %v and left it as %v", i, cur[i].DType, out[i].DType)
			}
		}
		copy(cur, out[:sp.nStates])
		for k := range scans {
			scans[k] = append(scans[k], out[sp.nStates+k])
		}
	}
	res := cur
	for k, parts := range scans {
		d, shape := elemInfo(sp.body.Outputs[sp.nStates+k])
		if len(parts) > 0 {
			shape = parts[0].Shape
		}
		axis := 0
		if sp.outAxes != nil {
			a := int(sp.outAxes[k])
			r := len(shape) + 1
			if a < -r || a >= r {
				return nil, n.Errorf("scan_output_axes[%d]=%d is out of range for a scan output of rank %d", k, a, r)
			}
			if a < 0 {
				a += r
			}
			axis = a
		}
		st, err := stack(parts, axis, sp.outRev[k], d, shape)
		if err != nil {
			return nil, n.Errorf("scan output %d: %v", k, err)
		}
		res = append(res, st)
	}
	return res, nil
}

// scan8 is Scan-8: inputs (sequence_lens, initial states..., scan inputs...)
// where every tensor has a batch axis 0 and scan inputs scan along axis 1.
// The body sees one batch entry at a time. Scan outputs of sequences shorter
// than the longest are padded with zeros.
func scan8(ctx *kern.Context, n *graph.Node, body *graph.Graph, m int, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(in) < 1+m {
		return nil, n.Errorf("has %d inputs, want sequence_lens and at least num_scan_inputs=%d more", len(in), m)
	}
	seqLens := in[0]
	rest := in[1:]
	for i, t := range rest {
		if t == nil {
			return nil, n.Errorf("input %d is missing", i+1)
		}
		if t.Rank() == 0 {
			return nil, n.Errorf("input %d is a scalar, but Scan-8 needs a batch axis", i+1)
		}
	}
	nStates := len(rest) - m
	sp, err := newScanSpec(n, body, nStates, m)
	if err != nil {
		return nil, err
	}
	sp.inAxes = make([]int, m)
	if sp.inRev, err = scanDirections(n, "directions", m); err != nil {
		return nil, err
	}
	sp.outRev = make([]bool, sp.nOut)
	batch := rest[0].Shape[0]
	for i, t := range rest {
		if t.Shape[0] != batch {
			return nil, n.Errorf("input %d has batch size %d, input 1 has %d", i+1, t.Shape[0], batch)
		}
	}
	maxLen := 0
	for i, x := range rest[nStates:] {
		if x.Rank() < 2 {
			return nil, n.Errorf("scan input %d has shape %v: Scan-8 needs [batch, sequence, ...]", i, x.Shape)
		}
		if i > 0 && x.Shape[1] != maxLen {
			return nil, n.Errorf("scan input %d has sequence length %d, scan input 0 has %d", i, x.Shape[1], maxLen)
		}
		maxLen = x.Shape[1]
	}
	if seqLens != nil && seqLens.Size() != batch {
		return nil, n.Errorf("sequence_lens has %d entries, want the batch size %d", seqLens.Size(), batch)
	}
	perBatch := make([][]*graph.Tensor, batch)
	for b := 0; b < batch; b++ {
		seqLen := maxLen
		if seqLens != nil {
			seqLen = int(seqLens.Int(b))
			if seqLen < 0 || seqLen > maxLen {
				return nil, n.Errorf("sequence_lens[%d]=%d is outside [0, %d]", b, seqLen, maxLen)
			}
		}
		states := make([]*graph.Tensor, nStates)
		scanIn := make([]*graph.Tensor, m)
		for i, t := range rest {
			s, err := takeAxis(t, 0, b)
			if err != nil {
				return nil, n.Errorf("input %d: %v", i+1, err)
			}
			if i < nStates {
				states[i] = s
			} else {
				if s, err = narrowAxis(s, 0, seqLen); err != nil {
					return nil, n.Errorf("input %d: %v", i+1, err)
				}
				scanIn[i-nStates] = s
			}
		}
		out, err := sp.run(ctx, n, states, scanIn, -1)
		if err != nil {
			return nil, err
		}
		perBatch[b] = out
	}
	res := make([]*graph.Tensor, nStates+sp.nOut)
	for k := range res {
		parts := make([]*graph.Tensor, batch)
		for b := range parts {
			parts[b] = perBatch[b][k]
		}
		if k >= nStates {
			var err error
			if parts, err = padScanParts(parts, maxLen, sp.body.Outputs[k]); err != nil {
				return nil, n.Errorf("scan output %d: %v", k-nStates, err)
			}
		}
		d, shape := elemInfo(sp.body.Outputs[k])
		t, err := stack(parts, 0, false, d, shape)
		if err != nil {
			return nil, n.Errorf("output %d: %v", k, err)
		}
		res[k] = t
	}
	return res, nil
}

// padScanParts zero-pads each batch entry's scan output (shape [len, ...])
// to maxLen positions along axis 0.
func padScanParts(parts []*graph.Tensor, maxLen int, vi *graph.ValueInfo) ([]*graph.Tensor, error) {
	var ref *graph.Tensor
	for _, p := range parts {
		if p.Shape[0] > 0 {
			ref = p
			break
		}
	}
	d, elem := elemInfo(vi)
	if ref != nil {
		d, elem = ref.DType, ref.Shape[1:]
	}
	out := make([]*graph.Tensor, len(parts))
	for b, p := range parts {
		if p.Shape[0] == maxLen && p.DType == d && graph.SameShape(p.Shape[1:], elem) {
			out[b] = p
			continue
		}
		if p.Shape[0] > 0 && (p.DType != d || !graph.SameShape(p.Shape[1:], elem)) {
			return nil, errShapeMismatch(b, p, d, elem)
		}
		full, err := graph.NewTensor(d, append([]int{maxLen}, elem...))
		if err != nil {
			return nil, err
		}
		if err := copyRuns(full.Data, p.Data, 0, 0, 0, 0, 1, p.Size()); err != nil {
			return nil, err
		}
		out[b] = full
	}
	return out, nil
}
