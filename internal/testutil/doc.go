// Package testutil holds the skip policy every onnxtrain test follows, and
// helpers several packages' tests share (SmapsField: a mapping's fields in
// /proc/self/smaps, on Linux).
//
// Outside CI a test may skip when something it needs is absent (a Python
// module, a dataset, processes it may not start in -short mode). Under CI=true
// (exported by .ci/run) only two skips are allowed: missing hardware (a GPU,
// an instruction-set extension such as AVX-512) and the child half of a
// subprocess test that runs only when its parent starts it. Every other skip
// becomes a failure there, so a CI run that is green has run everything.
package testutil
