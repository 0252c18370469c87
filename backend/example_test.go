package backend_test

import (
	"context"
	"fmt"
	"log"

	"github.com/onnxtrain/onnxtrain/backend"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu" // registers "cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
)

// A backend is chosen by name (its package registers itself when
// imported), compiles a model once, and runs it on named inputs as often as
// needed. Here: the MLP fixture's inference export on a batch of two
// images.
func ExampleOpen() {
	m, err := importer.Load("../models/mlp/mlp_eval.onnx")
	if err != nil {
		log.Fatal(err)
	}
	b, err := backend.Open("cpu")
	if err != nil {
		log.Fatal(err)
	}
	exe, err := b.Compile(m, backend.CompileOptions{})
	if err != nil {
		log.Fatal(err)
	}
	x := graph.Zeros(graph.Float32, 2, 784) // two blank 28x28 images
	out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"input": x})
	if err != nil {
		log.Fatal(err)
	}
	y := out["output"]
	fmt.Println("output", y.DType, y.Shape)
	// Both rows are the same: the images are.
	same := true
	for j := 0; j < 10; j++ {
		same = same && y.Float(j) == y.Float(10+j)
	}
	fmt.Println("rows equal:", same)
	// Output:
	// output float32 [2 10]
	// rows equal: true
}
