//go:build !linux

package importer

func adviseHuge([]byte) {}
