package edition

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRequire(t *testing.T) {
	err := Require("inbound forwarding")
	if Pro() {
		assert.NoError(t, err)
		assert.Equal(t, "pro", Name())
		return
	}
	assert.ErrorIs(t, err, ErrProFeature)
	assert.EqualError(t, err, "inbound forwarding is a Pro feature (this is the community edition; build the Pro edition with: make EDITION=pro build)")
	assert.Equal(t, "community", Name())
}
