package track_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/onnxtrain/onnxtrain/train/track"
)

// A training loop reports every optimizer step and every validation pass to one tracker.
func Example() {
	dir, _ := os.MkdirTemp("", "track-example")
	defer os.RemoveAll(dir)
	tb, err := track.NewTensorBoard(filepath.Join(dir, "logs"))
	if err != nil {
		fmt.Println(err)
		return
	}
	tr := track.Multi(
		track.NewProgress(os.Stderr, 2), // draws only on a terminal
		track.NewJSONLines(os.Stdout),
		tb,
		track.NewLossCurve(filepath.Join(dir, "loss.png")),
	)
	tr.Step(track.Record{Step: 1, Epoch: 0, Metrics: map[string]float64{"loss": 2.25, "lr": 0.01, "samples": 64}})
	tr.Step(track.Record{Step: 2, Epoch: 0, Metrics: map[string]float64{"loss": 1.5, "lr": 0.01, "samples": 64}})
	tr.Eval(track.Record{Step: 2, Epoch: 0, Metrics: map[string]float64{"val_loss": 1.75, "val_accuracy": 0.5}})
	if err := tr.Close(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"step":1,"epoch":0,"loss":2.25,"lr":0.01,"samples":64}
	// {"step":2,"epoch":0,"loss":1.5,"lr":0.01,"samples":64}
	// {"step":2,"epoch":0,"val_loss":1.75,"val_accuracy":0.5}
}
