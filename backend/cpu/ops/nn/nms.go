package nn

import (
	"math"
	"sort"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// nmsBox is a box as (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2.
type nmsBox struct{ y1, x1, y2, x2 float64 }

func (b nmsBox) area() float64 { return (b.y2 - b.y1) * (b.x2 - b.x1) }

// nmsOverlaps reports whether a and b overlap by more than threshold
// (intersection over union); degenerate boxes never suppress.
func nmsOverlaps(a, b nmsBox, threshold float64) bool {
	ia := math.Max(0, math.Min(a.y2, b.y2)-math.Max(a.y1, b.y1)) *
		math.Max(0, math.Min(a.x2, b.x2)-math.Max(a.x1, b.x1))
	if ia <= 0 {
		return false
	}
	aa, ab := a.area(), b.area()
	if aa <= 0 || ab <= 0 {
		return false
	}
	union := aa + ab - ia
	if union <= 0 {
		return false
	}
	return ia/union > threshold
}

// nonMaxSuppressionKernel implements NonMaxSuppression: per batch and class,
// boxes above score_threshold in decreasing score order (lower index first
// on ties), each kept unless it overlaps a kept box by more than
// iou_threshold, at most max_output_boxes_per_class of them. The output is
// (num_selected, 3) int64 rows of (batch, class, box).
func nonMaxSuppressionKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	boxes, scores := in[0], in[1]
	if len(boxes.Shape) != 3 || boxes.Shape[2] != 4 {
		return nil, n.Errorf("boxes must be (batches, spatial_dimension, 4), has shape %v", boxes.Shape)
	}
	nb, nboxes := boxes.Shape[0], boxes.Shape[1]
	if len(scores.Shape) != 3 || scores.Shape[0] != nb || scores.Shape[2] != nboxes {
		return nil, n.Errorf("scores have shape %v, want (%d, classes, %d)", scores.Shape, nb, nboxes)
	}
	nc := scores.Shape[1]
	maxOut := 0
	if t := kern.Opt(in, 2); t != nil && t.Size() > 0 {
		v := t.Int(0)
		if v > math.MaxInt32 {
			v = math.MaxInt32
		}
		maxOut = int(max(v, 0))
	}
	iouThr := 0.0
	if t := kern.Opt(in, 3); t != nil && t.Size() > 0 {
		iouThr = t.Float(0)
	}
	if iouThr < 0 || iouThr > 1 {
		return nil, n.Errorf("iou_threshold %g must be in [0, 1]", iouThr)
	}
	scoreThr, useScoreThr := 0.0, false
	if t := kern.Opt(in, 4); t != nil && t.Size() > 0 {
		scoreThr, useScoreThr = t.Float(0), true
	}
	center := n.AttrInt("center_point_box", 0)
	if center != 0 && center != 1 {
		return nil, n.Errorf("center_point_box %d must be 0 or 1", center)
	}
	bd, err := floatData(n, boxes, "boxes")
	if err != nil {
		return nil, err
	}
	sd, err := floatData(n, scores, "scores")
	if err != nil {
		return nil, err
	}
	all := make([]nmsBox, nb*nboxes)
	for i := range all {
		v := bd[i*4 : i*4+4]
		if center == 1 {
			xc, yc, w, h := v[0], v[1], v[2], v[3]
			all[i] = nmsBox{y1: yc - h/2, x1: xc - w/2, y2: yc + h/2, x2: xc + w/2}
		} else {
			all[i] = nmsBox{y1: math.Min(v[0], v[2]), x1: math.Min(v[1], v[3]), y2: math.Max(v[0], v[2]), x2: math.Max(v[1], v[3])}
		}
	}
	var sel []int64
	cand := make([]int, 0, nboxes)
	var kept []int
	for b := 0; b < nb && maxOut > 0; b++ {
		bx := all[b*nboxes : (b+1)*nboxes]
		for c := 0; c < nc; c++ {
			sc := sd[(b*nc+c)*nboxes : (b*nc+c+1)*nboxes]
			cand = cand[:0]
			for i, s := range sc {
				if !useScoreThr || s > scoreThr {
					cand = append(cand, i)
				}
			}
			sort.SliceStable(cand, func(i, j int) bool { return sc[cand[i]] > sc[cand[j]] })
			kept = kept[:0]
			for _, i := range cand {
				if len(kept) >= maxOut {
					break
				}
				ok := true
				for _, k := range kept {
					if nmsOverlaps(bx[k], bx[i], iouThr) {
						ok = false
						break
					}
				}
				if ok {
					kept = append(kept, i)
					sel = append(sel, int64(b), int64(c), int64(i))
				}
			}
		}
	}
	out := &graph.Tensor{DType: graph.Int64, Shape: []int{len(sel) / 3, 3}, Data: sel}
	if sel == nil {
		out.Data = []int64{}
	}
	return []*graph.Tensor{out}, nil
}
