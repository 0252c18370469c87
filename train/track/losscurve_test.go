package track

import (
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func readPNG(t *testing.T, path string) image.Image {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	return img
}

// near reports whether a pixel within radius of (x, y) has colour want, give or take tol
// per channel.
func near(img image.Image, x, y, radius int, want color.RGBA, tol int) bool {
	for dy := -radius; dy <= radius; dy++ {
		for dx := -radius; dx <= radius; dx++ {
			r, g, b, _ := img.At(x+dx, y+dy).RGBA()
			d := func(c uint32, w uint8) int { return abs(int(c>>8) - int(w)) }
			if d(r, want.R) <= tol && d(g, want.G) <= tol && d(b, want.B) <= tol {
				return true
			}
		}
	}
	return false
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func TestLossCurveDrawsWhereTheDataIs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out", "loss.png")
	c := NewLossCurve(path)
	// Loss falls linearly from 1 at step 1 to 0 at step 40; validation at steps 10 and 30.
	for step := 1; step <= 40; step++ {
		c.Step(Record{Step: step, Metrics: map[string]float64{MetricLoss: float64(40-step) / 39}})
	}
	c.Eval(Record{Step: 10, Metrics: map[string]float64{MetricValLoss: 0.9}})
	c.Eval(Record{Step: 30, Metrics: map[string]float64{MetricValLoss: 0.7}})
	c.Step(Record{Step: 41, Metrics: map[string]float64{MetricLR: 1}}) // no loss: not drawn
	require.NoError(t, c.Close())

	img := readPNG(t, path)
	require.Equal(t, image.Rect(0, 0, 800, 480), img.Bounds())

	// The plot spans x 72..776 for steps 1..40 and y 432..40 for losses 0..1 (ticks every 0.2).
	px := func(step float64) int { return int(math.Round(72 + (step-1)/39*704)) }
	py := func(loss float64) int { return int(math.Round(432 - loss*392)) }
	blue := color.RGBA{31, 119, 180, 255}
	orange := color.RGBA{255, 127, 14, 255}
	white := color.RGBA{255, 255, 255, 255}
	for _, step := range []float64{3, 15.5, 20.5, 37} {
		loss := (40 - step) / 39
		assert.True(t, near(img, px(step), py(loss), 1, blue, 20), "loss curve at step %v", step)
	}
	assert.True(t, near(img, px(10), py(0.9), 1, orange, 20), "val_loss marker at step 10")
	assert.True(t, near(img, px(30), py(0.7), 1, orange, 20), "val_loss marker at step 30")
	// Away from the curves the plot is blank.
	assert.True(t, near(img, 500, 150, 0, white, 0), "background above the curve")
	assert.True(t, near(img, 300, 400, 0, white, 0), "background below the curve")
	assert.False(t, near(img, 500, 150, 40, blue, 60), "no curve far from the data")
	// The axes are black, and the labels of the y ticks stand left of the axis.
	assert.True(t, near(img, 72, 300, 0, color.RGBA{0, 0, 0, 255}, 0), "y axis")
	assert.True(t, near(img, 400, 432, 0, color.RGBA{0, 0, 0, 255}, 0), "x axis")
	assert.True(t, near(img, 50, py(0.4)-3, 8, color.RGBA{40, 40, 40, 255}, 30), "tick label 0.4")
	// The legend names both curves.
	assert.True(t, near(img, 700, 20, 100, blue, 10), "legend: loss")
	assert.True(t, near(img, 700, 20, 100, orange, 10), "legend: val_loss")
}

func TestLossCurveSmoothsLongRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loss.png")
	c := NewLossCurve(path)
	rng := rand.New(rand.NewPCG(1, 2))
	for step := 1; step <= 500; step++ {
		loss := 2*math.Exp(-float64(step)/100) + 0.3*rng.Float64()
		c.Step(Record{Step: step, Metrics: map[string]float64{MetricLoss: loss}})
	}
	require.NoError(t, c.Close())
	img := readPNG(t, path)
	assert.True(t, near(img, 400, 240, 400, color.RGBA{166, 200, 228, 255}, 8), "raw loss, light")
	assert.True(t, near(img, 400, 240, 400, color.RGBA{31, 119, 180, 255}, 8), "smoothed loss, dark")
}

