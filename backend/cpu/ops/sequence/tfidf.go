package sequence

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("TfIdfVectorizer", tfidfKernel)
}

// tfidfTrie is a prefix tree over the pool's n-grams: the path from the root
// spells an n-gram, and id is that n-gram's ordinal in the pool (-1 for a
// prefix that is not itself in the pool).
type tfidfTrie[K comparable] struct {
	id   int
	next map[K]*tfidfTrie[K]
}

// insert adds gram with ordinal id; it reports false when gram is already
// in the tree.
func (t *tfidfTrie[K]) insert(gram []K, id int) bool {
	node := t
	for _, k := range gram {
		child := node.next[k]
		if child == nil {
			child = &tfidfTrie[K]{id: -1}
			if node.next == nil {
				node.next = map[K]*tfidfTrie[K]{}
			}
			node.next[k] = child
		}
		node = child
	}
	if node.id >= 0 {
		return false
	}
	node.id = id
	return true
}

// tfidfConfig holds a TfIdfVectorizer node's validated attributes.
type tfidfConfig struct {
	mode                      string
	minGram, maxGram, maxSkip int
	indexes                   []int     // output coordinate of each pool n-gram
	weights                   []float32 // nil: all ones
	width                     int       // output row length: max(indexes)+1
}

// tfidfGroups splits a pool of poolLen items into n-gram groups: group g
// (n-grams of length g+1) spans [starts[g], starts[g+1]) (the last runs to
// the end of the pool). It returns the pool offset and length of every
// n-gram, in pool order.
func tfidfGroups(n *graph.Node, starts []int64, poolLen int) (offsets, lengths []int, err error) {
	for g, s := range starts {
		end := int64(poolLen)
		if g+1 < len(starts) {
			end = starts[g+1]
		}
		if s < 0 || s > end || end > int64(poolLen) {
			return nil, nil, n.Errorf("ngram_counts %v does not split a pool of %d items into increasing ranges", starts, poolLen)
		}
		size := int64(g + 1)
		if (end-s)%size != 0 {
			return nil, nil, n.Errorf("the %d-grams span %d pool items, not a multiple of %d", size, end-s, size)
		}
		for o := s; o < end; o += size {
			offsets = append(offsets, int(o))
			lengths = append(lengths, int(size))
		}
	}
	return offsets, lengths, nil
}

// tfidfCount adds, for every row of keys (rows of length cols), the count of
// each pool n-gram found in it to counts (one row of len(pool n-grams) per
// input row). N-grams of length 2 and more are gathered at every skip from
// 0 to maxSkip; 1-grams once.
func tfidfCount[K comparable](root *tfidfTrie[K], keys []K, rows, cols int, c *tfidfConfig, counts []float32) {
	grams := len(c.indexes)
	for r := 0; r < rows; r++ {
		row := keys[r*cols : (r+1)*cols]
		cnt := counts[r*grams : (r+1)*grams]
		for step := 1; step <= c.maxSkip+1; step++ {
			minGram := c.minGram
			if step > 1 && minGram < 2 {
				minGram = 2 // 1-grams do not depend on the skip
			}
			if minGram > c.maxGram {
				break
			}
			for s := range row {
				node := root
				for size, pos := 1, s; size <= c.maxGram && pos < len(row); size, pos = size+1, pos+step {
					node = node.next[row[pos]]
					if node == nil {
						break
					}
					if size >= minGram && node.id >= 0 {
						cnt[node.id]++
					}
				}
			}
		}
	}
}

// tfidfBuild makes the trie of a pool whose n-grams lie at offsets with
// lengths, numbering them in pool order.
func tfidfBuild[K comparable](n *graph.Node, pool []K, offsets, lengths []int) (*tfidfTrie[K], error) {
	root := &tfidfTrie[K]{id: -1}
	for i, o := range offsets {
		if !root.insert(pool[o:o+lengths[i]], i) {
			return nil, n.Errorf("pool n-gram %d %v appears twice", i, pool[o:o+lengths[i]])
		}
	}
	return root, nil
}

