package benchlib

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stats summarises a set of step times, in milliseconds.
type Stats struct {
	MedianMS float64
	MeanMS   float64
	// P90MS is the nearest-rank 90th percentile: the smallest time that at
	// least 90% of the steps did not exceed.
	P90MS float64
	MinMS float64
	MaxMS float64
}

// Summarize computes Stats over d; it errors on an empty slice.
func Summarize(d []time.Duration) (Stats, error) {
	if len(d) == 0 {
		return Stats{}, fmt.Errorf("benchlib: no step times to summarise")
	}
	ms := make([]float64, len(d))
	sum := 0.0
	for i, x := range d {
		ms[i] = float64(x) / float64(time.Millisecond)
		sum += ms[i]
	}
	sort.Float64s(ms)
	n := len(ms)
	s := Stats{MeanMS: sum / float64(n), MinMS: ms[0], MaxMS: ms[n-1]}
	s.MedianMS = median(ms)
	s.P90MS = ms[int(math.Ceil(0.9*float64(n)))-1]
	return s, nil
}

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// PeakRSS returns the process's peak resident set size in bytes (VmHWM in
// /proc/self/status). On systems without procfs it returns an error.
func PeakRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("benchlib: peak RSS: %w", err)
	}
	return statusField(b, "VmHWM")
}

// statusField reads a "Name:   123 kB" line of /proc/<pid>/status, in bytes.
func statusField(status []byte, name string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || key != name {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("benchlib: /proc/self/status %s: %w", name, err)
		}
		if len(f) > 1 {
			switch strings.ToLower(f[1]) {
			case "kb":
				v *= 1024
			case "mb":
				v *= 1024 * 1024
			default:
				return 0, fmt.Errorf("benchlib: /proc/self/status %s: unknown unit %q", name, f[1])
			}
		}
		return v, nil
	}
	return 0, fmt.Errorf("benchlib: /proc/self/status has no %s line", name)
}
