package train_test

import (
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
)

func loadInit(path string) (map[string]*graph.Tensor, error) {
	m, err := importer.Load(path)
	if err != nil {
		return nil, err
	}
	out := map[string]*graph.Tensor{}
	for k, v := range m.Graph.Initializers {
		out[k] = v.Clone()
	}
	return out, nil
}
