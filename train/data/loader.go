package data

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"sync"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Batch is one batch as the training step consumes it.
type Batch struct {
	// Inputs by graph input name, each with a leading dimension of Size.
	Inputs map[string]*graph.Tensor
	// Labels has a leading dimension of Size; nil for unlabelled data.
	Labels *graph.Tensor
	// Indices are the dataset indices of the examples, padding included.
	Indices []int
	// Size is len(Indices).
	Size int
	// Padding counts the trailing examples that repeat the epoch's first
	// ones so that every shard gets a full batch; a loss should leave them
	// out (or a metric count them once).
	Padding int
	// Epoch and Index place the batch: the Index-th (from 0) of Epoch.
	Epoch, Index int
}

// LoaderConfig configures NewLoader.
type LoaderConfig struct {
	// BatchSize is the number of examples per batch on each shard.
	BatchSize int
	// Shuffle draws a new permutation each epoch from (Seed, epoch): not
	// torch's RNG, but the same on every run and every shard.
	Shuffle bool
	Seed    uint64
	// DropLast drops the last, incomplete (global) batch of each epoch.
	DropLast bool
	// Prefetch is how many batches a background goroutine prepares ahead
	// while the step runs: 0 means 2, a negative value prepares each batch
	// only when it is asked for.
	Prefetch int
	// NumShards and ShardIndex split each global batch of
	// NumShards×BatchSize examples into NumShards contiguous chunks, one
	// per data-parallel rank (accelerate's scheme). Without DropLast, the
	// last global batch is completed with the epoch's first examples, so
	// every shard sees the same number of full batches (Batch.Padding).
	// NumShards 0 or 1 means no sharding; the last batch is then short,
	// as with torch's DataLoader.
	NumShards, ShardIndex int
}

// Position is where a loader is in the data: Batch batches of Epoch have
// been delivered. Resume with Epoch(ctx, pos.Epoch, pos.Batch).
type Position struct {
	Epoch int `json:"epoch"`
	Batch int `json:"batch"`
}

// Loader batches a Dataset.
type Loader struct {
	ds       Dataset
	cfg      LoaderConfig
	n        int // examples
	shards   int
	batches  int // per epoch, the same on every shard
	mu       sync.Mutex
	position Position
}

// NewLoader validates cfg and returns a loader over ds.
func NewLoader(ds Dataset, cfg LoaderConfig) (*Loader, error) {
	if ds == nil {
		return nil, errors.New("data: loader: dataset is nil")
	}
	if cfg.BatchSize <= 0 {
		return nil, fmt.Errorf("data: loader: batch size must be positive, got %d", cfg.BatchSize)
	}
	shards := max(cfg.NumShards, 1)
	if cfg.NumShards < 0 || cfg.ShardIndex < 0 || cfg.ShardIndex >= shards {
		return nil, fmt.Errorf("data: loader: shard %d of %d is out of range", cfg.ShardIndex, cfg.NumShards)
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = 2
	}
	l := &Loader{ds: ds, cfg: cfg, n: ds.Len(), shards: shards}
	if l.n < 0 {
		return nil, fmt.Errorf("data: loader: dataset length %d", l.n)
	}
	global := shards * cfg.BatchSize
	if cfg.DropLast {
		l.batches = l.n / global
	} else {
		l.batches = (l.n + global - 1) / global
	}
	return l, nil
}

// Len is the number of batches per epoch (on each shard).
func (l *Loader) Len() int { return l.batches }

// Position reports how far the consumer has got: the batch it is working
// on is Batch-1 of Epoch. At the end of an epoch it moves to (Epoch+1, 0).
func (l *Loader) Position() Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.position
}

func (l *Loader) setPosition(epoch, batch int) {
	if batch >= l.batches {
		epoch, batch = epoch+1, 0
	}
	l.mu.Lock()
	l.position = Position{Epoch: epoch, Batch: batch}
	l.mu.Unlock()
}

// Order returns the order in which epoch visits the examples (before
// sharding): a permutation drawn from (Seed, epoch) when shuffling, else
// 0..N-1.
func (l *Loader) Order(epoch int) []int {
	if l.cfg.Shuffle {
		return permutation(newRNG(l.cfg.Seed, streamShuffle, epoch, 0), l.n)
	}
	p := make([]int, l.n)
	for i := range p {
		p[i] = i
	}
	return p
}