func TestSmoothIsDebiased(t *testing.T) {
	// A debiased moving average of a constant is that constant from the first point on.
	points := make([]point, 120)
	for i := range points {
		points[i] = point{float64(i + 1), 0.7}
	}
	for _, p := range smooth(points) {
		assert.InDelta(t, 0.7, p.y, 1e-12)
	}
	// And it follows a step up with a lag: halfway between after a few points.
	points[60].y = 1.7
	for i := 61; i < len(points); i++ {
		points[i].y = 1.7
	}
	s := smooth(points)
	assert.InDelta(t, 0.7, s[59].y, 1e-12)
	assert.Greater(t, s[61].y, 0.7)
	assert.Less(t, s[61].y, 1.7)
	assert.InDelta(t, 1.7, s[119].y, 0.01)
}

func TestAxisTicks(t *testing.T) {
	a := newAxis(0.03, 2.31, 0, 100, true, false)
	assert.Equal(t, []float64{0, 0.5, 1, 1.5, 2, 2.5}, a.ticks)
	assert.Equal(t, "1.5", a.label(1.5))
	assert.Equal(t, 0.0, a.lo)
	assert.Equal(t, 2.5, a.hi)
	assert.Equal(t, 50.0, a.pixel(1.25))

	steps := newAxis(1, 10000, 0, 100, false, true)
	assert.Equal(t, []float64{2000, 4000, 6000, 8000, 10000}, steps.ticks)
	assert.Equal(t, "4000", steps.label(4000))

	unit := newAxis(0, 1, 0, 100, false, true)
	require.Equal(t, []float64{0, 1}, unit.ticks)
	assert.Equal(t, "0", unit.label(unit.ticks[0]), "not -0")

	one := newAxis(7, 7, 0, 100, false, true)
	assert.Equal(t, 6.0, one.lo)
	assert.Equal(t, 8.0, one.hi)

	tiny := newAxis(1e-6, 5e-6, 0, 100, true, false)
	assert.Equal(t, []float64{1e-6, 1.5e-6, 2e-6, 2.5e-6, 3e-6, 3.5e-6, 4e-6, 4.5e-6, 5e-6}, tiny.ticks)
	assert.Equal(t, "3e-06", tiny.label(3e-6))

	tenths := newAxis(0.05, 0.58, 0, 100, true, false)
	assert.Equal(t, []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, tenths.ticks)
	assert.Equal(t, "0.3", tenths.label(0.3))
}

func TestLossCurveEmptyAndNonFinite(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.png")
	require.NoError(t, NewLossCurve(empty).Close())
	img := readPNG(t, empty)
	assert.Equal(t, 800, img.Bounds().Dx())
	assert.True(t, near(img, 424, 236, 60, color.RGBA{40, 40, 40, 255}, 30), "says there is no data")

	c := NewLossCurve(filepath.Join(dir, "nan.png")).(*LossCurve)
	c.Step(Record{Step: 1, Metrics: map[string]float64{MetricLoss: 1}})
	c.Step(Record{Step: 2, Metrics: map[string]float64{MetricLoss: math.NaN()}})
	c.Step(Record{Step: 3, Metrics: map[string]float64{MetricLoss: math.Inf(1)}})
	c.Step(Record{Step: 4, Metrics: map[string]float64{MetricLoss: 0.5}})
	require.NoError(t, c.Close())
	assert.Equal(t, 2, c.skipped)
	assert.Len(t, c.train, 2)
	readPNG(t, filepath.Join(dir, "nan.png"))
}

func TestLossCurveUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	c := NewLossCurve(filepath.Join(file, "loss.png"))
	c.Step(Record{Step: 1, Metrics: map[string]float64{MetricLoss: 1}})
	err := c.Close()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "loss curve")
	assert.Equal(t, err, c.Close(), "Close reports the same error again")
}
