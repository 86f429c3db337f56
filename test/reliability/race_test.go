//go:build race

package reliability

// raceEnabled: the race detector's shadow memory grows with the heap and
// is not given back, so RSS is reported but not asserted.
const raceEnabled = true
