package sequence

import (
	"strings"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("StringNormalizer", stringNormalizerKernel)
}

// stringNormalizerKernel drops the stopwords from a [C] or [1, C] string
// tensor, then lower- or upper-cases what is left (case_change_action LOWER,
// UPPER or NONE). Stopwords match exactly when is_case_sensitive is set and
// regardless of case otherwise. When every string is dropped the output is
// one empty string, of shape [1] or [1, 1]. The locale attribute is
// ignored: case mapping follows Unicode's default rules.
func stringNormalizerKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x, err := seqTensorInput(n, in, 0, "X")
	if err != nil {
		return nil, err
	}
	src, ok := x.Data.([]string)
	if !ok {
		return nil, n.Errorf("X must be a string tensor, got %v", x.DType)
	}
	twoDim := len(x.Shape) == 2
	if !(len(x.Shape) == 1 || (twoDim && x.Shape[0] == 1)) {
		return nil, n.Errorf("X must have shape [C] or [1, C], has %v", x.Shape)
	}
	var convert func(string) string
	switch action := n.AttrString("case_change_action", "NONE"); action {
	case "NONE", "":
	case "LOWER":
		convert = strings.ToLower
	case "UPPER":
		convert = strings.ToUpper
	default:
		return nil, n.Errorf("case_change_action %q is not one of LOWER, UPPER, NONE", action)
	}
	caseSensitive := n.AttrInt("is_case_sensitive", 0) != 0
	stop := map[string]bool{}
	var stopwords []string
	if a := n.Attr("stopwords"); a != nil {
		stopwords = a.Strings
	}
	for _, w := range stopwords {
		if !caseSensitive {
			w = strings.ToLower(w)
		}
		stop[w] = true
	}
	out := make([]string, 0, len(src))
	for _, s := range src {
		key := s
		if !caseSensitive && len(stop) > 0 {
			key = strings.ToLower(s)
		}
		if stop[key] {
			continue
		}
		if convert != nil {
			s = convert(s)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		out = []string{""}
	}
	shape := []int{len(out)}
	if twoDim {
		shape = []int{1, len(out)}
	}
	return []*graph.Tensor{{DType: graph.String, Shape: shape, Data: out}}, nil
}
