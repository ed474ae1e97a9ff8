//go:build !race

package scenariotest

const race = false
