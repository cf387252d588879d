//go:build !unix

package server

func processCPU() int64 { return -1 }
