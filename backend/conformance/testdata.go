package conformance

import "github.com/onnxtrain/onnxtrain/internal/repodata"

// TestdataDir finds the ONNX conformance cases: $ONNX_TESTDATA when set, else
// testdata/onnx in the repository that holds the working directory, else
// ../shared/onnx/testdata beside it. It returns "" when none exists.
func TestdataDir() string { return repodata.ONNXTestdata() }
