package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The example runs end to end on the committed fixture.
func TestExampleRuns(t *testing.T) {
	require.NoError(t, run("../../models/cifar_resnet/cifar_resnet_train.onnx", "../../models/cifar_resnet/train_case.npz", 2, t.TempDir()))
}