// tfidfReadConfig validates the attributes that do not depend on the pool.
func tfidfReadConfig(n *graph.Node, grams int) (*tfidfConfig, error) {
	c := &tfidfConfig{mode: n.AttrString("mode", "")}
	switch c.mode {
	case "TF", "IDF", "TFIDF":
	default:
		return nil, n.Errorf("mode %q is not one of TF, IDF, TFIDF", c.mode)
	}
	for _, name := range []string{"min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts", "ngram_indexes"} {
		if n.Attr(name) == nil {
			return nil, n.Errorf("attribute %s is required", name)
		}
	}
	c.minGram = int(n.AttrInt("min_gram_length", 0))
	c.maxGram = int(n.AttrInt("max_gram_length", 0))
	c.maxSkip = int(n.AttrInt("max_skip_count", 0))
	if c.minGram < 1 || c.maxGram < c.minGram {
		return nil, n.Errorf("min_gram_length %d and max_gram_length %d must satisfy 1 <= min <= max", c.minGram, c.maxGram)
	}
	if c.maxSkip < 0 {
		return nil, n.Errorf("max_skip_count %d is negative", c.maxSkip)
	}
	idx := n.AttrInts("ngram_indexes", nil)
	if len(idx) != grams {
		return nil, n.Errorf("ngram_indexes has %d entries, the pool holds %d n-grams", len(idx), grams)
	}
	c.indexes = make([]int, grams)
	for i, v := range idx {
		if v < 0 || v >= graph.MaxElements {
			return nil, n.Errorf("ngram_indexes[%d] = %d is out of range", i, v)
		}
		c.indexes[i] = int(v)
		c.width = max(c.width, int(v)+1)
	}
	if a := n.Attr("weights"); a != nil && len(a.Floats) > 0 {
		if len(a.Floats) != grams {
			return nil, n.Errorf("weights has %d entries, the pool holds %d n-grams", len(a.Floats), grams)
		}
		c.weights = a.Floats
	}
	return c, nil
}

// tfidfKernel counts the pool's n-grams in each row of a 1-D or 2-D input
// of int32, int64 or strings and writes, per row, count (TF), weight if
// the count is nonzero (IDF), or count*weight (TFIDF) at each n-gram's
// output coordinate.
func tfidfKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x, err := seqTensorInput(n, in, 0, "X")
	if err != nil {
		return nil, err
	}
	var rows, cols int
	switch len(x.Shape) {
	case 1:
		rows, cols = 1, x.Shape[0]
	case 2:
		rows, cols = x.Shape[0], x.Shape[1]
	default:
		return nil, n.Errorf("X must be 1-D or 2-D, has shape %v", x.Shape)
	}
	intPool, strPool := n.Attr("pool_int64s"), n.Attr("pool_strings")
	if (intPool == nil) == (strPool == nil) {
		return nil, n.Errorf("exactly one of pool_int64s and pool_strings must be set")
	}
	poolLen := 0
	if intPool != nil {
		poolLen = len(intPool.Ints)
	} else {
		poolLen = len(strPool.Strings)
	}
	offsets, lengths, err := tfidfGroups(n, n.AttrInts("ngram_counts", nil), poolLen)
	if err != nil {
		return nil, err
	}
	c, err := tfidfReadConfig(n, len(offsets))
	if err != nil {
		return nil, err
	}
	counts := make([]float32, rows*len(offsets))
	if intPool != nil {
		var keys []int64
		switch s := x.Data.(type) {
		case []int64:
			keys = s
		case []int32:
			keys = make([]int64, len(s))
			for i, v := range s {
				keys[i] = int64(v)
			}
		default:
			return nil, n.Errorf("with pool_int64s, X must be int32 or int64, got %v", x.DType)
		}
		root, err := tfidfBuild(n, intPool.Ints, offsets, lengths)
		if err != nil {
			return nil, err
		}
		tfidfCount(root, keys, rows, cols, c, counts)
	} else {
		keys, ok := x.Data.([]string)
		if !ok {
			return nil, n.Errorf("with pool_strings, X must be a string tensor, got %v", x.DType)
		}
		root, err := tfidfBuild(n, strPool.Strings, offsets, lengths)
		if err != nil {
			return nil, err
		}
		tfidfCount(root, keys, rows, cols, c, counts)
	}
	shape := []int{c.width}
	if len(x.Shape) == 2 {
		shape = []int{rows, c.width}
	}
	out, err := kern.New(n, graph.Float32, shape)
	if err != nil {
		return nil, err
	}
	y := out.Data.([]float32)
	grams := len(c.indexes)
	for r := 0; r < rows; r++ {
		cnt := counts[r*grams : (r+1)*grams]
		dst := y[r*c.width : (r+1)*c.width]
		for i, v := range cnt {
			w := float32(1)
			if c.weights != nil {
				w = c.weights[i]
			}
			switch c.mode {
			case "IDF":
				if v > 0 {
					v = w
				}
			case "TFIDF":
				v *= w
			}
			dst[c.indexes[i]] += v
		}
	}
	return []*graph.Tensor{out}, nil
}
