// Package track reports training progress and metrics: a progress bar on a terminal, JSON
// lines, TensorBoard event files, a Prometheus /metrics endpoint and a PNG of the loss curve.
//
// A training loop calls Step after every optimizer step and Eval after every validation pass,
// then Close once at the end. Step and Eval never fail: a tracker that writes somewhere keeps
// the first error it meets, stops writing, and returns that error from Close. Every tracker in
// this package is safe for concurrent use; calls after Close are ignored.
package track
