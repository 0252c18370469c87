package distrib

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeTransport stands in for MPI in a world of two whose other rank is
// imaginary: it records the calls, fails when told to, and in Debug's
// exchange answers for the other rank with a description it may alter.
type fakeTransport struct {
	calls   []string
	fail    error
	other   func(d *debugDesc) // alters the other rank's description
	closed  []string
	allSums func(x []float32) // what an all-reduce does to the data
}

func (f *fakeTransport) name() string { return "FAKE" }

func (f *fakeTransport) call(s string) error {
	f.calls = append(f.calls, s)
	return f.fail
}

func (f *fakeTransport) allReduce(data []float32, op ReduceOp) error {
	if err := f.call(fmt.Sprintf("allReduce %d %s", len(data), op)); err != nil {
		return err
	}
	if f.allSums != nil {
		f.allSums(data)
	}
	return nil
}

func (f *fakeTransport) reduceScatter(input, output []float32, op ReduceOp) error {
	return f.call(fmt.Sprintf("reduceScatter %d %d %s", len(input), len(output), op))
}

func (f *fakeTransport) allGather(input, output []float32) error {
	return f.call(fmt.Sprintf("allGather %d %d", len(input), len(output)))
}

func (f *fakeTransport) broadcast(data []float32, root int) error {
	return f.call(fmt.Sprintf("broadcast %d %d", len(data), root))
}

func (f *fakeTransport) barrier() error { return f.call("barrier") }

func (f *fakeTransport) allGatherBytes(obj []byte) ([][]byte, error) {
	if err := f.call("allGatherBytes"); err != nil {
		return nil, err
	}
	other := obj
	if f.other != nil {
		var d debugDesc
		if err := json.Unmarshal(obj, &d); err == nil {
			f.other(&d)
			other, _ = json.Marshal(d)
		}
	}
	return [][]byte{obj, other}, nil
}

func (f *fakeTransport) gatherBytes(obj []byte, root int) ([][]byte, error) {
	return [][]byte{obj, obj}, f.call(fmt.Sprintf("gatherBytes %d", root))
}

func (f *fakeTransport) broadcastBytes(obj []byte, root int) ([]byte, error) {
	return obj, f.call(fmt.Sprintf("broadcastBytes %d", root))
}

func (f *fakeTransport) close(broken bool, wait time.Duration) error {
	f.closed = append(f.closed, fmt.Sprintf("broken=%v wait=%s", broken, wait))
	return nil
}

func fakeGroup(debug bool) (*Group, *fakeTransport) {
	f := &fakeTransport{}
	g := newGroup(Config{Rank: 0, WorldSize: 2, Debug: debug, Timeout: 3 * time.Second})
	g.tr = f
	return g, f
}

// TestTransportCarriesCollectives: a Group with a transport hands every
// collective to it with the caller's arguments, numbers them as on TCP, and
// closes it when healthy.
func TestTransportCarriesCollectives(t *testing.T) {
	g, f := fakeGroup(false)
	ctx := context.Background()
	x := []float32{1, 2, 3, 4}
	f.allSums = func(x []float32) {
		for i := range x {
			x[i] *= 2
		}
	}
	require.NoError(t, g.AllReduce(ctx, x, Mean))
	assert.Equal(t, []float32{2, 4, 6, 8}, x, "the transport's result is the caller's")
	require.NoError(t, g.ReduceScatter(ctx, make([]float32, 6), make([]float32, 3), Sum))
	block, err := g.ReduceScatterInPlace(ctx, make([]float32, 8), Mean)
	require.NoError(t, err)
	assert.Len(t, block, 4)
	require.NoError(t, g.AllGather(ctx, make([]float32, 5), make([]float32, 10)))
	require.NoError(t, g.Broadcast(ctx, make([]float32, 7), 1))
	require.NoError(t, g.Barrier(ctx))
	objs, err := g.AllGatherObject(ctx, []byte("a"))
	require.NoError(t, err)
	assert.Len(t, objs, 2)
	_, err = g.GatherObject(ctx, []byte("b"), 1)
	require.NoError(t, err)
	b, err := g.BroadcastObject(ctx, []byte("c"), 0)
	require.NoError(t, err)
	assert.Equal(t, "c", string(b))
	assert.Equal(t, []string{"allReduce 4 mean", "reduceScatter 6 3 sum", "reduceScatter 8 4 mean", "allGather 5 10",
		"broadcast 7 1", "barrier", "allGatherBytes", "gatherBytes 1", "broadcastBytes 0"}, f.calls)
	assert.Equal(t, uint64(9), g.finished.Load())
	require.NoError(t, g.Close())
	assert.Equal(t, []string{"broken=false wait=3s"}, f.closed)
	err = g.Barrier(ctx)
	assert.ErrorIs(t, err, ErrClosed)
}

// TestTransportFailures: what a Group returns when its transport fails or
// is never reached.
func TestTransportFailures(t *testing.T) {
	ctx := context.Background()
	t.Run("transport error breaks the group", func(t *testing.T) {
		g, f := fakeGroup(false)
		f.fail = errors.New("MPI_Allreduce: MPI_ERR_OTHER")
		err := g.AllReduce(WithStep(ctx, 5), make([]float32, 3), Sum)
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrPeerLost)
		var re *RankError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, -1, re.Rank, "the transport does not say which rank failed")
		assert.Equal(t, "distrib: AllReduce (step 5, collective 1) failed on rank 0 in FAKE: MPI_Allreduce: MPI_ERR_OTHER", err.Error())
		f.fail = nil
		assert.Equal(t, err, g.Barrier(ctx), "a broken group returns the same error")
		assert.Len(t, f.calls, 1, "nor does it call the transport again")
		require.NoError(t, g.Close())
		assert.Equal(t, []string{"broken=true wait=3s"}, f.closed, "a broken group does not wait for the others")
	})
	t.Run("too large for the transport", func(t *testing.T) {
		g, f := fakeGroup(false)
		f.fail = fmt.Errorf("AllReduce of 3000000000 elements: %w", errTransportArg)
		err := g.AllReduce(ctx, make([]float32, 3), Sum)
		assert.ErrorIs(t, err, ErrInvalid)
		var re *RankError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 0, re.Rank)
	})
	t.Run("cancelled before the call", func(t *testing.T) {
		g, f := fakeGroup(false)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := g.AllReduce(cctx, make([]float32, 3), Sum)
		assert.ErrorIs(t, err, ErrAborted)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Empty(t, f.calls)
	})
	t.Run("invalid arguments", func(t *testing.T) {
		g, f := fakeGroup(false)
		err := g.ReduceScatter(ctx, make([]float32, 5), make([]float32, 3), Sum)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), "input has 5 elements, want world size 2 × output's 3 = 6")
		assert.Empty(t, f.calls)
	})
	t.Run("debug catches a length mismatch and the group goes on", func(t *testing.T) {
		g, f := fakeGroup(true)
		f.other = func(d *debugDesc) { d.N++ }
		err := g.AllReduce(ctx, make([]float32, 10), Sum)
		assert.ErrorIs(t, err, ErrMismatch)
		assert.Contains(t, err.Error(), "tensor lengths differ across ranks: rank 0: 10, rank 1: 11")
		assert.Equal(t, []string{"allGatherBytes"}, f.calls, "the mismatched all-reduce never ran")
		f.other = nil
		require.NoError(t, g.AllReduce(ctx, make([]float32, 10), Sum))
		assert.Equal(t, []string{"allGatherBytes", "allGatherBytes", "allReduce 10 sum"}, f.calls)
	})
}
