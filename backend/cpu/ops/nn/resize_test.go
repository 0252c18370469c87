package nn

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/onnxtrain/onnxtrain/graph"
)

// resizeData4x4 is the 1..16 image of the spec's Resize examples.
func resizeData4x4() *graph.Tensor { return f32([]int{1, 1, 4, 4}, seq(16)...) }

// TestResizeAntialias checks the spec's opset-18 antialias examples.
func TestResizeAntialias(t *testing.T) {
	scales := f32([]int{4}, 1, 1, 0.6, 0.6)
	n := testNode("Resize", 1, aString("mode", "linear"), aInt("antialias", 1))
	y := mustRun(t, 18, n, resizeData4x4(), nil, scales)[0]
	assert.Equal(t, []int{1, 1, 2, 2}, y.Shape)
	assertClose(t, []float64{2.875, 4.5, 9.375, 11}, y, 1e-6)

	n = testNode("Resize", 1, aString("mode", "cubic"), aInt("antialias", 1))
	y = mustRun(t, 18, n, resizeData4x4(), nil, scales)[0]
	assertClose(t, []float64{2.5180721, 4.2858863, 9.589329, 11.357142}, y, 1e-6)

	n = testNode("Resize", 1, aString("mode", "linear"), aInt("antialias", 1))
	y = mustRun(t, 18, n, resizeData4x4(), nil, nil, i64([]int{4}, 1, 1, 3, 3))[0]
	assertClose(t, []float64{2.3636363, 3.590909, 4.818182, 7.2727275, 8.5, 9.727273, 12.181818, 13.409091, 14.636364}, y, 1e-6)
}

// TestResizeHalfPixelSymmetric checks the spec's opset-19 examples.
func TestResizeHalfPixelSymmetric(t *testing.T) {
	n := testNode("Resize", 1, aString("mode", "linear"), aString("coordinate_transformation_mode", "half_pixel_symmetric"))
	y := mustRun(t, 19, n, f32([]int{1, 1, 1, 4}, 1, 2, 3, 4), nil, f32([]int{4}, 1, 1, 1, 0.6))[0]
	assertClose(t, []float64{1.6666667, 3.3333333}, y, 1e-6)

	y = mustRun(t, 19, n, f32([]int{1, 1, 2, 2}, 1, 2, 3, 4), nil, f32([]int{4}, 1, 1, 2.3, 2.94))[0]
	assert.Equal(t, []int{1, 1, 4, 5}, y.Shape)
	assertClose(t, []float64{
		1, 1.15986395, 1.5, 1.84013605, 2,
		1.56521738, 1.72508133, 2.06521738, 2.40535343, 2.56521738,
		2.43478262, 2.59464657, 2.93478262, 3.27491867, 3.43478262,
		3, 3.15986395, 3.5, 3.84013605, 4}, y, 1e-6)
}

// TestResizeAxesAndAspectRatio checks the axes attribute and
// keep_aspect_ratio_policy (spec opset-18 examples).
func TestResizeAxesAndAspectRatio(t *testing.T) {
	x := f32([]int{1, 1, 2, 4}, 1, 2, 3, 4, 5, 6, 7, 8)
	n := testNode("Resize", 1, aInts("axes", 2, 3), aString("keep_aspect_ratio_policy", "not_larger"))
	y := mustRun(t, 18, n, x, nil, nil, i64([]int{2}, 1, 3))[0]
	assert.Equal(t, []int{1, 1, 1, 2}, y.Shape)
	assertClose(t, []float64{1, 3}, y, 0)

	n = testNode("Resize", 1, aInts("axes", 2, 3), aString("keep_aspect_ratio_policy", "not_smaller"))
	y = mustRun(t, 18, n, x, nil, nil, i64([]int{2}, 1, 3))[0]
	assert.Equal(t, []int{1, 1, 2, 3}, y.Shape)
	assertClose(t, []float64{1, 2, 4, 5, 6, 8}, y, 0)

	small := f32([]int{1, 1, 2, 2}, 1, 2, 3, 4)
	n = testNode("Resize", 1, aInts("axes", 2, 3), aString("keep_aspect_ratio_policy", "not_larger"))
	y = mustRun(t, 18, n, small, nil, nil, i64([]int{2}, 7, 8))[0]
	assert.Equal(t, []int{1, 1, 7, 7}, y.Shape)
	assertClose(t, []float64{1, 1, 1, 1, 2, 2, 2}, &graph.Tensor{DType: graph.Float32, Shape: []int{7}, Data: y.Float32s()[:7]}, 0)

	n = testNode("Resize", 1, aInts("axes", 3, 2))
	y = mustRun(t, 18, n, small, nil, f32([]int{2}, 3, 2))[0]
	assert.Equal(t, []int{1, 1, 4, 6}, y.Shape)
	assertClose(t, []float64{
		1, 1, 1, 2, 2, 2,
		1, 1, 1, 2, 2, 2,
		3, 3, 3, 4, 4, 4,
		3, 3, 3, 4, 4, 4}, y, 0)
}

