package importer_test

import (
	"fmt"
	"log"

	"github.com/onnxtrain/onnxtrain/importer"
)

// Load reads an ONNX file (here the MLP fixture PyTorch exported for
// training) into the graph IR: its inputs and outputs with their types, its
// initializers (the weights) and its nodes.
func ExampleLoad() {
	m, err := importer.Load("../models/mlp/mlp_train.onnx")
	if err != nil {
		log.Fatal(err)
	}
	g := m.Graph
	for _, in := range g.Inputs {
		if _, isWeight := g.Initializers[in.Name]; !isWeight {
			fmt.Println("input", in.Name, in.Type)
		}
	}
	for _, out := range g.Outputs {
		fmt.Println("output", out.Name, out.Type)
	}
	params := 0
	for _, t := range g.Initializers {
		params += t.Size()
	}
	fmt.Println("opset", m.Opset(), "initializers", len(g.Initializers), "parameters", params)
	// Output:
	// input input float32[batch,784]
	// output output float32[batch,10]
	// opset 17 initializers 6 parameters 52650
}
