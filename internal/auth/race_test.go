//go:build race

package auth

// raceEnabled: the race detector makes sync.Pool drop objects at random, so allocation
// counts are meaningless under -race.
const raceEnabled = true
