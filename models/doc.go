// Package models holds the small ONNX models exported from PyTorch by
// export.py, their golden (PyTorch-computed) inputs and outputs, and helpers
// that tests elsewhere use to find and read them.
//
// Regenerate everything with `/usr/bin/python3 models/export.py`; see
// README.md in this folder.
package models
