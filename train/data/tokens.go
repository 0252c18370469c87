package data

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/onnxtrain/onnxtrain/graph"
)

// TokenOptions configures OpenTokens.
type TokenOptions struct {
	// DType is the token width in the file: "uint16" (nanoGPT's choice
	// for vocabularies up to 65536, the default when empty) or "uint32".
	DType string
	// SeqLen is the window length T: example i is the tokens
	// [i*T, i*T+T) and its targets are the tokens one further on.
	SeqLen int
	// Input names the graph input the windows feed; InputDType is its type
	// (Int64 when unset, or Int32).
	Input      string
	InputDType graph.DType
	// Target names a graph input that takes the next-token targets (a
	// graph that computes its own loss); when empty, the targets are the
	// labels. TargetDType is its type (Int64 when unset, or Int32).
	Target      string
	TargetDType graph.DType
	// Vocab, when positive, is checked against every token gathered: a
	// token >= Vocab is an error naming its position in the file.
	Vocab int
}

// Tokens is a flat binary file of little-endian unsigned token ids, as
// GPT training scripts write them (numpy's tofile of a uint16 or uint32
// array), cut into windows of SeqLen tokens: example i feeds tokens
// [i*T, i*T+T) and targets [i*T+1, i*T+T+1). The windows do not overlap;
// the tokens after the last whole window (with its one extra target token)
// are not used. The file is read at Gather time (only the windows asked
// for), so it may be far larger than memory.
type Tokens struct {
	path   string
	opts   TokenOptions
	width  int   // bytes per token
	tokens int64 // tokens in the file
	n      int
}

// OpenTokens opens a token file and checks its size against the options.
func OpenTokens(path string, opts TokenOptions) (*Tokens, error) {
	d := &Tokens{path: path, opts: opts}
	switch opts.DType {
	case "", "uint16":
		d.width = 2
	case "uint32":
		d.width = 4
	default:
		return nil, fmt.Errorf("data: %s: token dtype %q: want uint16 or uint32", path, opts.DType)
	}
	if opts.SeqLen <= 0 {
		return nil, fmt.Errorf("data: %s: sequence length %d: token windows need a positive length (the graph input %q has no fixed length; set it with --seq-len)", path, opts.SeqLen, opts.Input)
	}
	if opts.Input == "" {
		return nil, fmt.Errorf("data: %s: no graph input named for the token windows", path)
	}
	for _, dt := range []*graph.DType{&d.opts.InputDType, &d.opts.TargetDType} {
		if *dt == graph.Undefined {
			*dt = graph.Int64
		}
		if *dt != graph.Int64 && *dt != graph.Int32 {
			return nil, fmt.Errorf("data: %s: token windows feed int64 or int32 inputs, not %v", path, *dt)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("data: %s is a folder, not a token file", path)
	}
	if st.Size()%int64(d.width) != 0 {
		return nil, fmt.Errorf("data: %s: %d bytes is not a whole number of %s tokens (%d bytes each); is --token-dtype right?", path, st.Size(), d.dtypeName(), d.width)
	}
	d.tokens = st.Size() / int64(d.width)
	windows := (d.tokens - 1) / int64(opts.SeqLen)
	if d.tokens < 1 || windows < 1 {
		return nil, fmt.Errorf("data: %s: %d tokens, fewer than one window of %d plus its next-token target", path, d.tokens, opts.SeqLen)
	}
	if windows > int64(int(^uint(0)>>1)) {
		return nil, fmt.Errorf("data: %s: %d windows are too many to index", path, windows)
	}
	d.n = int(windows)
	return d, nil
}

func (d *Tokens) dtypeName() string {
	if d.width == 4 {
		return "uint32"
	}
	return "uint16"
}

// Len is the number of windows.
func (d *Tokens) Len() int { return d.n }

// TokenCount is the number of tokens in the file.
func (d *Tokens) TokenCount() int64 { return d.tokens }

// Gather reads windows idx: the inputs (and, with Target set, the targets
// as a second input) and, without Target, the targets as labels.
func (d *Tokens) Gather(_ int, idx []int) (map[string]*graph.Tensor, *graph.Tensor, error) {
	T := d.opts.SeqLen
	in, err := graph.NewTensor(d.opts.InputDType, []int{len(idx), T})
	if err != nil {
		return nil, nil, err
	}
	tg, err := graph.NewTensor(d.opts.TargetDType, []int{len(idx), T})
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(d.path)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	buf := make([]byte, (T+1)*d.width)
	win := make([]uint32, T+1)
	for k, i := range idx {
		if i < 0 || i >= d.n {
			return nil, nil, fmt.Errorf("data: %s: window %d out of range [0,%d)", d.path, i, d.n)
		}
		start := int64(i) * int64(T)
		if _, err := f.ReadAt(buf, start*int64(d.width)); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, fmt.Errorf("data: %s: window %d (tokens %d..%d): %w", d.path, i, start, start+int64(T), err)
		}
		for j := range win {
			if d.width == 2 {
				win[j] = uint32(binary.LittleEndian.Uint16(buf[2*j:]))
			} else {
				win[j] = binary.LittleEndian.Uint32(buf[4*j:])
			}
			if d.opts.Vocab > 0 && int64(win[j]) >= int64(d.opts.Vocab) {
				return nil, nil, fmt.Errorf("data: %s: token %d (at token offset %d) is outside the model's vocabulary of %d", d.path, win[j], start+int64(j), d.opts.Vocab)
			}
		}
		putTokens(in, k*T, win[:T])
		putTokens(tg, k*T, win[1:])
	}
	if d.opts.Target == "" {
		return map[string]*graph.Tensor{d.opts.Input: in}, tg, nil
	}
	return map[string]*graph.Tensor{d.opts.Input: in, d.opts.Target: tg}, nil, nil
}

func putTokens(t *graph.Tensor, at int, w []uint32) {
	switch s := t.Data.(type) {
	case []int64:
		for j, v := range w {
			s[at+j] = int64(v)
		}
	case []int32:
		for j, v := range w {
			// int32 inputs hold ids below 2^31; larger ids wrap, as a
			// cast in numpy would, and a vocabulary check catches them.
			s[at+j] = int32(v)
		}
	}
}
