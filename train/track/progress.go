package track

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// progressInterval is the least time between two redraws of the bar; the last step and
// evaluations always redraw.
const progressInterval = 100 * time.Millisecond

// NewProgress returns a progress bar for a run of total optimizer steps (0 or less when the
// total is not known). It writes to w only when w is a terminal (an *os.File for which
// golang.org/x/term reports one), redrawing one line in place with a carriage return:
//
//	step 120/1000 [####-------------------]  12%  epoch 0  loss 0.43210  812 samples/s  ETA 1m23s
//
// Every validation pass leaves one line above the bar. On anything else (a pipe, a file, a
// buffer) the tracker does nothing, so logs stay free of control characters. Close ends the
// line; it does not close w.
func NewProgress(w io.Writer, total int) Tracker {
	f, ok := w.(*os.File)
	if !ok || f == nil || !term.IsTerminal(int(f.Fd())) {
		return nop{}
	}
	width := 80
	if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
		width = cols
	}
	return newProgress(w, total, width, time.Now)
}

func newProgress(w io.Writer, total, width int, now func() time.Time) *progress {
	return &progress{w: w, total: total, width: width, now: now}
}

type progress struct {
	mu    sync.Mutex
	w     io.Writer
	total int
	width int
	now   func() time.Time

	started   bool
	startTime time.Time
	startStep int
	lastDraw  time.Time
	line      string // the bar as last drawn, "" before the first step
	err       error
	closed    bool
}

func (p *progress) Step(r Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.err != nil {
		return
	}
	now := p.now()
	if !p.started {
		// The first step carries start-up costs (compilation, the first batch): the ETA is
		// measured from its end.
		p.started, p.startTime, p.startStep = true, now, r.Step
	}
	eta := time.Duration(-1)
	if done := r.Step - p.startStep; done > 0 && p.total > 0 {
		perStep := now.Sub(p.startTime) / time.Duration(done)
		eta = perStep * time.Duration(max(0, p.total-r.Step))
	}
	loss, hasLoss := r.Value(MetricLoss)
	if !hasLoss {
		loss = math.NaN()
	}
	sps, hasSPS := r.Value(MetricSamplesPerS)
	if !hasSPS {
		sps = math.NaN()
	}
	p.line = progressLine(r.Step, p.total, r.Epoch, loss, sps, eta, p.width)
	if r.Step >= p.total && p.total > 0 || now.Sub(p.lastDraw) >= progressInterval || p.lastDraw.IsZero() {
		p.lastDraw = now
		p.write("\r" + p.line + "\x1b[K")
	}
}

func (p *progress) Eval(r Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.err != nil {
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\repoch %d  step %d", r.Epoch, r.Step)
	for _, name := range orderedNames(r.Metrics) {
		v := r.Metrics[name]
		if name == MetricValAccuracy {
			fmt.Fprintf(&sb, "  %s %.2f%%", name, 100*v)
			continue
		}
		fmt.Fprintf(&sb, "  %s %.5g", name, v)
	}
	sb.WriteString("\x1b[K\n")
	if p.line != "" {
		sb.WriteString(p.line)
	}
	p.write(sb.String())
}

func (p *progress) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return p.err
	}
	p.closed = true
	if p.line != "" && p.err == nil {
		// Redraw: the last step may have come too soon after the one before to be drawn.
		p.write("\r" + p.line + "\x1b[K\n")
	}
	return p.err
}

func (p *progress) write(s string) {
	if _, err := io.WriteString(p.w, s); err != nil {
		p.err = fmt.Errorf("track: writing progress bar: %w", err)
	}
}

// progressLine renders the bar for step of total (total <= 0: unknown), fitted to width
// columns. NaN loss or throughput and a negative eta are left out.
func progressLine(step, total, epoch int, loss, samplesPerS float64, eta time.Duration, width int) string {
	var tail strings.Builder
	fmt.Fprintf(&tail, "  epoch %d", epoch)
	if !math.IsNaN(loss) {
		fmt.Fprintf(&tail, "  loss %.5f", loss)
	}
	if !math.IsNaN(samplesPerS) {
		fmt.Fprintf(&tail, "  %s samples/s", FormatRate(samplesPerS))
	}
	if total <= 0 {
		return fitWidth(fmt.Sprintf("step %d", step)+tail.String(), width)
	}
	if eta >= 0 {
		fmt.Fprintf(&tail, "  ETA %s", formatETA(eta))
	}
	frac := math.Min(1, math.Max(0, float64(step)/float64(total)))
	head := fmt.Sprintf("step %*d/%d ", len(fmt.Sprint(total)), step, total)
	pct := fmt.Sprintf(" %3.0f%%", 100*frac)
	// The bar takes what is left of the line, between 10 and 30 cells.
	barWidth := width - 1 - len(head) - len(pct) - tail.Len() - 2
	barWidth = min(30, max(10, barWidth))
	filled := int(frac * float64(barWidth))
	bar := "[" + strings.Repeat("#", filled) + strings.Repeat("-", barWidth-filled) + "]"
	return fitWidth(head+bar+pct+tail.String(), width)
}

// fitWidth cuts s so that it fits in width-1 columns (writing the last column makes some
// terminals wrap). The bar is ASCII, so bytes are columns.
func fitWidth(s string, width int) string {
	if width > 1 && len(s) > width-1 {
		return s[:width-1]
	}
	return s
}

// FormatRate writes a throughput with the digits that tell it apart: whole
// numbers from 10 up, one decimal from 1, two below (a GPT-2-sized step of
// one sequence takes seconds: 0.25 samples/s, not 0).
func FormatRate(v float64) string {
	switch a := math.Abs(v); {
	case a >= 10 || math.IsInf(v, 0) || math.IsNaN(v):
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// formatETA writes d rounded to seconds, like 45s, 3m07s or 2h05m.
func formatETA(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, (s%3600)/60)
	}
}

// IsTerminal reports whether w is a terminal (where a progress bar is drawn).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && f != nil && term.IsTerminal(int(f.Fd()))
}
