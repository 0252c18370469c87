package track

import (
	"cmp"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/onnxtrain/onnxtrain/internal/umaskfile"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Size of the loss-curve picture and of the margins around its plot area, in pixels.
const (
	curveWidth  = 800
	curveHeight = 480
	plotLeft    = 72
	plotRight   = curveWidth - 24
	plotTop     = 40
	plotBottom  = curveHeight - 48
)

// smoothFrom is the number of training points from which a smoothed loss is drawn over the
// raw one; the raw loss of single steps is noisy.
const smoothFrom = 50

var (
	colorBackground = color.RGBA{255, 255, 255, 255}
	colorGrid       = color.RGBA{230, 230, 230, 255}
	colorAxis       = color.RGBA{0, 0, 0, 255}
	colorText       = color.RGBA{40, 40, 40, 255}
	colorLoss       = color.RGBA{31, 119, 180, 255}  // blue
	colorLossRaw    = color.RGBA{166, 200, 228, 255} // light blue, under the smoothed loss
	colorValLoss    = color.RGBA{255, 127, 14, 255}  // orange
)

type point struct{ x, y float64 }

// LossCurve collects the loss of every step and the validation loss of every evaluation and
// draws them against the step into a PNG when closed.
type LossCurve struct {
	mu      sync.Mutex
	path    string
	train   []point
	val     []point
	skipped int // non-finite values, not drawn
	closed  bool
	err     error
}

// NewLossCurve returns a tracker that, on Close, writes to path a PNG of 800×480 pixels with
// the training loss ("loss" of every step, blue; with 50 steps or more, a smoothed line over
// the raw one) and the validation loss ("val_loss" of every evaluation, orange) against the
// step, with axes, ticks, labels and a legend. Non-finite values are left out and counted in
// the title. The folder of path is created if needed; the file is replaced whole.
func NewLossCurve(path string) Tracker {
	return &LossCurve{path: path}
}

// Step records the step's loss.
func (c *LossCurve) Step(r Record) { c.add(&c.train, r, MetricLoss) }

// Eval records the evaluation's validation loss.
func (c *LossCurve) Eval(r Record) { c.add(&c.val, r, MetricValLoss) }

func (c *LossCurve) add(series *[]point, r Record, name string) {
	v, ok := r.Value(name)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		c.skipped++
		return
	}
	*series = append(*series, point{float64(r.Step), v})
}

// Close draws the curve and writes the PNG.
func (c *LossCurve) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.err
	}
	c.closed = true
	// Records from concurrent callers may come out of order; the lines join points by step.
	byStep := func(a, b point) int { return cmp.Compare(a.x, b.x) }
	slices.SortStableFunc(c.train, byStep)
	slices.SortStableFunc(c.val, byStep)
	c.err = writePNG(c.path, renderLossCurve(c.train, c.val, c.skipped))
	return c.err
}

func writePNG(path string, img image.Image) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("track: loss curve: %w", err)
	}
	tmp, err := umaskfile.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("track: loss curve: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := png.Encode(tmp, img); err != nil {
		tmp.Close()
		return fmt.Errorf("track: encoding loss curve %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("track: writing loss curve %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("track: writing loss curve: %w", err)
	}
	return nil
}

// axis maps data values in [lo, hi] to pixels in [from, to].
type axis struct {
	lo, hi   float64
	from, to float64
	ticks    []float64
	decimals int // -1: %g labels
}

func (a axis) pixel(v float64) float64 {
	return a.from + (v-a.lo)/(a.hi-a.lo)*(a.to-a.from)
}

func (a axis) label(v float64) string {
	if a.decimals < 0 {
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	return strconv.FormatFloat(v, 'f', a.decimals, 64)
}

// niceStep returns 1, 2 or 5 times a power of ten, near span/n.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / mag; {
	case f < 1.5:
		return mag
	case f < 3.5:
		return 2 * mag
	case f < 7.5:
		return 5 * mag
	default:
		return 10 * mag
	}
}

