//go:build !race

package edmjson

const raceEnabled = false
