package track

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair of cols columns: what is written to tty is read from
// pty.
func openPTY(t *testing.T, cols int) (pty, tty *os.File) {
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		testutil.Skip(t, "no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { pty.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(pty.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(pty.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { tty.Close() })
	require.NoError(t, unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: uint16(cols)}))
	return pty, tty
}

func TestProgressDrawsOnATerminal(t *testing.T) {
	pty, tty := openPTY(t, 60)
	p := NewProgress(tty, 4)
	_, isNop := p.(nop)
	require.False(t, isNop, "a pseudo-terminal is a terminal")
	for step := 1; step <= 4; step++ {
		p.Step(Record{Step: step, Metrics: map[string]float64{MetricLoss: 1 / float64(step), MetricSamplesPerS: 100}})
	}
	require.NoError(t, p.Close())
	require.NoError(t, tty.Close())

	out, _ := io.ReadAll(pty) // ends with EIO once the terminal side is closed
	text := string(out)
	assert.Contains(t, text, "\rstep 1/4 [")
	assert.Contains(t, text, "\rstep 4/4 [")
	for _, line := range strings.Split(strings.ReplaceAll(text, "\x1b[K", ""), "\r") {
		assert.LessOrEqual(t, len(strings.TrimSpace(line)), 59, "fits the 60 columns: %q", line)
	}
}
