//go:build race

package edmjson

// raceEnabled: the race detector slows the decoder's loops several times over, so a time
// bound meant for a plain build would fail under -race.
const raceEnabled = true
