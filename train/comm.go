package train

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/distrib"
)

// groupComm is backend.Communicator over a distrib.Group: the collective
// ops of a data-parallel step call it from the kernels.
//
// During a Run (between begin and end) one goroutine carries every
// collective, in the order the kernels issue them: started all-reduces
// queue, synchronous calls (AllReduce, synchronised BatchNorm's
// AllReduceSum) queue behind them and wait for their turn. The group thus
// sees one caller, and every process the same sequence of messages, while
// the executor goes on with backward. Outside a Run the calls go straight
// to the group.
type groupComm struct {
	g        *distrib.Group
	step     int64 // optimizer step in progress, for errors
	nBuckets int   // buckets of the program, for errors

	mu      sync.Mutex
	queue   chan *commReq
	done    chan struct{}
	pending map[int]*commReq
	abort   chan struct{}
	staging []float32 // used by the carrier goroutine only

	// started counts the all-reduces started during Runs so far.
	started int
}

// Kinds of commReq.
const (
	commAllReduce = iota
	commReduceScatter
	commAllGather
)

// commReq is one queued collective.
type commReq struct {
	kind   int
	ctx    context.Context
	bucket int // -1: not a bucket
	// ReduceScatter: bufs[0] in, mine out; AllGather: bufs[0] mine, all out.
	mine, all []float32
	bufs      [][]float32
	op        backend.ReduceOp
	opts      backend.CommOptions
	done      chan struct{}
	err       error
	waited    bool // Wait returned err (guarded by groupComm.mu)
}

var errCommAborted = errors.New("the step failed before this collective started")

func newGroupComm(g *distrib.Group) *groupComm { return &groupComm{g: g} }

// WorldSize implements backend.Collective.
func (c *groupComm) WorldSize() int { return c.g.WorldSize() }

// Rank implements backend.Communicator.
func (c *groupComm) Rank() int { return c.g.Rank() }

// begin starts the carrier goroutine for one Run of step (1-based).
func (c *groupComm) begin(step int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = step
	c.queue = make(chan *commReq, 64)
	c.done = make(chan struct{})
	c.abort = make(chan struct{})
	c.pending = map[int]*commReq{}
	go c.carry(c.queue, c.done, c.abort)
}

// end stops the carrier after a Run. With failed set (the Run returned an
// error) the collectives not yet started are dropped; the one in progress
// finishes. It returns the error of a started all-reduce no Wait
// collected.
func (c *groupComm) end(failed bool) error {
	c.mu.Lock()
	q, done, abort, pending := c.queue, c.done, c.abort, c.pending
	c.queue, c.pending = nil, nil
	c.mu.Unlock()
	if q == nil {
		return nil
	}
	if failed {
		close(abort)
	}
	close(q)
	<-done
	var errs []error
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range pending {
		if r.err != nil && !r.waited && !errors.Is(r.err, errCommAborted) {
			errs = append(errs, r.err)
		}
	}
	return errors.Join(errs...)
}

// carry runs the queued collectives in order.
func (c *groupComm) carry(q chan *commReq, done, abort chan struct{}) {
	defer close(done)
	for r := range q {
		select {
		case <-abort:
			r.err = errCommAborted
		default:
			r.err = c.run(r)
		}
		close(r.done)
	}
}

// run performs one collective: an all-reduce over the concatenation of
// r.bufs, or ZeRO's reduce-scatter or all-gather.
func (c *groupComm) run(r *commReq) error {
	ctx := distrib.WithStep(r.ctx, c.step)
	var opts []distrib.Option
	if r.opts.Compress == "bf16" {
		opts = append(opts, distrib.WithBF16())
	}
	op := distrib.Sum
	if r.op == backend.ReduceMean {
		op = distrib.Mean
	}
	switch r.kind {
	case commReduceScatter:
		mine, err := c.g.ReduceScatterInPlace(ctx, r.bufs[0], op, opts...)
		if err != nil {
			return fmt.Errorf("ZeRO gradient reduce-scatter at step %d: %w", c.step, err)
		}
		r.mine = mine
		return nil
	case commAllGather:
		if err := c.g.AllGather(ctx, r.bufs[0], r.all); err != nil {
			return fmt.Errorf("ZeRO parameter all-gather at step %d: %w", c.step, err)
		}
		return nil
	}
	buf := r.bufs[0]
	if len(r.bufs) > 1 {
		n := 0
		for _, b := range r.bufs {
			n += len(b)
		}
		if cap(c.staging) < n {
			c.staging = make([]float32, 0, n)
		}
		buf = c.staging[:0]
		for _, b := range r.bufs {
			buf = append(buf, b...)
		}
	}
	if err := c.g.AllReduce(ctx, buf, op, opts...); err != nil {
		if r.bucket >= 0 {
			return fmt.Errorf("gradient all-reduce at step %d (bucket %d of %d): %w", c.step, r.bucket+1, c.nBuckets, err)
		}
		return fmt.Errorf("all-reduce at step %d: %w", c.step, err)
	}
	if len(r.bufs) > 1 {
		off := 0
		for _, b := range r.bufs {
			off += copy(b, buf[off:])
		}
	}
	return nil
}