// TestResizeCropAndResizeAxes checks tf_crop_and_resize with reordered axes
// and the extrapolation value.
func TestResizeCropAndResizeAxes(t *testing.T) {
	n := testNode("Resize", 1, aString("mode", "linear"), aInts("axes", 3, 2),
		aString("coordinate_transformation_mode", "tf_crop_and_resize"))
	roi := f32([]int{4}, 0.6, 0.4, 0.8, 0.6)
	y := mustRun(t, 18, n, resizeData4x4(), roi, nil, i64([]int{2}, 3, 3))[0]
	assertClose(t, []float64{7.6000004, 7.9, 8.2, 8.8, 9.1, 9.400001, 10, 10.3, 10.6}, y, 1e-6)

	n = testNode("Resize", 1, aString("mode", "linear"), aFloat("extrapolation_value", 10),
		aString("coordinate_transformation_mode", "tf_crop_and_resize"))
	roi = f32([]int{8}, 0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7)
	y = mustRun(t, 13, n, resizeData4x4(), roi, nil, i64([]int{4}, 1, 1, 3, 3))[0]
	assertClose(t, []float64{7.6000004, 10, 10, 12.400001, 10, 10, 10, 10, 10}, y, 1e-6)
}

// TestResizeOpset10AndUpsample checks the legacy asymmetric coordinates of
// Resize-10 and of Upsample with attribute (opset 7) and input (opset 9)
// scales.
func TestResizeOpset10AndUpsample(t *testing.T) {
	x := f32([]int{1, 1, 2, 2}, 1, 2, 3, 4)
	linear := []float64{
		1, 1.5, 2, 2,
		2, 2.5, 3, 3,
		3, 3.5, 4, 4,
		3, 3.5, 4, 4}
	y := mustRun(t, 10, testNode("Resize", 1, aString("mode", "linear")), x, f32([]int{4}, 1, 1, 2, 2))[0]
	assertClose(t, linear, y, 1e-6)
	y = mustRun(t, 7, testNode("Upsample", 1, aString("mode", "linear"), aFloats("scales", 1, 1, 2, 2)), x)[0]
	assertClose(t, linear, y, 1e-6)
	y = mustRun(t, 9, testNode("Upsample", 1), x, f32([]int{4}, 1, 1, 2, 3))[0]
	assert.Equal(t, []int{1, 1, 4, 6}, y.Shape)
	assertClose(t, []float64{
		1, 1, 1, 2, 2, 2,
		1, 1, 1, 2, 2, 2,
		3, 3, 3, 4, 4, 4,
		3, 3, 3, 4, 4, 4}, y, 0)
	// Downsampling nearest in opset 10 rounds up: 1/0.6 -> 2.
	y = mustRun(t, 10, testNode("Resize", 1), f32([]int{1, 1, 2, 4}, 1, 2, 3, 4, 5, 6, 7, 8), f32([]int{4}, 1, 1, 0.6, 0.6))[0]
	assertClose(t, []float64{1, 3}, y, 0)
}

// TestResizeIntegerAndErrors checks nearest on an integer tensor keeps
// the values and dtype, and that malformed inputs give errors.
func TestResizeIntegerAndErrors(t *testing.T) {
	x := &graph.Tensor{DType: graph.Uint8, Shape: []int{1, 3}, Data: []uint8{1, 200, 3}}
	y := mustRun(t, 13, testNode("Resize", 1), x, nil, nil, i64([]int{2}, 1, 6))[0]
	assert.Equal(t, []uint8{1, 1, 200, 200, 3, 3}, y.Data)
	y = mustRun(t, 13, testNode("Resize", 1, aString("mode", "linear")), x, nil, nil, i64([]int{2}, 1, 6))[0]
	assert.Equal(t, graph.Uint8, y.DType)

	_, err := runOp(t, 13, testNode("Resize", 1), x)
	assert.ErrorContains(t, err, "one of scales and sizes")
	_, err = runOp(t, 13, testNode("Resize", 1), x, nil, f32([]int{2}, 1, 2), i64([]int{2}, 1, 6))
	assert.ErrorContains(t, err, "only one")
	_, err = runOp(t, 13, testNode("Resize", 1), x, nil, f32([]int{3}, 1, 2, 3))
	assert.ErrorContains(t, err, "scales has 3 values")
	_, err = runOp(t, 13, testNode("Resize", 1, aString("mode", "area")), x, nil, f32([]int{2}, 1, 2))
	assert.ErrorContains(t, err, "mode")
}