// newAxis fits ticks to the data range [lo, hi]. With snap the range widens to whole ticks;
// integer keeps the step at 1 or more (for steps).
func newAxis(lo, hi, from, to float64, snap, integer bool) axis {
	if hi <= lo {
		pad := math.Max(1, math.Abs(lo)*0.1)
		if integer {
			pad = 1
		}
		lo, hi = lo-pad, hi+pad
	}
	step := niceStep(hi-lo, 6)
	if integer {
		step = math.Max(1, step)
	}
	// Tick k is at k*step, computed as k/(1/step) for steps below 1 (1/step is then a whole
	// number) so that it is the float64 nearest the decimal: 3/10, not 3*0.1.
	tick := func(k float64) float64 { return k * step }
	if step < 1 {
		inv := math.Round(1 / step)
		tick = func(k float64) float64 { return k / inv }
	}
	const slack = 1e-9 // of a step: lo/step may be a hair off a whole number
	first, last := math.Ceil(lo/step-slack), math.Floor(hi/step+slack)
	if snap {
		first, last = math.Floor(lo/step+slack), math.Ceil(hi/step-slack)
		lo, hi = tick(first), tick(last)
	}
	a := axis{lo: lo, hi: hi, from: from, to: to}
	for k := first; k <= last; k++ {
		t := tick(k)
		if t == 0 {
			t = 0 // not -0, which would be labelled "-0"
		}
		a.ticks = append(a.ticks, t)
	}
	a.decimals = max(0, int(-math.Floor(math.Log10(step))))
	if step >= 1e6 || step < 1e-4 {
		a.decimals = -1
	}
	return a
}

// renderLossCurve draws the picture NewLossCurve writes.
func renderLossCurve(train, val []point, skipped int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, curveWidth, curveHeight))
	draw.Draw(img, img.Bounds(), image.NewUniform(colorBackground), image.Point{}, draw.Src)

	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, series := range [][]point{train, val} {
		for _, p := range series {
			xlo, xhi = math.Min(xlo, p.x), math.Max(xhi, p.x)
			ylo, yhi = math.Min(ylo, p.y), math.Max(yhi, p.y)
		}
	}
	empty := len(train)+len(val) == 0
	if empty {
		xlo, xhi, ylo, yhi = 0, 1, 0, 1
	}
	xa := newAxis(xlo, xhi, plotLeft, plotRight, false, true)
	ya := newAxis(ylo, yhi, plotBottom, plotTop, true, false)

	face := basicfont.Face7x13
	// Grid, ticks and their labels.
	for _, t := range ya.ticks {
		y := math.Round(ya.pixel(t))
		fillRect(img, plotLeft, int(y), plotRight, int(y)+1, colorGrid)
		fillRect(img, plotLeft-5, int(y), plotLeft, int(y)+1, colorAxis)
		label := ya.label(t)
		drawText(img, face, plotLeft-8-textWidth(face, label), int(y)+4, label, colorText)
	}
	for _, t := range xa.ticks {
		x := math.Round(xa.pixel(t))
		fillRect(img, int(x), plotTop, int(x)+1, plotBottom, colorGrid)
		fillRect(img, int(x), plotBottom, int(x)+1, plotBottom+5, colorAxis)
		label := xa.label(t)
		drawText(img, face, int(x)-textWidth(face, label)/2, plotBottom+18, label, colorText)
	}
	// Axes.
	fillRect(img, plotLeft, plotTop, plotLeft+1, plotBottom+1, colorAxis)
	fillRect(img, plotLeft, plotBottom, plotRight+1, plotBottom+1, colorAxis)
	drawText(img, face, (plotLeft+plotRight-textWidth(face, "step"))/2, curveHeight-10, "step", colorText)

	title := "loss vs step"
	if skipped > 0 {
		title += fmt.Sprintf(" (%d non-finite values not drawn)", skipped)
	}
	drawText(img, face, plotLeft, 24, title, colorText)
	if empty {
		msg := "no loss recorded"
		drawText(img, face, (plotLeft+plotRight-textWidth(face, msg))/2, (plotTop+plotBottom)/2, msg, colorText)
		return img
	}

	type legendEntry struct {
		name string
		col  color.RGBA
	}
	var legend []legendEntry
	if len(train) >= smoothFrom {
		drawSeries(img, xa, ya, train, colorLossRaw, 1)
		drawSeries(img, xa, ya, smooth(train), colorLoss, 2)
		legend = append(legend, legendEntry{"loss", colorLossRaw}, legendEntry{"loss (smoothed)", colorLoss})
	} else if len(train) > 0 {
		drawSeries(img, xa, ya, train, colorLoss, 2)
		legend = append(legend, legendEntry{"loss", colorLoss})
	}
	if len(val) > 0 {
		drawSeries(img, xa, ya, val, colorValLoss, 2)
		for _, p := range val {
			fillDisc(img, xa.pixel(p.x), ya.pixel(p.y), 3.5, colorValLoss)
		}
		legend = append(legend, legendEntry{"val_loss", colorValLoss})
	}
	// Legend, right-aligned above the plot.
	x := plotRight
	for i := len(legend) - 1; i >= 0; i-- {
		e := legend[i]
		x -= textWidth(face, e.name)
		drawText(img, face, x, 24, e.name, colorText)
		x -= 26
		drawLine(img, float64(x), 20, float64(x+20), 20, 2, e.col)
		x -= 16
	}
	return img
}

