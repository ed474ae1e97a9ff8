//go:build !race

package scenarios_test

const slowdown = 1
