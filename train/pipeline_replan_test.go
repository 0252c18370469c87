package train_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/train"
)

// A pipelined run of a zero-bubble schedule plans it for the pass times
// it measured after its second step (and says so on the message stream,
// not on standard output), and its losses stay those of one process with
// --grad-accum; 1F1B's order does not depend on costs and is not replanned.
func TestRunPipelineReplansZeroBubble(t *testing.T) {
	want := runRecords(t, pipelineConfig(t.TempDir()))
	require.Len(t, want, 4)
	for _, schedule := range []string{"zb1p", "zbv", "1f1b"} {
		t.Run(schedule, func(t *testing.T) {
			cfg := pipelineConfig(t.TempDir())
			cfg.PipelineStages, cfg.Schedule, cfg.GradAccum, cfg.MicroBatches = 2, schedule, 1, 4
			var out, msg bytes.Buffer
			_, err := train.Run(context.Background(), cfg, &out, &msg)
			require.NoError(t, err)
			var got []train.StepRecord
			for dec := json.NewDecoder(&out); dec.More(); {
				var r train.StepRecord
				require.NoError(t, dec.Decode(&r))
				got = append(got, r)
			}
			assertSameRecords(t, want, got)
			note := schedule + " replanned for the measured pass times"
			if schedule == "1f1b" {
				assert.NotContains(t, msg.String(), "replanned")
				return
			}
			assert.Contains(t, msg.String(), note)
			assert.NotContains(t, out.String(), "replanned")
		})
	}
}
