package nn

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/onnxtrain/onnxtrain/graph"
)

// roiAlignX and roiAlignMaxY are the spec's roialign_mode_max example.
var roiAlignX = []float32{
	0.2764, 0.715, 0.1958, 0.3416, 0.4638, 0.0259, 0.2963, 0.6518, 0.4856, 0.725,
	0.9637, 0.0895, 0.2919, 0.6753, 0.0234, 0.6132, 0.8085, 0.5324, 0.8992, 0.4467,
	0.3265, 0.8479, 0.9698, 0.2471, 0.9336, 0.1878, 0.4766, 0.4308, 0.34, 0.2162,
	0.0206, 0.172, 0.2155, 0.4394, 0.0653, 0.3406, 0.7724, 0.3921, 0.2541, 0.5799,
	0.4062, 0.2194, 0.4473, 0.4687, 0.7109, 0.9327, 0.9815, 0.632, 0.1728, 0.6119,
	0.3097, 0.1283, 0.4984, 0.5068, 0.4279, 0.0173, 0.4388, 0.043, 0.4671, 0.7119,
	0.1011, 0.8477, 0.4726, 0.1777, 0.9923, 0.4042, 0.1869, 0.7795, 0.9946, 0.9689,
	0.1366, 0.3671, 0.7011, 0.6234, 0.9867, 0.5585, 0.6985, 0.5609, 0.8788, 0.9928,
	0.5697, 0.8511, 0.6711, 0.9406, 0.8751, 0.7496, 0.165, 0.1049, 0.1559, 0.2514,
	0.7012, 0.4056, 0.7879, 0.3461, 0.0415, 0.2998, 0.5094, 0.3727, 0.5482, 0.0502,
}

var roiAlignMaxY = []float32{
	0.3445228, 0.37310338, 0.37865096, 0.446696, 0.37991184,
	0.4133513, 0.5455125, 0.6651902, 0.55805874, 0.27110294,
	0.21223956, 0.40924096, 0.8417618, 0.792561, 0.37196714,
	0.46835402, 0.39741728, 0.8012819, 0.4969306, 0.5495158,
	0.3595896, 0.5196813, 0.5403741, 0.23814403, 0.19992709,
	0.30517197, 0.5086199, 0.3189761, 0.4054401, 0.47630402,
	0.50862, 0.8477, 0.37808004, 0.24936005, 0.79384017,
	0.17620805, 0.29368007, 0.44870415, 0.4987201, 0.63148826,
	0.51066005, 0.8511, 0.5368801, 0.9406, 0.70008016,
	0.4487681, 0.51066035, 0.5042561, 0.5643603, 0.42004836,
	0.21062402, 0.3510401, 0.37416005, 0.5967599, 0.46507207,
	0.32336006, 0.31180006, 0.6236001, 0.9946, 0.7751202,
	0.35744014, 0.5588001, 0.35897616, 0.7030401, 0.6353923,
	0.5996801, 0.27940005, 0.17948808, 0.35152006, 0.31769615,
	0.3598083, 0.40752012, 0.2385281, 0.43856013, 0.26313624,
}

// TestRoiAlignMax is the spec's roialign_mode_max example.
func TestRoiAlignMax(t *testing.T) {
	n := testNode("RoiAlign", 1, aString("mode", "max"), aFloat("spatial_scale", 1), aInt("output_height", 5),
		aInt("output_width", 5), aInt("sampling_ratio", 2), aString("coordinate_transformation_mode", "output_half_pixel"))
	rois := f32([]int{3, 4}, 0, 0, 9, 9, 0, 5, 4, 9, 5, 5, 9, 9)
	y := mustRun(t, 16, n, f32([]int{1, 1, 10, 10}, roiAlignX...), rois, i64([]int{3}, 0, 0, 0))[0]
	assert.Equal(t, []int{3, 1, 5, 5}, y.Shape)
	assertClose(t, f64s(roiAlignMaxY...), y, 1e-5)
}

// TestRoiAlignAvgHalfPixel checks one hand-computed bin: a 2x2 RoI over a
// 2x2 image, shifted by half a pixel, samples its centre.
func TestRoiAlignAvgHalfPixel(t *testing.T) {
	x := f32([]int{1, 1, 2, 2}, 1, 2, 3, 4)
	rois := f32([]int{1, 4}, 0, 0, 2, 2)
	n := testNode("RoiAlign", 1, aInt("sampling_ratio", 1))
	y := mustRun(t, 16, n, x, rois, i64([]int{1}, 0))[0]
	assertClose(t, []float64{2.5}, y, 1e-6)
	// max mode takes the largest weighted corner: 0.25 * 4.
	n = testNode("RoiAlign", 1, aInt("sampling_ratio", 1), aString("mode", "max"))
	y = mustRun(t, 16, n, x, rois, i64([]int{1}, 0))[0]
	assertClose(t, []float64{1}, y, 1e-6)
	_, err := runOp(t, 16, n, x, rois, i64([]int{1}, 3))
	assert.ErrorContains(t, err, "batch index")
}

// TestMaxRoiPool checks a 2x2 pooling of a whole 4x4 image and of a RoI
// that is clipped by the image border.
func TestMaxRoiPool(t *testing.T) {
	x := f32([]int{1, 1, 4, 4}, seq(16)...)
	n := testNode("MaxRoiPool", 1, aInts("pooled_shape", 2, 2))
	y := mustRun(t, 1, n, x, f32([]int{2, 5}, 0, 0, 0, 3, 3, 0, 2, 2, 5, 5))[0]
	assert.Equal(t, []int{2, 1, 2, 2}, y.Shape)
	// The second RoI spans rows/cols 2..5 of which 2..3 exist: bins of two
	// pixels, the far ones empty.
	assertClose(t, []float64{6, 8, 14, 16, 16, 0, 0, 0}, y, 0)
}

