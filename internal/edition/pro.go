//go:build pro

package edition

func init() { pro = true }
