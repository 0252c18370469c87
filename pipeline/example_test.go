package pipeline_test

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/pipeline"
)

// Print a schedule's action lists and what the simulator measures with
// unit costs: ZB-H1's bubble is (p-1)/3m = 1/9.
func ExampleSimulate() {
	s, _ := pipeline.New("zb1p", 2, 3, 0)
	fmt.Print(s)
	res, _ := pipeline.Simulate(s, pipeline.Costs{})
	fmt.Printf("bubble %.3f, peak activations %v\n", res.Bubble(), res.PeakActivations)
	// Output:
	// schedule zb1p: 2 ranks, 3 micro-batches, 1 chunks per rank
	// rank 0 (stages [0]): F0.s0 sendA0.s1@r1 F1.s0 sendA1.s1@r1 recvG0.s1@r1 BI0.s0 F2.s0 sendA2.s1@r1 recvG1.s1@r1 BI1.s0 BW0.s0 recvG2.s1@r1 BI2.s0 BW1.s0 BW2.s0
	// rank 1 (stages [1]): recvA0.s1@r0 F0.s1 BI0.s1 sendG0.s1@r0 recvA1.s1@r0 F1.s1 BI1.s1 sendG1.s1@r0 recvA2.s1@r0 F2.s1 BI2.s1 sendG2.s1@r0 BW0.s1 BW1.s1 BW2.s1
	// bubble 0.111, peak activations [3 3]
}
