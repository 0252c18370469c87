//go:build unix

package distrib

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A stopped (frozen) worker keeps its connections open, so only the timeout
// can catch it: the others fail after it, naming the frozen rank. When the
// frozen rank is rank 0, which arbitrates failures, the others still name it.
func TestMultiProcessFrozenWorkerIsNamed(t *testing.T) {
	for _, frozen := range []int{1, 0} {
		t.Run("rank"+string(rune('0'+frozen)), func(t *testing.T) {
			const world = 3
			ws := startWorkers(t, world, "loop", "ONNXTRAIN_DIST_TIMEOUT=1500ms")
			for _, w := range ws {
				w.waitLine(t, "ready", 60*time.Second)
			}
			require.NoError(t, ws[frozen].cmd.Process.Signal(syscall.SIGSTOP))
			defer ws[frozen].cmd.Process.Kill()
			for r := 0; r < world; r++ {
				if r == frozen {
					continue
				}
				code := ws[r].waitExit(t, 30*time.Second)
				msg := ws[r].errText()
				assert.Equal(t, 3, code, "rank %d: %s", r, msg)
				assert.Contains(t, msg, "distrib: rank "+string(rune('0'+frozen))+" did not answer within 1.5s during AllReduce (step ", "rank %d", r)
			}
		})
	}
}
