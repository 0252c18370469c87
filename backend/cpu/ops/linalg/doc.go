// Package linalg holds the CPU kernels of one op family; they register
// themselves with kern from init.
package linalg
