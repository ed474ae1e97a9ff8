package vtime

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCountBubble(t *testing.T) {
	dump := []byte("goroutine 1 [running, synctest bubble 1]:\nmain.f()\n\n" +
		"goroutine 2 [select (durable), 2 minutes, synctest bubble 12]:\nmain.g()\n\n" +
		"goroutine 3 [chan receive, synctest bubble 1]:\nmain.h()\n\n" +
		"goroutine 4 [IO wait]:\nmain.i()\n")
	assert.Equal(t, 2, CountBubble(dump, 1))
	assert.Equal(t, 1, CountBubble(dump, 12))
	assert.Equal(t, 0, CountBubble(dump, 2))
}
