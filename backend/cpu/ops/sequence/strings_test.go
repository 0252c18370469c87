package sequence

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/onnxtrain/onnxtrain/graph"
)

func strs(shape []int, v ...string) *graph.Tensor {
	return &graph.Tensor{DType: graph.String, Shape: shape, Data: v}
}

func TestStringNormalizer(t *testing.T) {
	stop := &graph.Attr{Name: "stopwords", Type: graph.AttrStrings, Strings: []string{"The", "a"}}
	lower := &graph.Attr{Name: "case_change_action", Type: graph.AttrString, S: "LOWER"}
	x := strs([]int{1, 4}, "the", "Ünïcode", "A", "DOG")

	out := mustOp(t, 10, testNode("StringNormalizer", 1, 1, stop, lower), x)[0]
	assert.Equal(t, []int{1, 2}, out.Shape)
	assert.Equal(t, []string{"ünïcode", "dog"}, out.Data, "stopwords match regardless of case by default")

	sensitive := &graph.Attr{Name: "is_case_sensitive", Type: graph.AttrInt, I: 1}
	out = mustOp(t, 10, testNode("StringNormalizer", 1, 1, stop, sensitive), x)[0]
	assert.Equal(t, []string{"the", "Ünïcode", "A", "DOG"}, out.Data)

	// Everything filtered: one empty string, keeping the input's rank.
	out = mustOp(t, 10, testNode("StringNormalizer", 1, 1, stop), strs([]int{1, 2}, "a", "THE"))[0]
	assert.Equal(t, []int{1, 1}, out.Shape)
	assert.Equal(t, []string{""}, out.Data)
	out = mustOp(t, 10, testNode("StringNormalizer", 1, 1, stop), strs([]int{0}))[0]
	assert.Equal(t, []int{1}, out.Shape)

	_, err := runOp(t, 10, testNode("StringNormalizer", 1, 1), strs([]int{2, 1}, "a", "b"))
	assert.ErrorContains(t, err, "[C] or [1, C]")
	_, err = runOp(t, 10, testNode("StringNormalizer", 1, 1, &graph.Attr{Name: "case_change_action", S: "TITLE"}), x)
	assert.ErrorContains(t, err, "TITLE")
}

func tfidfNode(mode string, minGram, maxGram, maxSkip int64, counts, indexes []int64, weights []float32, pool any) *graph.Node {
	attrs := []*graph.Attr{
		{Name: "mode", Type: graph.AttrString, S: mode},
		intAttr("min_gram_length", minGram),
		intAttr("max_gram_length", maxGram),
		intAttr("max_skip_count", maxSkip),
		{Name: "ngram_counts", Type: graph.AttrInts, Ints: counts},
		{Name: "ngram_indexes", Type: graph.AttrInts, Ints: indexes},
	}
	if weights != nil {
		attrs = append(attrs, &graph.Attr{Name: "weights", Type: graph.AttrFloats, Floats: weights})
	}
	switch p := pool.(type) {
	case []int64:
		attrs = append(attrs, &graph.Attr{Name: "pool_int64s", Type: graph.AttrInts, Ints: p})
	case []string:
		attrs = append(attrs, &graph.Attr{Name: "pool_strings", Type: graph.AttrStrings, Strings: p})
	}
	return testNode("TfIdfVectorizer", 1, 1, attrs...)
}

func TestTfIdfVectorizer(t *testing.T) {
	// Pool: 1-grams "a", "b"; 2-grams ("a","b"), ("b","a"). Output
	// coordinates reversed.
	pool := []string{"a", "b", "a", "b", "b", "a"}
	counts, indexes := []int64{0, 2}, []int64{3, 2, 1, 0}
	x := strs([]int{2, 4}, "a", "b", "c", "a", "b", "b", "a", "x")

	// Row 0: a b c a — 1-grams a:2 b:1; 2-grams at skip 0: ab; skip 1: (a,c) (b,a); skip 2: (a,a).
	// Row 1: b b a x — 1-grams a:1 b:2; skip 0: bb ba; skip 1: (b,a) (b,x); skip 2: (b,x).
	tf := mustOp(t, 9, tfidfNode("TF", 1, 2, 2, counts, indexes, []float32{5, 5, 5, 5}, pool), x)[0]
	assert.Equal(t, []int{2, 4}, tf.Shape)
	assert.Equal(t, []float32{1, 1, 1, 2, 2, 0, 2, 1}, tf.Data, "TF ignores weights; 1-grams count once whatever the skip")

	w := []float32{0.5, 2, 3, 4}
	idf := mustOp(t, 9, tfidfNode("IDF", 1, 2, 2, counts, indexes, w, pool), x)[0]
	assert.Equal(t, []float32{4, 3, 2, 0.5, 4, 0, 2, 0.5}, idf.Data)
	tfidf := mustOp(t, 9, tfidfNode("TFIDF", 2, 2, 0, counts, indexes, w, pool), x)[0]
	assert.Equal(t, []float32{0, 3, 0, 0, 4, 0, 0, 0}, tfidf.Data)

	// 1-D int input; ngram_indexes need not cover every coordinate.
	ints := &graph.Tensor{DType: graph.Int32, Shape: []int{5}, Data: []int32{7, 8, 7, 8, 9}}
	y := mustOp(t, 9, tfidfNode("TF", 2, 2, 0, []int64{0, 0}, []int64{4}, nil, []int64{7, 8}), ints)[0]
	assert.Equal(t, []int{5}, y.Shape)
	assert.Equal(t, []float32{0, 0, 0, 0, 2}, y.Data)

	_, err := runOp(t, 9, tfidfNode("TF", 1, 1, 0, []int64{0}, []int64{0}, nil, []int64{7}), x)
	assert.ErrorContains(t, err, "must be int32 or int64")
	_, err = runOp(t, 9, tfidfNode("TF", 1, 2, 0, []int64{0, 1}, []int64{0, 1}, nil, []int64{7, 8, 9, 1}), ints)
	assert.ErrorContains(t, err, "not a multiple of 2")
	_, err = runOp(t, 9, tfidfNode("TF", 1, 1, 0, []int64{0}, []int64{0}, nil, []int64{7, 8}), ints)
	assert.ErrorContains(t, err, "2 n-grams")
	_, err = runOp(t, 9, tfidfNode("BM25", 1, 1, 0, []int64{0}, []int64{0}, nil, []int64{7}), ints)
	assert.ErrorContains(t, err, "BM25")
	_, err = runOp(t, 9, tfidfNode("TF", 1, 1, 0, []int64{0}, []int64{0}, nil, nil), ints)
	assert.ErrorContains(t, err, "exactly one of")
}