// smooth returns the exponential moving average of points, debiased as TensorBoard's, with a
// window of about a fiftieth of the run.
func smooth(points []point) []point {
	weight := 1 - 1/math.Max(2, float64(len(points))/smoothFrom)
	out := make([]point, len(points))
	ema, norm := 0.0, 0.0
	for i, p := range points {
		ema = weight*ema + (1-weight)*p.y
		norm = weight*norm + (1 - weight)
		out[i] = point{p.x, ema / norm}
	}
	return out
}

func drawSeries(img *image.RGBA, xa, ya axis, points []point, col color.RGBA, width float64) {
	if len(points) == 1 {
		fillDisc(img, xa.pixel(points[0].x), ya.pixel(points[0].y), width+1, col)
		return
	}
	for i := 1; i < len(points); i++ {
		a, b := points[i-1], points[i]
		drawLine(img, xa.pixel(a.x), ya.pixel(a.y), xa.pixel(b.x), ya.pixel(b.y), width, col)
	}
}

// drawLine draws an anti-aliased segment of the given width: each pixel is covered by how
// far its centre lies inside the capsule around the segment.
func drawLine(img *image.RGBA, x0, y0, x1, y1, width float64, col color.RGBA) {
	r := width / 2
	minX, maxX := int(math.Floor(math.Min(x0, x1)-r-1)), int(math.Ceil(math.Max(x0, x1)+r+1))
	minY, maxY := int(math.Floor(math.Min(y0, y1)-r-1)), int(math.Ceil(math.Max(y0, y1)+r+1))
	dx, dy := x1-x0, y1-y0
	length2 := dx*dx + dy*dy
	for py := minY; py <= maxY; py++ {
		for px := minX; px <= maxX; px++ {
			cx, cy := float64(px)+0.5, float64(py)+0.5
			t := 0.0
			if length2 > 0 {
				t = math.Max(0, math.Min(1, ((cx-x0)*dx+(cy-y0)*dy)/length2))
			}
			ex, ey := cx-(x0+t*dx), cy-(y0+t*dy)
			cover := r + 0.5 - math.Sqrt(ex*ex+ey*ey)
			if cover > 0 {
				blend(img, px, py, col, math.Min(1, cover))
			}
		}
	}
}

func fillDisc(img *image.RGBA, cx, cy, radius float64, col color.RGBA) {
	drawLine(img, cx, cy, cx, cy, 2*radius, col)
}

// blend mixes col over the pixel at (x, y) with weight a in [0, 1]; outside the picture it
// does nothing.
func blend(img *image.RGBA, x, y int, col color.RGBA, a float64) {
	if !(image.Point{x, y}.In(img.Rect)) {
		return
	}
	i := img.PixOffset(x, y)
	p := img.Pix[i : i+4 : i+4]
	mix := func(dst, src uint8) uint8 { return uint8(math.Round(float64(dst)*(1-a) + float64(src)*a)) }
	p[0], p[1], p[2], p[3] = mix(p[0], col.R), mix(p[1], col.G), mix(p[2], col.B), 255
}

func fillRect(img *image.RGBA, x0, y0, x1, y1 int, col color.RGBA) {
	draw.Draw(img, image.Rect(x0, y0, x1, y1), image.NewUniform(col), image.Point{}, draw.Src)
}

func textWidth(face font.Face, s string) int {
	return font.MeasureString(face, s).Round()
}

// drawText writes s with its baseline at y, starting at x.
func drawText(img *image.RGBA, face font.Face, x, y int, s string, col color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(col), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