// gridX and gridPoints are the spec's GridSample "additional" examples.
var (
	gridX      = f32([]int{1, 1, 3, 2}, 0, 1, 2, 3, 4, 5)
	gridPoints = []float32{-1, -0.8, -0.6, -0.5, -0.1, -0.2, 0.7, 0, 0, 0.4, 0.2, -0.2, -0.3, 0.5, -1, 1}
)

// TestGridSampleModes checks the spec's opset-20 GridSample examples.
func TestGridSampleModes(t *testing.T) {
	grid := f32([]int{1, 2, 4, 2}, gridPoints...)
	cases := []struct {
		mode  string
		align int64
		want  []float32
	}{
		{"nearest", 0, []float32{0, 0, 2, 3, 4, 3, 4, 4}},
		{"nearest", 1, []float32{0, 0, 2, 3, 2, 3, 4, 4}},
		{"linear", 0, []float32{0, 0.45, 1.8, 2.4, 3.7, 2.1, 3.7, 1}},
		{"linear", 1, []float32{0.4, 1.2, 2.05, 2.85, 3.3, 2.2, 3.35, 4}},
		{"cubic", 0, []float32{-0.173250, 0.284265, 1.923106, 2.568000, 5.170375, 2.284414, 4.744844, 1.046875}},
		{"cubic", 1, []float32{0.304001, 1.128750, 2.266270, 3.144844, 4.531500, 2.455360, 4.599819, 4}},
	}
	for _, tc := range cases {
		n := testNode("GridSample", 1, aString("mode", tc.mode), aInt("align_corners", tc.align))
		y := mustRun(t, 20, n, gridX, grid)[0]
		assert.Equal(t, []int{1, 1, 2, 4}, y.Shape)
		assertClose(t, f64s(tc.want...), y, 1e-4)
	}
}

// TestGridSamplePadding checks border and reflection far outside the image.
func TestGridSamplePadding(t *testing.T) {
	x := f32([]int{1, 1, 1, 4}, 10, 20, 30, 40)
	// x coordinates -3 (left, far out) and 1.5 (right, out); y = 0.
	grid := f32([]int{1, 1, 2, 2}, -3, 0, 1.5, 0)
	y := mustRun(t, 20, testNode("GridSample", 1, aString("padding_mode", "border")), x, grid)[0]
	assertClose(t, []float64{10, 40}, y, 1e-6)
	// align_corners=0: -3 maps to pixel -4.5, reflected twice in
	// [-0.5, 3.5] to 3.5 (the last pixel, its right neighbour reflecting
	// back onto it); 1.5 maps to 4.5, reflected to 2.5 (between 30 and 40).
	y = mustRun(t, 20, testNode("GridSample", 1, aString("padding_mode", "reflection")), x, grid)[0]
	assertClose(t, []float64{40, 35}, y, 1e-6)
	y = mustRun(t, 20, testNode("GridSample", 1), x, grid)[0]
	assertClose(t, []float64{0, 0}, y, 1e-6)
}

// TestGridSampleVolumetric samples a 2x2x2 volume trilinearly.
func TestGridSampleVolumetric(t *testing.T) {
	x := f32([]int{1, 1, 2, 2, 2}, 0, 1, 2, 3, 4, 5, 6, 7)
	// Points (x, y, z): the centre, the origin corner, and x = +1.
	grid := f32([]int{1, 1, 1, 3, 3}, 0, 0, 0, -1, -1, -1, 1, -1, -1)
	y := mustRun(t, 20, testNode("GridSample", 1, aInt("align_corners", 1)), x, grid)[0]
	assert.Equal(t, []int{1, 1, 1, 1, 3}, y.Shape)
	assertClose(t, []float64{3.5, 0, 1}, y, 1e-6)
}

// TestGridSampleErrors checks the grid shape check.
func TestGridSampleErrors(t *testing.T) {
	_, err := runOp(t, 20, testNode("GridSample", 1), gridX, f32([]int{1, 2, 2, 3}, make([]float32, 12)...))
	assert.ErrorContains(t, err, "grid has shape")
	_, err = runOp(t, 20, testNode("GridSample", 1, aString("mode", "area")), gridX, f32([]int{1, 1, 1, 2}, 0, 0))
	assert.ErrorContains(t, err, "mode")
}

// TestNonMaxSuppressionEmpty checks that max_output_boxes_per_class = 0
// (the default) selects nothing, as a (0, 3) tensor.
func TestNonMaxSuppressionEmpty(t *testing.T) {
	boxes := f32([]int{1, 1, 4}, 0, 0, 1, 1)
	scores := f32([]int{1, 1, 1}, 0.9)
	y := mustRun(t, 11, testNode("NonMaxSuppression", 1), boxes, scores)[0]
	assert.Equal(t, []int{0, 3}, y.Shape)
	assert.Equal(t, graph.Int64, y.DType)
	y = mustRun(t, 11, testNode("NonMaxSuppression", 1), boxes, scores, i64([]int{1}, 5))[0]
	assert.Equal(t, []int64{0, 0, 0}, y.Int64s())
}