// enqueue hands r to the carrier, or runs it at once outside a Run.
func (c *groupComm) enqueue(r *commReq) (queued bool, err error) {
	r.done = make(chan struct{})
	c.mu.Lock()
	q := c.queue
	if q != nil && r.bucket >= 0 {
		if _, dup := c.pending[r.bucket]; dup {
			c.mu.Unlock()
			return false, fmt.Errorf("bucket %d was started twice in one step", r.bucket)
		}
		c.pending[r.bucket] = r
		c.started++
	}
	c.mu.Unlock()
	if q == nil {
		r.err = c.run(r)
		close(r.done)
		return false, r.err
	}
	q <- r
	return true, nil
}

// AllReduce implements backend.Communicator.
func (c *groupComm) AllReduce(ctx context.Context, bufs [][]float32, op backend.ReduceOp, o backend.CommOptions) error {
	if len(bufs) == 0 {
		return nil
	}
	r := &commReq{ctx: ctx, bucket: -1, bufs: bufs, op: op, opts: o}
	queued, err := c.enqueue(r)
	if !queued {
		return err
	}
	return c.await(ctx, r)
}

// AllReduceSum implements backend.Collective.
func (c *groupComm) AllReduceSum(ctx context.Context, x []float32) error {
	return c.AllReduce(ctx, [][]float32{x}, backend.ReduceSum, backend.CommOptions{})
}

// StartAllReduce implements backend.Communicator.
func (c *groupComm) StartAllReduce(ctx context.Context, bucket int, bufs [][]float32, op backend.ReduceOp, o backend.CommOptions) error {
	if bucket < 0 {
		return fmt.Errorf("bucket %d: buckets are numbered from 0", bucket)
	}
	if len(bufs) == 0 {
		return fmt.Errorf("bucket %d has no tensors", bucket)
	}
	_, err := c.enqueue(&commReq{ctx: ctx, bucket: bucket, bufs: bufs, op: op, opts: o})
	return err
}

// ReduceScatter implements backend.Communicator.
func (c *groupComm) ReduceScatter(ctx context.Context, x []float32, op backend.ReduceOp, o backend.CommOptions) ([]float32, error) {
	r := &commReq{kind: commReduceScatter, ctx: ctx, bucket: -1, bufs: [][]float32{x}, op: op, opts: o}
	queued, err := c.enqueue(r)
	if queued {
		err = c.await(ctx, r)
	}
	return r.mine, err
}

// AllGather implements backend.Communicator.
func (c *groupComm) AllGather(ctx context.Context, mine, all []float32) error {
	r := &commReq{kind: commAllGather, ctx: ctx, bucket: -1, bufs: [][]float32{mine}, all: all}
	queued, err := c.enqueue(r)
	if !queued {
		return err
	}
	return c.await(ctx, r)
}

// Wait implements backend.Communicator.
func (c *groupComm) Wait(ctx context.Context, bucket int) error {
	c.mu.Lock()
	r := c.pending[bucket]
	c.mu.Unlock()
	if r == nil {
		return fmt.Errorf("wait for bucket %d, which was not started in this step", bucket)
	}
	err := c.await(ctx, r)
	select {
	case <-r.done: // its outcome reached a caller
		c.mu.Lock()
		r.waited = true
		c.mu.Unlock()
	default:
	}
	return err
}

func (c *groupComm) await(ctx context.Context, r *commReq) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ backend.Communicator = (*groupComm)(nil)
