//go:build !race

package iwarp

// raceRelease and raceAcquire are no-ops outside race builds (see race.go).
func raceRelease() {}
func raceAcquire() {}