// batchIndices returns this shard's examples for batch b of an epoch
// visiting order, and how many of them are padding.
func (l *Loader) batchIndices(order []int, b int) ([]int, int) {
	bs := l.cfg.BatchSize
	global := l.shards * bs
	start := b*global + l.cfg.ShardIndex*bs
	if l.shards == 1 {
		return append([]int(nil), order[start:min(start+bs, l.n)]...), 0
	}
	idx := make([]int, bs)
	pad := 0
	for k := range idx {
		j := start + k
		if j >= l.n {
			// Complete the last global batch from the epoch's start,
			// cycling when the data is smaller than a global batch.
			j = (j - l.n) % l.n
			pad++
		}
		idx[k] = order[j]
	}
	return idx, pad
}

// Epoch iterates over the batches of an epoch, skipping the first skip
// (to resume mid-epoch without loading them). With prefetching, batches
// are gathered by a goroutine that stops when the loop ends or ctx is
// cancelled; a cancelled ctx or a failed Gather ends the iteration with
// one (nil, error) pair.
func (l *Loader) Epoch(ctx context.Context, epoch, skip int) iter.Seq2[*Batch, error] {
	return func(yield func(*Batch, error) bool) {
		if skip < 0 || skip > l.batches {
			yield(nil, fmt.Errorf("data: loader: cannot skip %d batches of an epoch of %d", skip, l.batches))
			return
		}
		if epoch < 0 {
			yield(nil, fmt.Errorf("data: loader: negative epoch %d", epoch))
			return
		}
		l.setPosition(epoch, skip)
		if err := ctx.Err(); err != nil {
			yield(nil, err)
			return
		}
		order := l.Order(epoch)
		if l.cfg.Prefetch < 0 {
			for b := skip; b < l.batches; b++ {
				if err := ctx.Err(); err != nil {
					yield(nil, err)
					return
				}
				batch, err := l.load(epoch, order, b)
				if err != nil {
					yield(nil, err)
					return
				}
				l.setPosition(epoch, b+1)
				if !yield(batch, nil) {
					return
				}
			}
			return
		}
		type result struct {
			batch *Batch
			err   error
		}
		ctx, cancel := context.WithCancel(ctx)
		ch := make(chan result, l.cfg.Prefetch)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(ch)
			for b := skip; b < l.batches; b++ {
				if ctx.Err() != nil {
					return
				}
				batch, err := l.load(epoch, order, b)
				select {
				case ch <- result{batch, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		defer func() { cancel(); wg.Wait() }()
		for {
			if err := ctx.Err(); err != nil {
				yield(nil, err)
				return
			}
			var r result
			var ok bool
			select {
			case r, ok = <-ch:
			case <-ctx.Done():
				yield(nil, ctx.Err())
				return
			}
			if !ok {
				return
			}
			if r.err != nil {
				yield(nil, r.err)
				return
			}
			l.setPosition(epoch, r.batch.Index+1)
			if !yield(r.batch, nil) {
				return
			}
		}
	}
}

// load gathers batch b of an epoch.
func (l *Loader) load(epoch int, order []int, b int) (*Batch, error) {
	idx, pad := l.batchIndices(order, b)
	inputs, labels, err := l.ds.Gather(epoch, idx)
	if err != nil {
		return nil, fmt.Errorf("data: epoch %d batch %d: %w", epoch, b, err)
	}
	for _, name := range sortedNames(inputs) {
		if err := checkLeading(inputs[name], len(idx)); err != nil {
			return nil, fmt.Errorf("data: epoch %d batch %d: input %q: %w", epoch, b, name, err)
		}
	}
	if labels != nil {
		if err := checkLeading(labels, len(idx)); err != nil {
			return nil, fmt.Errorf("data: epoch %d batch %d: labels: %w", epoch, b, err)
		}
	}
	return &Batch{Inputs: inputs, Labels: labels, Indices: idx, Size: len(idx), Padding: pad, Epoch: epoch, Index: b}, nil
}

func checkLeading(t *graph.Tensor, n int) error {
	if t == nil {
		return errors.New("dataset returned a nil tensor")
	}
	if t.Rank() == 0 || t.Shape[0] != n {
		return fmt.Errorf("dataset returned shape %v for a batch of %d", t.Shape, n)
	}
	if v := reflect.ValueOf(t.Data); v.Kind() != reflect.Slice || v.Len() != t.Size() {
		return fmt.Errorf("dataset returned data that does not match shape %v", t.Shape)
	}
	return nil
}
